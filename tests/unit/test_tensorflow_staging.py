"""Prague steps staged inside a ``tf.function`` run in program order, as the ranks' peers expect."""

from __future__ import annotations

import inspect
import os
import time

import pytest

# Imported here, TensorFlow must come up with tf-keras, as horovod_prague.keras (whose
# doctests are collected in this same process) requires.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
staging = pytest.importorskip("horovod_prague.tensorflow.staging")


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
        staging.run_eagerly(slow_average, lambda: [v])
        w.assign_add(1.0)  # the next call names no variable: it must still follow both
        staging.run_eagerly(lambda: ran.append(("consensus", float(v.numpy()))), lambda: [])

    for _ in range(20):
        step()
    assert ran == [(name, float(k)) for k in range(1, 21) for name in ("average", "consensus")]
    staged = [
        op for op in step.get_concrete_function().graph.get_operations() if op.type == "EagerPyFunc"
    ]
    assert len(staged) == 2
    assert staged[0] in staged[1].control_inputs
    assert len(staged[1].inputs) >= len(staged[0].inputs)


def test_a_collectives_constant_inputs_are_passed_through_the_staged_consensus():
    """Grappler folds an op whose inputs are all constants by running it while it optimizes
    the function; a Horovod collective so folded would run before the staged consensus, out
    of the rank's program order. Such inputs go through a stateful py_function after it."""
    import inspect

    def collective(tensor, name=None, process_set=None):  # Horovod's argument names
        return tf.identity(tensor)

    v = tf.Variable([1.0, 2.0])
    seen: dict[str, object] = {}

    @tf.function
    def f(x):
        after = staging.run_eagerly(lambda: None, lambda: [])
        inputs = {
            "constant": tf.fill([2, 2], 3.0),
            "argument": tf.reshape(x, [1]),
            "variable": v.read_value(),
        }
        results = {}
        for key, t in inputs.items():
            call = inspect.signature(collective).bind(t)
            staging.unfoldable_inputs(call, after)
            seen[key] = (t, call.arguments["tensor"], after)
            results[key] = collective(*call.args, **call.kwargs)
        return results

    out = f(tf.constant(5.0))
    assert out["constant"].numpy().tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert out["argument"].numpy().tolist() == [5.0]
    assert out["variable"].numpy().tolist() == [1.0, 2.0]
    original, passed, after = seen["constant"]
    assert staging._foldable(original)
    assert passed is not original and passed.op.type == "EagerPyFunc"
    assert after.op in passed.op.control_inputs
    assert passed.shape == original.shape
    assert not staging._foldable(passed)
    for key in ("argument", "variable"):
        original, passed, _ = seen[key]
        assert not staging._foldable(original)
        assert passed is original


def _input(ran: list[str], fail: bool) -> tf.Tensor:
    """A collective's input that takes a while (an input pipeline), or fails (the end of a
    dataset)."""

    def produce() -> tf.Tensor:
        time.sleep(0.05)
        if fail:
            raise ValueError("end of the data")
        ran.append("input")
        return tf.constant(1.0)

    return tf.py_function(produce, inp=[], Tout=tf.float32)


@pytest.mark.parametrize("fail", [False, True], ids=["ready", "failed"])
def test_a_staged_collectives_watch_begins_once_its_inputs_are_ready(fail):
    """The deadline counts the wait for the peers, not the rank's own input pipeline; an
    input that fails (a dataset's end) leaves no watch begun."""
    ran: list[str] = []
    signature = inspect.signature(lambda tensor, name=None: None)

    @tf.function
    def step() -> tf.Tensor:
        x = _input(ran, fail)
        call = signature.bind(x)
        begin = staging.staged_after_inputs(call, tf.constant(0), lambda: ran.append("begin"))
        with tf.control_dependencies([begin]):
            return tf.identity(x)

    if fail:
        with pytest.raises(Exception, match="end of the data"):
            step()
        assert ran == []
    else:
        step()
        assert ran == ["input", "begin"]
