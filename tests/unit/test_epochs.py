"""The end of a training epoch runs a consensus: a DataLoader's full pass over a
DistributedSampler (or ElasticSampler) of every rank, with optimizer steps taken during it.
Passes that break early, take no step, or use another sampler run none."""

from __future__ import annotations

import threading
import types

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    TensorDataset,
)

import horovod_prague.torch  # noqa: F401  (installs the hook with the real binding)
from horovod_prague.torch import epochs

DATA = TensorDataset(torch.arange(16.0))


class FakeBinding:
    """What the hook asks of a binding: step counts, the job's option, the world's size."""

    def __init__(self, size: int = 4, option: str = "on") -> None:
        self.steps = 0
        self.job = types.SimpleNamespace(stats=types.SimpleNamespace(stepping_thread=None))
        self.consensus_calls = 0
        self.hvd = types.SimpleNamespace(size=lambda: size)
        self._config = types.SimpleNamespace(epoch_consensus=option)

    @property
    def steps_taken(self) -> int:
        return self.steps

    def config(self):
        return self._config

    def before_collective(self, process_set) -> None:
        assert process_set is None
        self.consensus_calls += 1


@pytest.fixture
def install():
    """Put a FakeBinding (made with the given arguments) behind the hook for one test."""
    real = list(epochs._binding)

    def put(**kwargs) -> FakeBinding:
        binding = FakeBinding(**kwargs)
        epochs.end_epochs_with_consensus(binding)
        return binding

    yield put
    epochs._binding[:] = real


@pytest.fixture
def fake(install):
    return install()


def _train(loader, binding, stop_after: int | None = None) -> int:
    batches = 0
    for _ in loader:
        binding.steps += 1
        binding.job.stats.stepping_thread = threading.get_ident()
        batches += 1
        if stop_after is not None and batches == stop_after:
            break
    return batches


def test_each_training_epoch_over_a_distributed_sampler_ends_in_one_consensus(fake):
    sampler = DistributedSampler(DATA, num_replicas=4, rank=1)
    loader = DataLoader(DATA, batch_size=2, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert _train(loader, fake) == 2
        assert fake.consensus_calls == epoch + 1


def test_persistent_workers_count_each_pass(fake):
    """A loader with persistent workers reuses its iterator: each pass is counted anew."""
    sampler = DistributedSampler(DATA, num_replicas=4, rank=0)
    loader = DataLoader(DATA, batch_size=2, sampler=sampler, num_workers=1, persistent_workers=True)
    _train(loader, fake)
    list(loader)  # a pass without steps: an evaluation
    _train(loader, fake)
    assert fake.consensus_calls == 2


def test_passes_without_steps_early_breaks_other_samplers_and_other_worlds_run_none(fake):
    loader = DataLoader(DATA, batch_size=2, sampler=DistributedSampler(DATA, 4, 0))
    list(loader)  # evaluation: no optimizer step during the pass
    _train(loader, fake, stop_after=1)  # broke off: no epoch ended
    _train(DataLoader(DATA, batch_size=2, sampler=RandomSampler(DATA)), fake)
    _train(DataLoader(DATA, batch_size=2, shuffle=True), fake)
    _train(DataLoader(DATA, batch_size=2, sampler=DistributedSampler(DATA, 2, 0)), fake)
    assert fake.consensus_calls == 0


def test_the_option_off_runs_none(install):
    binding = install(option="off")
    _train(DataLoader(DATA, batch_size=2, sampler=DistributedSampler(DATA, 4, 0)), binding)
    assert binding.consensus_calls == 0


class _Bucketing(BatchSampler):
    """A custom batch sampler, which may give ranks different numbers of batches."""


def test_a_custom_batch_sampler_runs_none(fake):
    batches = _Bucketing(DistributedSampler(DATA, 4, 0), batch_size=2, drop_last=False)
    _train(DataLoader(DATA, batch_sampler=batches), fake)
    assert fake.consensus_calls == 0


def test_a_pass_read_by_another_thread_runs_none(fake):
    """A prefetching thread (or an evaluation in the background) reads the loader while the
    main thread takes the steps: its pass's end is no epoch's end of the training loop."""
    loader = DataLoader(DATA, batch_size=2, sampler=DistributedSampler(DATA, 4, 0))
    fake.job.stats.stepping_thread = threading.get_ident()

    def read() -> None:
        for _ in loader:
            fake.steps += 1  # the main thread's steps, taken meanwhile

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    assert fake.steps == 2 and fake.consensus_calls == 0
