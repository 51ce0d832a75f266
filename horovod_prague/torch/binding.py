"""How Prague averages PyTorch tensors, and the one binding every torch module of ours shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import horovod.torch
import horovod.torch.mpi_ops
import torch

from ..common.binding import Binding
from ..common.import_hook import originals
from ..common.integer_sums import corrected, floor_mean, halves
from ..common.overlap import Overlap, PendingAverage, late_collective, wait_until

_hvd = originals(horovod.torch)
_horovods_synchronize = originals(horovod.torch.mpi_ops).synchronize


class TorchPendingAverage(PendingAverage):
    """A snapshot of the tensors, averaged by Horovod in the background.

    The same collectives as ``TorchBinding.average``: one per dtype, floating-point tensors
    averaged, integer ones summed (``_sent_integers``). Two copies of each tensor: the
    snapshot, to measure what the average changed, and the average (under
    ``weighting=progress``, the weighted copy sent, averaged in place; otherwise the output
    Horovod returns). With ``overlap``, each floating-point collective also carries this
    rank's ``overlap.flag``, and the correction is scaled by ``overlap.scale`` of the group's
    mean flag. Integer tensors (counters) take ``integer_share - snapshot`` of their sums,
    whole (``PendingAverage.apply``), with this rank's position in ``process_set``, added
    exactly (``integer_sums.corrected``). ``average`` stays separate: a blocking average must
    set the tensor to the collective's result exactly (``t + (avg - t)`` may differ from
    ``avg`` in the last bit), or ranks would not be bit-identical after a global average.
    """

    @torch.no_grad()
    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        name: str,
        process_set: Any,
        size: int,
        weight: float | None = None,
        overlap: Overlap | None = None,
    ) -> None:
        self.size = size
        self.weight = weight
        self.overlap = overlap
        self.moved: Callable[[torch.Tensor, torch.Tensor, float], None] | None = None
        """Told what ``apply`` adds to each floating-point tensor (``Binding.moved``)."""
        self.targets = list(tensors)
        self.position = 0 if all(_floating(t.dtype) for t in self.targets) else process_set.rank()
        self.snapshots = [
            t.detach().clone() if _floating(t.dtype) else _wide(t.detach()) for t in self.targets
        ]
        by_dtype: dict[torch.dtype, list[int]] = {}
        for i, t in enumerate(self.targets):
            by_dtype.setdefault(t.dtype, []).append(i)
        self.parts: list[tuple[list[int], torch.dtype, int]] = []
        for dtype, indices in by_dtype.items():
            tag = f"{name}.{str(dtype).removeprefix('torch.')}"
            floating = _floating(dtype)
            data = [self.snapshots[i] for i in indices]
            if floating:
                handle = _average_async(_sent(data, weight, overlap), weight, tag, process_set)
            else:
                handle = _hvd.grouped_allreduce_async(
                    _sent_integers(data, dtype), op=_hvd.Sum, name=tag, process_set=process_set
                )
            self.parts.append((indices, dtype, handle))

    def ready(self) -> bool:
        return all(_hvd.poll(handle) for _, _, handle in self.parts)

    @torch.no_grad()
    def apply(self) -> None:
        moves: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        for indices, dtype, handle in self.parts:
            results, scale = _hvd.synchronize(handle), 1.0
            floating = _floating(dtype)
            if floating:
                results, scale = _received(results, self.weight, self.overlap)
            else:
                means = _means(results, dtype, self.size)
                results = [_share(mean, remainder, self.position) for mean, remainder in means]
            for i, result in zip(indices, results, strict=True):
                target = self.targets[i].data
                if floating:
                    move = result.to(target.dtype).sub_(self.snapshots[i])
                    target.add_(move, alpha=scale)
                    moves.append((self.targets[i], move, scale))
                else:  # exactly, clamped to the dtype's range
                    exact = corrected(_wide(target), result, self.snapshots[i], torch.clamp)
                    target.copy_(_narrow(exact, target.dtype))
        if self.moved is not None:  # once every tensor is averaged
            for target, move, scale in moves:
                self.moved(target, move, scale)


class TorchBinding(Binding):
    """Averages tensors, grouped by dtype, with one fused Horovod collective per dtype."""

    pending_average = TorchPendingAverage

    def tensors(self, source: Any) -> list[torch.Tensor]:
        if isinstance(source, torch.nn.Module):
            return [*source.parameters(), *source.buffers()]
        if isinstance(source, torch.Tensor):
            return [source]
        return list(source)

    def scratch(self) -> torch.Tensor:
        return torch.zeros(1)

    @torch.no_grad()
    def average(
        self,
        tensors: Sequence[torch.Tensor],
        name: str,
        process_set: Any,
        size: int,
        overlap: Overlap | None = None,
        share_of: int | None = None,
    ) -> None:
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        weight = self.average_weight()
        timeout = self.config().timeout
        followed = share_of is not None and self.models.followed  # a group's, not a world's
        moves: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        for dtype, same in by_dtype.items():
            tag = f"{name}.{str(dtype).removeprefix('torch.')}"
            data = [t.data for t in same]
            if not _floating(dtype):
                summed = wait(
                    _hvd.grouped_allreduce_async(
                        _sent_integers(data, dtype), op=_hvd.Sum, name=tag, process_set=process_set
                    ),
                    timeout,
                    tag,
                )
                for t, (mean, remainder) in zip(data, _means(summed, dtype, size), strict=True):
                    if share_of is None:
                        t.copy_(mean)
                    else:
                        t.copy_(_narrow(_share(mean, remainder, share_of), t.dtype))
            elif weight is None and overlap is None:
                before = [t.clone() for t in data] if followed else []
                wait(
                    _hvd.grouped_allreduce_async_(
                        data, op=_hvd.Average, name=tag, process_set=process_set
                    ),
                    timeout,
                    tag,
                )
                if followed:
                    moves += [(t, d - b, 1.0) for t, d, b in zip(same, data, before, strict=True)]
            else:
                handle = _average_async(_sent(data, weight, overlap), weight, tag, process_set)
                results, scale = _received(wait(handle, timeout, tag), weight, overlap)
                for original, t, r in zip(same, data, results, strict=True):
                    if scale == 1.0:
                        if followed:
                            moves.append((original, r - t, 1.0))
                        t.copy_(r)  # exactly the group's result: consensus is bit-identical
                    else:
                        move = r.sub_(t)
                        t.add_(move, alpha=scale)
                        if followed:
                            moves.append((original, move, scale))
        for t, move, scale in moves:  # once every tensor is averaged
            self.models.moved(t, move, scale)


def _weighted(data: Sequence[torch.Tensor], weight: float) -> list[torch.Tensor]:
    """``weight * t`` for each tensor, then ``weight`` itself: the group's mean of these gives
    the weighted average. Half precision is widened to float32, where the product of a step
    count and a value cannot overflow."""
    wide = torch.float32 if data[0].dtype in (torch.float16, torch.bfloat16) else data[0].dtype
    weights = torch.full((1,), weight, dtype=wide, device=data[0].device)  # Horovod: one device
    return [*(t.to(wide) * weight for t in data), weights]


def _unweighted(results: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The weighted averages from the group's means of ``_weighted``'s tensors (in place)."""
    return [r.div_(results[-1]) for r in results[:-1]]


def _sent(
    data: Sequence[torch.Tensor], weight: float | None, overlap: Overlap | None
) -> list[torch.Tensor]:
    """What an average of floating-point ``data`` sends: weighted (``_weighted``) unless
    ``weight`` is None, then ``overlap``'s flag, if any. The same for blocking and overlapped
    averages, so that members running a group either way meet in one collective."""
    sent = list(data) if weight is None else _weighted(data, weight)
    if overlap is not None:
        sent.append(sent[-1].new_full((1,), overlap.flag))
    return sent


def _average_async(
    sent: list[torch.Tensor], weight: float | None, name: str, process_set: Any
) -> int:
    """Start Horovod's average of ``_sent``'s tensors. Weighted, they are copies of ours, so
    Horovod averages them in place: one copy of the model less than a separate output."""
    start = _hvd.grouped_allreduce_async if weight is None else _hvd.grouped_allreduce_async_
    return start(sent, op=_hvd.Average, name=name, process_set=process_set)


def _received(
    results: Sequence[torch.Tensor], weight: float | None, overlap: Overlap | None
) -> tuple[list[torch.Tensor], float]:
    """The averages in the group's means of ``_sent``'s tensors, and the scale the members
    agreed on (1 without ``overlap``)."""
    scale = 1.0
    if overlap is not None:
        scale = overlap.scale(results[-1][0].real.item())
        results = results[:-1]
    return (list(results) if weight is None else _unweighted(results)), scale


def _floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A copy of an integer or bool tensor as int64, so Horovod can sum it without overflow.

    Integer buffers (BatchNorm's ``num_batches_tracked``, masks, counters) are summed in
    int64: Horovod cannot reduce bool, and small integer types overflow.
    """
    return t.to(torch.int64, copy=True)


def _sent_integers(data: Sequence[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """What an average of integer or bool ``data`` sends, to be summed: each tensor as int64
    (``_wide``), and int64 ones as their two halves, ``hi`` then ``lo``, whose sums cannot
    overflow (``integer_sums``). The same for blocking and overlapped averages, so that
    members running a group either way meet in one collective."""
    if dtype != torch.int64:
        return [_wide(t) for t in data]
    return [half for t in data for half in halves(t)]


def _means(
    summed: Sequence[torch.Tensor], dtype: torch.dtype, size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The floor mean and the remainder of each tensor's sum over the group, from the sums
    of ``_sent_integers``'s tensors."""
    if dtype != torch.int64:
        return [(s.div(size, rounding_mode="floor"), s.remainder(size)) for s in summed]
    return [floor_mean(hi, lo, size) for hi, lo in zip(summed[0::2], summed[1::2], strict=True)]


def _share(mean: torch.Tensor, remainder: torch.Tensor, position: int) -> torch.Tensor:
    """``integer_share`` of each element of a group's sum, from its floor mean and remainder."""
    return mean + (remainder > position)


def _narrow(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An int64 tensor as ``dtype``, clamped to its range (a corrected mask stays 0 or 1)."""
    low, high = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    return t.clamp(low, high).to(dtype)


def wait(handle: int, timeout: float, name: str) -> Any:
    """``hvd.synchronize(handle)`` without its busy wait, and with a deadline.

    Horovod's ``synchronize`` spins (poll, yield, poll) until the operation completes. A rank
    waiting in a group for a slower member would burn a core doing so, taking it from the
    ranks that do work, and would keep Python's GIL so busy that rank 0's Group Generator
    thread answers late. ``wait_until`` sleeps between polls instead.
    """
    wait_until(lambda: _hvd.poll(handle), timeout, lambda: late_collective(name, timeout))
    return _hvd.synchronize(handle)


def synchronize(handle: int) -> Any:
    """Horovod's ``synchronize``, waiting without its busy wait and with a deadline: Prague
    puts it in place of Horovod's in the Horovod modules that wait with it
    (``import_hook.TORCH_WAITING_MODULES``), and under the drop-in in ``horovod.torch`` too, so a
    script's collectives, broadcasts and elastic syncs wait this way.

    The result and the errors are Horovod's. A script's collective that a member never reaches
    raises after the job's timeout, naming it and the members that did not reach it
    (``ScriptWaits.wait``). Horovod's spins (poll, yield, poll); on ranks that
    share cores, each spinning rank takes CPU from the background loops, which under Prague
    negotiate every group's process set each cycle, and global collectives then stalled for
    seconds (docs/design.md, *Busy waiting*).
    """
    if handle in horovod.torch.mpi_ops._handle_map:  # else Horovod's returns None at once
        binding.script_waits.wait(handle, lambda: _hvd.poll(handle))
    return _horovods_synchronize(handle)


binding = TorchBinding(_hvd)
