"""How Prague averages PyTorch tensors, and the one binding every torch module of ours shares."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import horovod.torch
import torch

from ..common.binding import Binding
from ..common.import_hook import originals

_hvd = originals(horovod.torch)


class TorchBinding(Binding):
    """Averages tensors, grouped by dtype, with one fused Horovod collective per dtype."""

    def tensors(self, source: Any) -> list[torch.Tensor]:
        if isinstance(source, torch.nn.Module):
            return [*source.parameters(), *source.buffers()]
        if isinstance(source, torch.Tensor):
            return [source]
        return list(source)

    @torch.no_grad()
    def average(
        self, tensors: Sequence[torch.Tensor], name: str, process_set: Any, size: int
    ) -> None:
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for dtype, same in by_dtype.items():
            tag = f"{name}.{str(dtype).removeprefix('torch.')}"
            data = [t.data for t in same]
            if dtype.is_floating_point or dtype.is_complex:
                wait(
                    _hvd.grouped_allreduce_async_(
                        data, op=_hvd.Average, name=tag, process_set=process_set
                    )
                )
                continue
            # Integer buffers (BatchNorm's num_batches_tracked): sum, then floor-divide.
            summed = wait(
                _hvd.grouped_allreduce_async(data, op=_hvd.Sum, name=tag, process_set=process_set)
            )
            for t, s in zip(data, summed, strict=True):
                t.copy_(torch.div(s, size, rounding_mode="floor"))


def wait(handle: int) -> Any:
    """``hvd.synchronize(handle)``, without its busy wait.

    Horovod's ``synchronize`` spins (poll, yield, poll) until the operation completes. A rank
    waiting in a group for a slower member would burn a core doing so, taking it from the
    ranks that do work, and would keep Python's GIL so busy that rank 0's Group Generator
    thread answers late. Sleeping between polls, from 20 us up to 1 ms, frees both.
    """
    delay = 20e-6
    while not _hvd.poll(handle):
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)
    return _hvd.synchronize(handle)


binding = TorchBinding(_hvd)
