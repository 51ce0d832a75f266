"""A consensus where a training epoch ends, so that a script evaluates one model on every rank.

Scripts evaluate after each epoch, each rank its own model on its shard of the test set, then
average the metric (Horovod's examples do: a test loop over a ``DistributedSampler``, then
``hvd.allreduce`` of the loss and accuracy). Under Prague the ranks' models differ between
global averages, so each rank would evaluate its own, and the metric would be the mean
over models that each saw a part of the recent data: with BatchNorm at 16 ranks, about
three points below what the consensus model scores (docs/benchmarks.md, *Each rank's
model, and the consensus*). The global collective of the metric brings the models to
consensus, but only after they were evaluated.

The end of a DataLoader's pass over a ``DistributedSampler`` (or Horovod's
``ElasticSampler``) that spans every rank is the same point of the program on every rank:
each rank's part has the same number of batches. Where the rank took optimizer steps during
the pass (a training epoch, not an evaluation), the pass's end runs a consensus
(``Binding.before_collective``, as before a global collective), and every rank leaves the
loop with the same model. A pass that breaks early ends no epoch; so does a loader over a
sampler of another kind (uneven data, which ``hvd.join`` ends). ``epoch_consensus=off`` (the
job's option) turns it off: a script whose epochs are a few steps long pays a global
average, and a wait for the slowest rank, at each. Under ``own_pace=on`` the same point
also gathers the ranks' speeds for the next pass (``pace.pass_ended``).

    import horovod.torch as hvd         # under horovodrun --prague
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:             # loader = DataLoader(..., sampler=sampler)
            ...; optimizer.step()
        evaluate(model)                 # the same model on every rank
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from horovod.torch.elastic.sampler import ElasticSampler
from torch.utils.data import DistributedSampler
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ..common.binding import Binding
from .pace import OwnPaceBatches, pass_ended, spans_every_rank


def _allreduce() -> Any:
    """Horovod's allreduce as a script calls it under Prague: guarded, named, with a deadline."""
    from horovod_prague.torch import allreduce

    return allreduce


STEPS_AT_START = "_prague_steps_at_start"
"""The attribute of a DataLoader's iterator that holds the rank's optimizer step count when
its pass began (an iterator with persistent workers makes several passes)."""


_binding: list[Binding] = []
"""The binding whose consensus an epoch's end runs (one; a list to be set in place)."""


def end_epochs_with_consensus(binding: Binding) -> None:
    """Make the end of a training epoch over a sampler of every rank run ``binding``'s
    consensus (torch's DataLoader iterators are patched once per process)."""
    _binding[:] = [binding]
    original = _BaseDataLoaderIter.__next__
    if getattr(original, "_prague", False):
        return

    @functools.wraps(original)
    def __next__(self: _BaseDataLoaderIter) -> Any:
        binding = _binding[0]
        if self._num_yielded == 0:
            setattr(self, STEPS_AT_START, binding.steps_taken)
        try:
            return original(self)
        except StopIteration:
            if _ends_a_training_epoch(self, binding):
                paced = (
                    self._index_sampler if isinstance(self._index_sampler, OwnPaceBatches) else None
                )
                measured = paced.measured() if paced else None  # before any wait for others
                if binding.config().epoch_consensus == "on":
                    binding.before_collective(None)
                if paced and measured:
                    pass_ended(paced, measured, _allreduce())
            raise

    __next__._prague = True  # type: ignore[attr-defined]
    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]


def _ends_a_training_epoch(loader_iter: _BaseDataLoaderIter, binding: Binding) -> bool:
    """Whether ``loader_iter``'s pass that just ended, on the thread that takes the optimizer
    steps, was over a sampler of every rank, batched by PyTorch's own ``BatchSampler`` (a
    custom batch sampler may give ranks different numbers of batches), with optimizer steps
    taken during it."""
    if binding.job.stats.stepping_thread != threading.get_ident():
        return False  # a loader read by another thread: a prefetcher, an evaluation
    if getattr(loader_iter, STEPS_AT_START, None) == binding.steps_taken:
        return False  # no step during the pass: an evaluation, or before training
    index_sampler = getattr(loader_iter, "_index_sampler", None)
    kinds = (DistributedSampler, ElasticSampler)
    return spans_every_rank(index_sampler, binding.hvd.size(), kinds) is not None
