"""Prague's calls inside a traced ``tf.function``: staged as ``tf.py_function`` ops, in order.

A group is decided at run time by the Group Generator, so a Prague call in a traced function
cannot be a graph op of its own: it is staged (``run_eagerly``) to run at each call of the
function, ordered after the Prague calls and variable updates staged before it. A script's
own collective in the graph is ordered after the consensus staged for it and watched from
beside (``staged_after_inputs``, ``chain_after``, ``Site``)::

    before = run_eagerly(lambda: binding.flushed_before(None), binding.tracked)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from ..common.models import distinct


class _Staged:
    """The last Prague step staged in one traced graph, and the variable handles staged so far."""

    def __init__(self, op: tf.Tensor, handles: list[Any]) -> None:
        self.op = op
        self.handles = handles


STAGED = "_prague_staged"
"""The attribute of a traced graph that holds its ``_Staged`` (on the graph, not in a map
keyed by it: the ops it holds refer to the graph, which must stay collectable)."""


def run_eagerly(fn: Callable[[], None], variables: Callable[[], Iterable[Any]]) -> tf.Tensor | None:
    """Run ``fn`` now when executing eagerly; inside a traced function, stage it.

    Staged, it runs at every call of the function, as a ``tf.py_function``. Ops a graph does
    not order may run in any order, so each staged call is ordered in two ways. After the
    Prague calls staged before it in the same graph, by a control dependency: a rank must run
    its averages and consensus in program order, as the other ranks do. And around the
    variables' updates, by taking as inputs the resource handles of ``variables()`` (listed at
    trace time) and of every variable staged before in the graph: TensorFlow orders it after
    the graph's earlier updates of those variables and before its later ones. Returns the
    staged op's output.
    """
    if tf.executing_eagerly():
        fn()
        return None
    graph = tf.compat.v1.get_default_graph()
    earlier: _Staged | None = getattr(graph, STAGED, None)
    handles = distinct(
        [
            *(earlier.handles if earlier else []),
            *(v.handle for v in variables() if hasattr(v, "handle")),
        ]
    )
    op = _staged(fn, after=[] if earlier is None else [earlier.op], inputs=handles)
    setattr(graph, STAGED, _Staged(op, handles))
    return op


def _staged(fn: Callable[[], None], after: list[Any], inputs: list[Any] | None = None) -> tf.Tensor:
    """A ``tf.py_function`` that runs ``fn()`` at every call of the traced function, once the
    ops ``after`` have run and ``inputs`` are computed (taken as inputs only to order it)."""

    def call(*_inputs: Any) -> tf.Tensor:
        fn()
        return tf.constant(0)

    with tf.control_dependencies(after):
        return tf.py_function(call, inp=inputs or [], Tout=tf.int32)


COLLECTIVE_INPUTS = ("tensor", "tensors", "splits")
"""The arguments of Horovod's TensorFlow collectives that hold the tensors they send."""


def unfoldable_inputs(call: inspect.BoundArguments, after: tf.Tensor | None) -> None:
    """In a traced graph, pass each input of a collective that Grappler could fold through a
    ``tf.py_function`` that runs after ``after`` (the staged consensus), in ``call``.

    Horovod's ops are not stateful, so Grappler's constant folding runs one whose inputs are
    all constants (``hvd.allgather(tf.fill([n, 2], 1.0))``) while it optimizes the function,
    at its first call, before any op of the graph: outside the order of the rank's program
    and before the staged consensus. A rank could then wait in a global collective while a
    partner waits for it in a group average, until the timeout. A ``tf.py_function`` is
    stateful: it is never folded, and the collective behind it runs where the script put it.
    """
    for key in COLLECTIVE_INPUTS:
        if call.arguments.get(key) is not None:
            call.arguments[key] = tf.nest.map_structure(
                lambda t: _pass_through(t, after) if _foldable(t) else t, call.arguments[key]
            )


def _foldable(value: Any) -> bool:
    """Whether ``value`` is a graph tensor computed from constants alone: no placeholder (a
    function's argument), variable or stateful op among the ops it depends on."""
    if not tf.is_symbolic_tensor(value):
        return False
    seen: set[str] = set()
    todo = [value.op]
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in ("Placeholder", "VarHandleOp") or op.op_def.is_stateful:
            return False
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return True


def _pass_through(t: tf.Tensor, after: tf.Tensor | None) -> tf.Tensor:
    with tf.control_dependencies([] if after is None else [after]):
        out = tf.py_function(lambda x: x, inp=[t], Tout=t.dtype)
    out.set_shape(t.shape)
    return out


def staged_after_inputs(
    call: inspect.BoundArguments, after: tf.Tensor, fn: Callable[[], None]
) -> tf.Tensor:
    """Stage ``fn()`` to run after ``after`` and after the tensors a collective sends (those
    of ``call``) are computed: just before the collective's op can start."""
    inputs = [
        t
        for key in COLLECTIVE_INPUTS
        for t in tf.nest.flatten(call.arguments.get(key), expand_composites=True)
        if isinstance(t, tf.Tensor)
    ]
    return _staged(fn, after=[after, *inputs])


def current_device() -> str:
    """The device the calling thread's ops are placed on (``tf.device`` is per thread)."""
    from tensorflow.python.eager import context

    return context.context().device_name or ""


def chain_after(result: Any, done: Callable[[], None]) -> bool:
    """In a traced graph, stage ``done()`` after ``result``'s ops, and order later staged
    Prague calls after it; whether it was staged (``result`` has ops).

    A guarded global collective must complete before the rank's next group average starts,
    as it does eagerly: otherwise a blocking average could hold the rank while its peers wait
    in the collective.
    """
    graph = tf.compat.v1.get_default_graph()
    earlier: _Staged | None = getattr(graph, STAGED, None)
    ops = [
        x
        for x in tf.nest.flatten(result, expand_composites=True)
        if isinstance(x, tf.Tensor | tf.Operation)
    ]
    if earlier is None or not ops:
        return False
    link = _staged(done, after=[earlier.op, *ops])
    setattr(graph, STAGED, _Staged(link, earlier.handles))
    return True


class Site:
    """A guarded collective's place in a traced graph: its name (the name Horovod gives its
    op) and process set. It is watched once its completion is staged (``chain_after``)."""

    def __init__(self, name: str, process_set: Any) -> None:
        self.name = name
        self.process_set = process_set
        self.watched = False


def horovod_op_name(result: Any) -> str | None:
    """The name of the Horovod op that computes ``result`` (Horovod names an unnamed
    collective in a graph after its input, the same on every rank), searched for among the
    few ops its collective function adds after it."""
    todo = [
        x.op if isinstance(x, tf.Tensor) else x
        for x in tf.nest.flatten(result, expand_composites=True)
    ]
    todo = [op for op in todo if isinstance(op, tf.Operation)]
    for _ in range(16):
        if not todo:
            return None
        op = todo.pop(0)
        if op.type.startswith("Horovod"):
            return op.name
        todo.extend(t.op for t in op.inputs)
    return None
