"""The overlapped path on 4 ranks: run with ``horovodrun -np 4 ... python run_pytest.py``.

``HOROVOD_PRAGUE_IN_FLIGHT`` sets how many averages may be in flight at once.

Every test runs on all ranks in the same order. Expected values come from every rank's
snapshot, gathered with Horovod's own collectives (``horovod.torch``), not the ones under test.
"""

from __future__ import annotations

import itertools
import random
import time

import horovod.torch as raw
import pytest
import torch
from _averages import recording, step_until
from _report import digest

import horovod_prague.torch as hvd

STALENESS = 3


@pytest.fixture(scope="session", autouse=True)
def prague():
    hvd.init(strategy="random", group_size=2, staleness=STALENESS, timeout=30, seed=5)
    yield
    hvd.shutdown()


_names = itertools.count()

# A step asks the Group Generator for a group only when it may start an average, which
# depends on timing, so the loops below run until they have asked for a given number of
# groups, not for a given number of steps: with random divisions of every rank, a rank's
# k-th group is then its partners' k-th too, and no average is left for the next test to
# meet with other tensors.


def _gathered(t):
    return raw.allgather_object(t.detach().clone(), name=f"check.{next(_names)}")


def test_an_overlapped_average_adds_the_group_mean_minus_the_snapshot():
    started = 0
    for _ in range(8):
        t = torch.randn(1000, generator=torch.Generator().manual_seed(7 + hvd.rank()))
        snapshot = t.clone()
        group = hvd.exchange([t])
        assert group is not None, "nothing was in flight, so a group must start"
        t.add_(1.0)  # training goes on while the average is in flight
        hvd.drain()
        everyone = _gathered(snapshot)
        if len(group) < 2:
            assert torch.equal(t, snapshot + 1.0)
            continue
        started += 1
        mean = torch.stack([everyone[m] for m in group]).mean(0)
        torch.testing.assert_close(t, mean + 1.0)
    assert started > 0


def test_every_average_adds_its_group_mean_minus_its_snapshot():
    """However many averages are in flight at once, and whenever each is applied, the tensor
    ends as its own updates plus, for every average, the group's mean of the members'
    snapshots (weighted by their step counts) minus this rank's snapshot; scaled by
    1 / in_flight when any member started that average while another of its own ran."""
    t = torch.randn(1000, generator=torch.Generator().manual_seed(11 + hvd.rank()))
    start, own_updates = t.clone(), torch.zeros_like(t)

    def train():  # training goes on while averages are in flight
        t.add_(0.25 * (hvd.rank() + 1))
        own_updates.add_(0.25 * (hvd.rank() + 1))

    with recording(hvd._binding, _snapshot) as averages:
        step_until(hvd, [t], 16, averages, train)
    in_flight = hvd.config().in_flight
    assert max(r.in_flight for r in averages.records) == in_flight - 1, "as many as allowed"
    corrections, damped = averages.corrections(_gathered_objects, in_flight)
    torch.testing.assert_close(t, start + own_updates + corrections)
    if in_flight > 1:
        assert damped > 0, "some average was started while another ran"


def test_a_blocking_average_applies_the_averages_in_flight_first():
    """``partial_allreduce`` while this rank's own averages are in flight applies them first
    (``_averages.recording`` checks), and the tensor ends as above, blocking average
    included."""
    t = torch.randn(1000, generator=torch.Generator().manual_seed(13 + hvd.rank()))
    start, own_updates = t.clone(), torch.zeros_like(t)

    def train():
        t.add_(0.5 * (hvd.rank() + 1))
        own_updates.add_(0.5 * (hvd.rank() + 1))

    with recording(hvd._binding, _snapshot) as averages:
        step_until(hvd, [t], 12, averages, train, blocking_at=6)
    assert sum(r.blocking for r in averages.records) == 1, "one blocking average on this rank"
    corrections, _ = averages.corrections(_gathered_objects, hvd.config().in_flight)
    torch.testing.assert_close(t, start + own_updates + corrections)


def _snapshot(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def _gathered_objects(obj):
    return raw.allgather_object(obj, name=f"check.{next(_names)}")


def test_integer_tensors_take_the_group_floor_mean():
    counter = torch.tensor([10 * hvd.rank() + 3], dtype=torch.int64)
    group = hvd.exchange([counter])
    hvd.drain()
    if len(group) > 1:
        expected = sum(10 * m + 3 for m in group) // len(group)
        assert counter.item() == expected


def test_while_an_average_is_in_flight_steps_take_no_group():
    t = torch.zeros(10)
    averager = hvd._binding.job.averager
    groups = []
    while sum(g is not None for g in groups) < 12:  # as many groups on every rank
        groups.append(hvd.exchange([t]))
    hvd.drain()
    assert not averager.in_flight()
    # Between two groups fewer than STALENESS steps take none.
    gaps, run = [], 0
    for g in groups:
        if g is None:
            run += 1
        else:
            gaps.append(run)
            run = 0
    assert max(gaps) <= STALENESS - 1


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
    final = digest([*model.parameters(), *model.buffers()])
    assert len(set(raw.allgather_object(final, name="check.digest"))) == 1
