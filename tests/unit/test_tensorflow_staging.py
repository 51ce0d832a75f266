"""Prague steps staged inside a ``tf.function`` run in program order, as the ranks' peers expect."""

from __future__ import annotations

import os
import time

import pytest

# Imported here, TensorFlow must come up with tf-keras, as horovod_prague.keras (whose
# doctests are collected in this same process) requires.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
binding = pytest.importorskip("horovod_prague.tensorflow.binding")


def test_staged_calls_run_in_program_order_after_the_updates_before_them():
    ran: list[tuple[str, float]] = []
    v = tf.Variable(0.0)
    w = tf.Variable(0.0)

    def slow_average() -> None:
        time.sleep(0.01)  # slow enough that an unordered later call would overtake it
        ran.append(("average", float(v.numpy())))

    @tf.function
    def step() -> None:
        v.assign_add(1.0)
        binding.run_eagerly(slow_average, lambda: [v])
        w.assign_add(1.0)  # the next call names no variable: it must still follow both
        binding.run_eagerly(lambda: ran.append(("consensus", float(v.numpy()))), lambda: [])

    for _ in range(20):
        step()
    assert ran == [(name, float(k)) for k in range(1, 21) for name in ("average", "consensus")]
    staged = [
        op for op in step.get_concrete_function().graph.get_operations() if op.type == "EagerPyFunc"
    ]
    assert len(staged) == 2
    assert staged[0] in staged[1].control_inputs
    assert len(staged[1].inputs) >= len(staged[0].inputs)
