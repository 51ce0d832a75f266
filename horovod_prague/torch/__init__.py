"""Horovod's PyTorch API plus Prague's partial all-reduce.

Everything ``horovod.torch`` exports is here under the same name; ``init`` also takes the
Prague options, and four functions are added::

    import horovod_prague.torch as hvd

    hvd.init(strategy="smart", group_size=2)
    for batch in loader:
        loss_fn(model(batch)).backward()
        opt.step()                                   # local step, no global averaging
        hvd.partial_allreduce(model.parameters(), hvd.next_group())
    hvd.finish(model)                                # leave, then the final global average

``average_model(model)`` makes every rank hold the same model at any point (all ranks call it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import horovod.torch as _hvd
import torch
from horovod.torch import *  # noqa: F403  (the whole Horovod API, re-exported)

from ..common.binding import Binding


class TorchBinding(Binding):
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
                _hvd.grouped_allreduce_(data, op=_hvd.Average, name=tag, process_set=process_set)
                continue
            # Integer buffers (BatchNorm's num_batches_tracked): sum, then floor-divide.
            summed = _hvd.grouped_allreduce(data, op=_hvd.Sum, name=tag, process_set=process_set)
            for t, s in zip(data, summed, strict=True):
                t.copy_(torch.div(s, size, rounding_mode="floor"))


_binding = TorchBinding(_hvd)
init = _binding.init
runtime = _binding.runtime
config = _binding.config
next_group = _binding.next_group
partial_allreduce = _binding.partial_allreduce
average_model = _binding.average_model
finish = _binding.finish
shutdown = _binding.shutdown
