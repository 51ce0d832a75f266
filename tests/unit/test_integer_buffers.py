"""Integer tensors under overlapped averages, with Horovod's collectives stood in for in-process.

The members of a group are objects in one process: each starts its framework's pending
average on its own tensors, goes on counting, then applies it, as a rank does.
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from horovod_prague.common.overlap import Overlap, integer_share
from horovod_prague.torch import binding as torch_binding

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


class GroupCollectives:
    """Horovod's grouped all-reduce over ``size`` members that call it in turn.

    ``grouped_allreduce`` (TensorFlow's, blocking) waits on a thread until every member has
    sent; the async calls (PyTorch's) return a handle that polls ready once all have.
    """

    Sum, Average = "sum", "average"

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent: dict[str, list[tuple[str, list[np.ndarray]]]] = {}
        self.handles: list[str] = []
        self.in_place: dict[int, list[torch.Tensor]] = {}
        self.changed = threading.Condition()

    def _send(self, name: str, op: str, tensors: list[np.ndarray]) -> None:
        with self.changed:
            self.sent.setdefault(name, []).append((op, tensors))
            self.changed.notify_all()

    def _reduced(self, name: str) -> list[np.ndarray]:
        (op, _), *_ = sent = self.sent[name]
        columns = zip(*(tensors for _, tensors in sent), strict=True)
        return [np.asarray(np.sum(c, 0) if op == self.Sum else np.mean(c, 0)) for c in columns]

    def grouped_allreduce_async(self, tensors, op, name, process_set):  # noqa: ARG002
        self._send(name, op, [t.numpy().copy() for t in tensors])
        self.handles.append(name)
        return len(self.handles) - 1

    def grouped_allreduce_async_(self, tensors, op, name, process_set):  # noqa: ARG002
        """In place, as Horovod's: ``synchronize`` writes the results into ``tensors``."""
        handle = self.grouped_allreduce_async(tensors, op, name, process_set)
        self.in_place[handle] = list(tensors)
        return handle

    def poll(self, handle: int) -> bool:
        return len(self.sent[self.handles[handle]]) == self.size

    def synchronize(self, handle: int) -> list[torch.Tensor]:
        results = [torch.from_numpy(r) for r in self._reduced(self.handles[handle])]
        for t, r in zip(self.in_place.pop(handle, []), results, strict=False):
            t.copy_(r)
        return results

    def grouped_allreduce(self, tensors, op, name, process_set):  # noqa: ARG002
        import tensorflow as tf

        self._send(name, op, [np.array(t.numpy()) for t in tensors])
        with self.changed:
            self.changed.wait_for(lambda: len(self.sent[name]) == self.size, timeout=10)
        return [tf.constant(r) for r in self._reduced(name)]


def _member(position: int) -> Any:
    """A process set as one member sees it: Horovod's ``rank()`` is its position in the set."""
    return types.SimpleNamespace(rank=lambda: position)


class Torch:
    """One member's model: float weights, an int64 counter, a bool mask, an int8 code."""

    def __init__(self, count: int) -> None:
        self.weight = torch.zeros(2)
        self.counter = torch.tensor(count)
        self.mask = torch.tensor([True, False])
        self.code = torch.tensor([120, -120], dtype=torch.int8)

    def tensors(self) -> list[torch.Tensor]:
        return [self.weight, self.counter, self.mask, self.code]

    def count(self, by: int = 1) -> None:
        self.counter += by
        self.weight += by

    def values(self) -> tuple[int, list[bool], list[int], list[float]]:
        return (
            int(self.counter),
            self.mask.tolist(),
            self.code.tolist(),
            self.weight.tolist(),
        )

    @staticmethod
    def start(
        hvd: GroupCollectives,
        tensors: list[Any],
        position: int,
        overlap: Overlap | None,
        monkeypatch: pytest.MonkeyPatch,
    ) -> Any:
        monkeypatch.setattr(torch_binding, "_hvd", hvd)
        return torch_binding.TorchPendingAverage(
            tensors, "g", _member(position), hvd.size, overlap=overlap
        )


class Tensorflow:
    """The same model as ``Torch``'s, as TensorFlow variables."""

    def __init__(self, count: int) -> None:
        import tensorflow as tf

        self.tf = tf
        self.weight = tf.Variable([0.0, 0.0])
        self.counter = tf.Variable(count, dtype=tf.int64)
        self.mask = tf.Variable([True, False])
        self.code = tf.Variable([120, -120], dtype=tf.int8)

    def tensors(self) -> list[Any]:
        return [self.weight, self.counter, self.mask, self.code]

    def count(self, by: int = 1) -> None:
        self.counter.assign_add(by)
        self.weight.assign_add([float(by)] * 2)

    def values(self) -> tuple[int, list[bool], list[int], list[float]]:
        return (
            int(self.counter.numpy()),
            self.mask.numpy().tolist(),
            self.code.numpy().tolist(),
            self.weight.numpy().tolist(),
        )

    @staticmethod
    def start(
        hvd: GroupCollectives,
        tensors: list[Any],
        position: int,
        overlap: Overlap | None,
        monkeypatch: pytest.MonkeyPatch,
    ) -> Any:
        tf_binding = pytest.importorskip("horovod_prague.tensorflow.binding")
        monkeypatch.setattr(tf_binding, "_hvd", hvd)
        return tf_binding.TensorflowPendingAverage(
            tensors, "g", _member(position), hvd.size, None, overlap
        )


FRAMEWORKS = pytest.mark.parametrize("framework", [Torch, Tensorflow], ids=["torch", "tf"])


def _average(
    framework: Any,
    models: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    between: Callable[[], None] = lambda: None,
    overlap: Overlap | None = None,
) -> None:
    """Every member starts the group's average on a snapshot, ``between`` runs, each applies."""
    hvd = GroupCollectives(len(models))
    pending = [
        framework.start(hvd, m.tensors(), position, overlap, monkeypatch)
        for position, m in enumerate(models)
    ]
    between()
    _apply(pending)


def _apply(pending: list[Any]) -> None:
    for p in pending:
        torch_binding.wait_until(p.ready, 10.0, lambda: "the stand-in group never completed")
        p.apply()


@FRAMEWORKS
def test_counters_keep_the_steps_taken_while_the_average_ran(framework, monkeypatch):
    """Members in step at 5, each counts 3 more before the average is applied: 8, not 5."""
    models = [framework(5), framework(5)]

    def three_steps() -> None:
        for m in models:
            m.count(3)

    _average(framework, models, monkeypatch, three_steps)
    assert [m.values()[0] for m in models] == [8, 8]


@FRAMEWORKS
def test_a_counter_counting_every_step_with_an_average_every_step_counts_the_steps(
    framework, monkeypatch
):
    """Each step starts an average, applied at the end of the next, as ``staleness=1`` does:
    before the fix every counter stayed at 1."""
    models = [framework(0), framework(0)]
    pending: list[Any] = []
    for _ in range(10):
        for m in models:
            m.count()
        _apply(pending)
        hvd = GroupCollectives(len(models))
        pending = [
            framework.start(hvd, m.tensors(), position, None, monkeypatch)
            for position, m in enumerate(models)
        ]
    _apply(pending)
    assert [m.values()[0] for m in models] == [10, 10]


@FRAMEWORKS
@pytest.mark.parametrize("counts", [[4, 5], [5, 4], [0, 3, 7], [9, -2, 1, 6]])
def test_counters_out_of_step_keep_the_group_total_and_their_own_increments(
    framework, counts, monkeypatch
):
    models = [framework(c) for c in counts]

    def one_step() -> None:
        for m in models:
            m.count()

    _average(framework, models, monkeypatch, one_step)
    total, size = sum(counts), len(counts)
    expected = [integer_share(total, size, p) + 1 for p in range(size)]
    assert [m.values()[0] for m in models] == expected
    assert sum(expected) == total + size
    assert max(expected) - min(expected) <= 1


@FRAMEWORKS
def test_integer_corrections_are_not_damped(framework, monkeypatch):
    """An average flagged as overlapping another: floats move half way, counters whole."""
    models = [framework(0), framework(0)]
    models[1].count(4)
    _average(framework, models, monkeypatch, overlap=Overlap(True, 0.5))
    assert [m.values()[0] for m in models] == [2, 2]
    assert [m.values()[3] for m in models] == [[1.0, 1.0], [3.0, 3.0]]


@FRAMEWORKS
def test_masks_and_small_integers_keep_their_dtype_and_range(framework, monkeypatch):
    """A bool mask and int8 codes equal on every member are left as they are."""
    models = [framework(0), framework(0)]
    _average(framework, models, monkeypatch)
    for m in models:
        _, mask, code, _ = m.values()
        assert (mask, code) == ([True, False], [120, -120])


class _Blocking:
    """A framework binding's blocking ``average``, its timeout and weights stood in for."""

    def __init__(self, framework: Any, hvd: GroupCollectives, monkeypatch: pytest.MonkeyPatch):
        self.size = hvd.size
        if framework is Torch:
            monkeypatch.setattr(torch_binding, "_hvd", hvd)
            self.binding = torch_binding.TorchBinding(hvd)
        else:
            tf_binding = pytest.importorskip("horovod_prague.tensorflow.binding")
            monkeypatch.setattr(tf_binding, "_hvd", hvd)
            self.binding = tf_binding.TensorflowBinding(hvd)
        self.binding.config = lambda: types.SimpleNamespace(timeout=10.0)  # type: ignore[method-assign]
        self.binding.average_weight = lambda: None  # type: ignore[method-assign]

    def run(self, tensors: list[Any], position: int, share: bool) -> Callable[[], None]:
        """Start the blocking average on a thread; the function returned waits for it."""
        errors: list[BaseException] = []

        def average() -> None:
            try:
                self.binding.average(
                    tensors, "g", _member(position), self.size, None, position if share else None
                )
            except BaseException as e:  # noqa: BLE001  (re-raised by the waiter)
                errors.append(e)

        thread = threading.Thread(target=average, daemon=True)
        thread.start()

        def wait() -> None:
            thread.join(10)
            assert not thread.is_alive(), "the blocking average did not return"
            if errors:
                raise errors[0]

        return wait


@FRAMEWORKS
@pytest.mark.parametrize(("counts", "blocking"), [([10, 9], 0), ([9, 10], 1), ([10, 9], 1)])
def test_a_group_run_blocking_by_one_member_and_overlapped_by_the_other_keeps_its_total(
    framework, counts, blocking, monkeypatch
):
    """A rank at a consensus runs an owed group blocking while its partner runs it as a step,
    overlapped, and counts once more before applying it: the group's total is kept (before,
    the blocking member took the floor mean, and an odd total lost a count for good: after
    ``fit`` a Keras counter ended at 9 of 10 steps on both ranks)."""
    models = [framework(c) for c in counts]
    hvd = GroupCollectives(2)
    overlapped = 1 - blocking
    wait = _Blocking(framework, hvd, monkeypatch).run(models[blocking].tensors(), blocking, True)
    pending = framework.start(hvd, models[overlapped].tensors(), overlapped, None, monkeypatch)
    models[overlapped].count()
    wait()
    _apply([pending])
    values = [m.values()[0] for m in models]
    assert sum(values) == sum(counts) + 1, values
    assert values[blocking] == integer_share(sum(counts), 2, blocking)


@FRAMEWORKS
def test_a_consensus_leaves_every_member_with_the_floor_mean(framework, monkeypatch):
    models = [framework(10), framework(9)]
    hvd = GroupCollectives(2)
    blocking = _Blocking(framework, hvd, monkeypatch)
    waits = [blocking.run(m.tensors(), p, share=False) for p, m in enumerate(models)]
    for wait in waits:
        wait()
    assert [m.values()[0] for m in models] == [9, 9]


LARGE = [2**62, 2**63 - 1, 7, -(2**63)]
"""int64 values whose sum over a group overflows int64."""


def _large(position: int) -> list[int]:
    """Different large values on each member, whose means are int64s."""
    return [2**63 - 1 - 3 * position, -(2**63) + 5 * position, 2**62 + position * 2**60, -position]


def _int64(framework: Any, values: list[int]) -> Any:
    if framework is Torch:
        return torch.tensor(values, dtype=torch.int64)
    import tensorflow as tf

    return tf.Variable(values, dtype=tf.int64)


def _values(tensor: Any) -> list[int]:
    return (tensor if isinstance(tensor, torch.Tensor) else tensor.numpy()).tolist()


def _shares(rows: list[list[int]], position: int) -> list[int]:
    """``integer_share`` of each column of ``rows``, in Python's unbounded integers."""
    return [integer_share(sum(c), len(rows), position) for c in zip(*rows, strict=True)]


@FRAMEWORKS
@pytest.mark.parametrize("size", [2, 4])
def test_large_int64_values_equal_on_every_member_are_left_as_they_are_overlapped(
    framework, size, monkeypatch
):
    """Their sum overflows int64: summed whole, ``[2**62, 2**63 - 1]`` came back negative."""
    tensors = [_int64(framework, LARGE) for _ in range(size)]
    hvd = GroupCollectives(size)
    pending = [framework.start(hvd, [t], p, None, monkeypatch) for p, t in enumerate(tensors)]
    _apply(pending)
    assert [_values(t) for t in tensors] == [LARGE] * size


@FRAMEWORKS
def test_large_int64_values_take_their_exact_shares_overlapped(framework, monkeypatch):
    """Members with different large values each take their share of the exact sum, and one
    that counted meanwhile keeps the count, even at the top of the int64 range."""
    rows = [_large(p) for p in range(4)]
    tensors = [_int64(framework, r) for r in rows]
    hvd = GroupCollectives(4)
    pending = [framework.start(hvd, [t], p, None, monkeypatch) for p, t in enumerate(tensors)]
    counted = [-1, 1, 0, 1]
    if framework is Torch:
        tensors[0] += torch.tensor(counted)
    else:
        tensors[0].assign_add(counted)
    _apply(pending)
    expected = [_shares(rows, p) for p in range(4)]
    expected[0] = [s + c for s, c in zip(expected[0], counted, strict=True)]
    assert [_values(t) for t in tensors] == expected


@FRAMEWORKS
@pytest.mark.parametrize("share", [False, True], ids=["consensus", "group"])
@pytest.mark.parametrize("same", [True, False], ids=["equal", "different"])
def test_large_int64_values_average_exactly_blocking(framework, share, same, monkeypatch):
    """A consensus leaves every member with the exact floor mean; a group average each with
    its share of the exact sum; values equal on every member are left as they are."""
    rows = [LARGE if same else _large(p) for p in range(4)]
    tensors = [_int64(framework, r) for r in rows]
    blocking = _Blocking(framework, GroupCollectives(4), monkeypatch)
    for wait in [blocking.run([t], p, share) for p, t in enumerate(tensors)]:
        wait()
    floor_means = [sum(c) // len(rows) for c in zip(*rows, strict=True)]
    expected = [_shares(rows, p) if share else floor_means for p in range(4)]
    assert [_values(t) for t in tensors] == expected
    if same:
        assert expected == rows


@FRAMEWORKS
def test_large_int64_values_of_a_group_run_blocking_by_one_member_and_overlapped_by_others(
    framework, monkeypatch
):
    """Both ways send the same tensors (int64 ones as their halves) in one collective."""
    rows = [_large(p) for p in range(4)]
    models = [[_int64(framework, r), *framework(p).tensors()] for p, r in enumerate(rows)]
    hvd = GroupCollectives(4)
    wait = _Blocking(framework, hvd, monkeypatch).run(models[0], 0, True)
    pending = [framework.start(hvd, models[p], p, None, monkeypatch) for p in range(1, 4)]
    wait()
    _apply(pending)
    assert [_values(m[0]) for m in models] == [_shares(rows, p) for p in range(4)]
    counters = [int(_values(m[2])) for m in models]
    assert counters == [integer_share(0 + 1 + 2 + 3, 4, p) for p in range(4)]
