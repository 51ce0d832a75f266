"""The overlapped path of ``horovod_prague.tensorflow`` on 4 ranks:
``horovodrun -np 4 ... run_pytest.py tf_overlap_checks.py``.

``HOROVOD_PRAGUE_IN_FLIGHT`` sets how many averages may be in flight at once. Every test runs
on all ranks in the same order; expected values come from every rank's snapshots, gathered
with Horovod's own collectives (``horovod.tensorflow``), not the ones under test.
"""

from __future__ import annotations

import itertools

import horovod.tensorflow as raw
import numpy as np
import pytest
import tensorflow as tf
from _averages import recording, step_until

import horovod_prague.tensorflow as hvd

STALENESS = 3


@pytest.fixture(scope="session", autouse=True)
def prague():
    hvd.init(strategy="random", group_size=2, staleness=STALENESS, timeout=30, seed=5)
    yield
    hvd.shutdown()


_names = itertools.count()


def _gathered(obj):
    return raw.allgather_object(obj, name=f"check.{next(_names)}")


def test_every_average_adds_its_group_mean_minus_its_snapshot():
    """Overlapped averages, and one blocking ``partial_allreduce`` while this rank's own are
    in flight (it applies them first: on the process set of one still running, Horovod's
    eager ops refused it as a duplicate name). The variable ends as its own updates
    plus, for every average, the group's mean of the members' snapshots (weighted by their
    step counts) minus this rank's snapshot, scaled by ``1 / in_flight`` when any member
    started that average while another of its own ran. Loops run to a fixed number of groups
    asked (``_averages.step_until``)."""
    rng = np.random.default_rng(11 + hvd.rank())
    v = tf.Variable(rng.standard_normal(500), dtype=tf.float64)
    start, own_updates = v.numpy().copy(), 0.0

    def train():
        nonlocal own_updates
        v.assign_add(tf.fill([500], tf.constant(0.25 * (hvd.rank() + 1), tf.float64)))
        own_updates += 0.25 * (hvd.rank() + 1)

    with recording(hvd._binding, lambda t: t.numpy().copy()) as averages:
        step_until(hvd, [v], 16, averages, train, blocking_at=8)
    in_flight = hvd.config().in_flight
    assert sum(r.blocking for r in averages.records) == 1, "one blocking average on this rank"
    assert max(r.in_flight for r in averages.records) == in_flight - 1, "as many as allowed"
    corrections, damped = averages.corrections(_gathered, in_flight)
    np.testing.assert_allclose(v.numpy(), start + own_updates + corrections, rtol=1e-10, atol=1e-10)
    if in_flight > 1:
        assert any(_gathered(damped)), "some average was started while another ran"


def test_integer_variables_take_the_group_floor_mean():
    counter = tf.Variable([10 * hvd.rank() + 3], dtype=tf.int64)
    group = hvd.exchange([counter])
    hvd.drain()
    assert group is not None, "nothing was in flight, so a group must start"
    if len(group) > 1:
        assert int(counter.numpy()[0]) == sum(10 * m + 3 for m in group) // len(group)
