"""The overlapped path on 4 ranks: run with ``horovodrun -np 4 ... python run_pytest.py``.

Every test runs on all ranks in the same order. Expected values come from every rank's
snapshot, gathered with Horovod's own collectives (``horovod.torch``), not the ones under test.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import time

import horovod.torch as raw
import pytest
import torch

import horovod_prague.torch as hvd

STALENESS = 2


@pytest.fixture(scope="session", autouse=True)
def prague():
    hvd.init(strategy="random", group_size=2, staleness=STALENESS, timeout=30, seed=5)
    yield
    hvd.shutdown()


_names = itertools.count()


def _gathered(t):
    return raw.allgather_object(t.detach().clone(), name=f"check.{next(_names)}")


def test_an_overlapped_average_adds_mix_times_the_change_to_the_snapshot():
    mix = hvd.config().mix_weight()
    assert mix == pytest.approx(1 / (STALENESS + 1))
    for _ in range(6):
        t = torch.randn(1000, generator=torch.Generator().manual_seed(7 + hvd.rank()))
        snapshot = t.clone()
        group = hvd.next_group()
        hvd.exchange([t], group)
        t.add_(1.0)  # training goes on while the average is in flight
        hvd.drain()
        everyone = _gathered(snapshot)
        if len(group) < 2:
            assert torch.equal(t, snapshot + 1.0)
            continue
        mean = torch.stack([everyone[m] for m in group]).mean(0)
        torch.testing.assert_close(t, snapshot + 1.0 + mix * (mean - snapshot))


def test_integer_tensors_take_the_group_floor_mean():
    counter = torch.tensor([10 * hvd.rank() + 3], dtype=torch.int64)
    group = hvd.next_group()
    hvd.exchange([counter], group)
    hvd.drain()
    if len(group) > 1:
        expected = sum(10 * m + 3 for m in group) // len(group)
        assert counter.item() == expected


def test_no_more_than_staleness_averages_stay_in_flight():
    t = torch.zeros(10)
    averager = hvd._binding._averager
    for _ in range(12):
        hvd.exchange([t], hvd.next_group())
        assert averager.in_flight() <= STALENESS
    hvd.drain()
    assert averager.in_flight() == 0


def test_optimizer_steps_with_random_delays_end_in_consensus():
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model=model)
    rng = random.Random(hvd.rank())
    for _ in range(40):
        time.sleep(rng.uniform(0, 0.01))
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
    assert hvd.average_model(model)
    digest = hashlib.sha256(
        b"".join(t.detach().numpy().tobytes() for t in [*model.parameters(), *model.buffers()])
    ).hexdigest()
    assert len(set(raw.allgather_object(digest, name="check.digest"))) == 1
