"""How Prague averages TensorFlow variables, and the one binding every TF module of ours shares.

Group averages run eagerly: the group is decided at run time by the Group Generator, so a
Prague step inside a ``tf.function`` is staged as a ``tf.py_function`` (``staging``),
ordered after the Prague calls and variable updates staged before it. Horovod's eager
TensorFlow collectives block with no deadline, so each runs on a background thread: overlapped
(``TensorflowPendingAverage``) or waited for with the job's timeout (``average``).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import horovod.tensorflow
import tensorflow as tf

from ..common.binding import Binding
from ..common.import_hook import originals
from ..common.integer_sums import corrected, floor_mean, halves
from ..common.overlap import (
    BackgroundCall,
    GroupWaitTimeout,
    Overlap,
    PendingAverage,
    call_with_deadline,
    late_collective,
)
from ..common.script_collectives import Started
from ..common.script_waits import ranks_of
from ..common.staged_deadlines import StagedDeadlines
from .staging import (
    Site,
    chain_after,
    current_device,
    horovod_op_name,
    run_eagerly,
    staged_after_inputs,
    unfoldable_inputs,
)

_hvd = originals(horovod.tensorflow)


class TensorflowPendingAverage(PendingAverage):
    """A snapshot of the variables, averaged by Horovod on a background thread.

    Horovod's eager TensorFlow collectives block, so a daemon thread runs them while the rank
    trains on. The same collectives as ``TensorflowBinding.average``; ``apply`` adds
    ``average - snapshot`` to floating-point variables (scaled by ``overlap.scale`` of the
    group's mean flag, with ``overlap``) and ``integer_share - snapshot`` of their sums to
    integer ones, whole, with this rank's position in ``process_set``
    (``PendingAverage.apply``).
    """

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        name: str,
        process_set: Any,
        size: int,
        weight: float | None,
        overlap: Overlap | None = None,
    ) -> None:
        self.size = size
        self.moved: Callable[[tf.Variable, tf.Tensor, float], None] | None = None
        """Told what ``apply`` adds to each floating-point variable (``Binding.moved``)."""
        self.parts = _by_dtype(variables, name, weight, overlap)
        self.position = 0 if all(p.floating for p in self.parts) else process_set.rank()
        self.call = BackgroundCall(lambda: [part.reduce(process_set) for part in self.parts])

    def ready(self) -> bool:
        return self.call.done()

    def apply(self) -> None:
        reduced = self.call.result(0.0, lambda: "apply() before the average completed")
        moves: list[tuple[tf.Variable, tf.Tensor, float]] = []
        for part, results in zip(self.parts, reduced, strict=True):
            if not part.floating:
                means = part.means(results, self.size)
                for v, snapshot, mean in zip(part.variables, part.values, means, strict=True):
                    share = _share(*mean, self.position)
                    exact = corrected(tf.cast(v, tf.int64), share, snapshot, _clip)
                    v.assign(_narrow(exact, v.dtype))
                continue
            averages, scale = part.received(results, self.size)
            for v, snapshot, a in zip(part.variables, part.values, averages, strict=True):
                move = a - snapshot
                v.assign_add(tf.cast(scale, v.dtype) * move)
                if self.moved is not None:
                    moves.append((v, move, scale))
        for v, move, scale in moves:  # once every variable is averaged
            self.moved(v, move, scale)


class TensorflowBinding(Binding):
    """Averages variables, grouped by dtype, with one Horovod collective per dtype.

    Also holds the step a ``DistributedGradientTape`` defers (``defer``) until the variables
    are updated: right after an optimizer's ``apply_gradients`` updates them (``applied``), or,
    where they are updated otherwise, when the next step asks for its gradients, before a
    guarded global collective, or at ``average_model``/``finish``.
    """

    pending_average = TensorflowPendingAverage

    starts_in_init = False
    """TensorFlow's first op initializes its runtime, after which a script can no longer set
    threads, visible devices or memory growth: stock Horovod's ``init`` runs none, so
    scripts configure TensorFlow after it. Prague starts at its first call instead."""

    def __init__(self, hvd: Any) -> None:
        super().__init__(hvd)
        self._deferred_steps = PragueSteps(self)
        self.tape_sources: dict[Any, tf.Variable] = {}
        """Every variable a tape has differentiated, by reference, in the order first seen
        (inside a ``tf.function``: when it was traced). Tracked as one model."""

    def _new_job(self) -> None:
        super()._new_job()
        self._pending: list[tf.Variable] = []  # a reset drops the deferred step too
        self._renew_deadlines()
        stopping: threading.Thread | None = getattr(self, "_stopping", None)
        if stopping is not None:  # an overdue collective's shutdown, which ends before a reset's
            stopping.join()
        self._stopping: threading.Thread | None = None

    def _renew_deadlines(self) -> None:
        """Stop watching this job's staged collectives; the next job's are watched afresh."""
        earlier: StagedDeadlines | None = getattr(self, "_deadlines", None)
        if earlier is not None:
            earlier.close()
        self._deadlines = StagedDeadlines(self.script_waits.with_deadline, self._overdue)

    def tensors(self, source: Any) -> list[tf.Variable]:
        if isinstance(source, tf.Variable):
            return [source]
        if isinstance(source, tf.Module) or hasattr(source, "variables"):
            variables = source.variables
            return list(variables() if callable(variables) else variables)
        return list(source)

    def scratch(self) -> tf.Variable:
        with tf.init_scope():
            return tf.Variable(tf.zeros([1]), trainable=False)

    def average(
        self,
        variables: Sequence[tf.Variable],
        name: str,
        process_set: Any,
        size: int,
        overlap: Overlap | None = None,
        share_of: int | None = None,
    ) -> None:
        timeout = self.config().timeout
        followed = share_of is not None and self.models.followed  # a group's, not a world's
        moves: list[tuple[tf.Variable, tf.Tensor, float]] = []
        for part in _by_dtype(variables, name, self.average_weight(), overlap):
            # Horovod's eager TensorFlow collective blocks with no deadline: wait with one.
            reduced = call_with_deadline(
                functools.partial(part.reduce, process_set),
                timeout,
                lambda tag=part.tag: late_collective(tag, timeout),
            )
            averages, scale = part.received(reduced, size, share_of)
            reported = followed and part.floating
            for v, snapshot, a in zip(part.variables, part.values, averages, strict=True):
                move = a - snapshot if reported or scale != 1.0 else None
                if scale == 1.0:
                    v.assign(a)  # exactly the group's result: consensus is bit-identical
                else:
                    v.assign_add(tf.cast(scale, v.dtype) * move)
                if reported:
                    moves.append((v, move, scale))
        for v, move, scale in moves:  # once every variable is averaged
            self.models.moved(v, move, scale)

    def start(self, runtime: Any) -> None:
        with tf.init_scope():  # eagerly, also when first called while a function is traced
            runtime.start()

    def add_tape_sources(self, variables: Sequence[tf.Variable]) -> None:
        """Track ``variables``, a tape's sources, before any step that averages them runs,
        so that every step averages every tape's sources."""
        if not variables:
            return
        if not self.tape_sources:
            self.models.track(lambda: list(self.tape_sources.values()))
        for v in variables:
            self.tape_sources.setdefault(v.ref(), v)

    def defer(self, variables: list[tf.Variable]) -> None:
        """Take the step deferred last, then defer one for ``variables`` (a tape's sources)."""
        self.flush()
        self._pending = variables

    def applied(self, variables: Sequence[Any]) -> None:
        """Take the deferred step now if an optimizer has just updated some of its variables."""
        updated = {v.ref() for v in variables}
        if any(v.ref() in updated for v in self._pending):
            self.flush()

    def flush(self) -> None:
        """Take the Prague step a tape deferred, if any."""
        pending, self._pending = self._pending, []
        if pending:
            self._deferred_steps.take(pending)

    def average_model(self, model_or_tensors: Any) -> bool:
        self.flush()
        return super().average_model(model_or_tensors)

    def finish(self, model_or_tensors: Any, average: bool = True) -> None:
        self.flush()
        super().finish(model_or_tensors, average)

    def guard(self, collective: Callable[..., Any]) -> Callable[..., Any]:
        """``collective``, preceded by ``before_collective`` (a consensus on the global
        process set, a settle on a set of some ranks), and waited for with the job's timeout.

        As ``Binding.guard``. Inside a ``tf.function`` it is staged to run, at each call,
        before the collective's op, and the op is watched from beside (``StagedDeadlines``).
        """
        signature = inspect.signature(collective)

        @functools.wraps(collective)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            call = signature.bind_partial(*args, **kwargs)
            bound = call.arguments
            process_set = bound.get("process_set")
            if tf.executing_eagerly():
                self.flushed_before(process_set)
                return self._with_deadline(collective, args, kwargs, bound, process_set)
            site = Site(str(bound.get("name") or collective.__name__), process_set)
            before = run_eagerly(lambda: self.flushed_before(process_set), self.tracked)
            unfoldable_inputs(call, before)
            begin = staged_after_inputs(call, before, lambda: self._begin_watch(site))
            with tf.control_dependencies([begin]):
                result = collective(*call.args, **call.kwargs)
            site.name = horovod_op_name(result) or site.name
            site.watched = chain_after(result, lambda: self._deadlines.end(site))
            return result

        return guarded

    def _with_deadline(
        self,
        collective: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        bound: dict[str, Any],
        process_set: Any,
    ) -> Any:
        """A script's eager collective, run with the job's deadline
        (``ScriptWaits.run``), on the device the caller had chosen."""
        device = current_device()

        def call() -> Any:
            with tf.device(device):
                return collective(*args, **kwargs)

        name = bound.get("name") or collective.__name__
        return self.script_waits.run(call, str(name), process_set)

    def _begin_watch(self, site: Site) -> None:
        """A staged collective's inputs are ready and its op is about to run: watch it with
        the job's timeout (``StagedDeadlines``)."""
        rt = self.job.runtime
        if site.watched and rt is not None and rt.started:
            started = Started(site.name, ranks_of(rt, site.process_set))
            self._deadlines.begin(site, started, rt.config.timeout)

    def _overdue(self, error: GroupWaitTimeout, timeout: float) -> None:
        """A staged collective missed its deadline: say so, and shut Horovod down, which fails
        the op here and, as every rank's Horovod follows a shutdown, on every rank. Where
        Horovod cannot shut down within the timeout, the process exits."""
        print(
            f"horovod_prague: {error}. Shutting Horovod down, which ends it on every rank.",
            file=sys.stderr,
            flush=True,
        )
        self._stopping = threading.Thread(target=self.hvd.shutdown, name="prague-stop", daemon=True)
        self._stopping.start()
        self._stopping.join(timeout)
        if self._stopping.is_alive():
            print(
                "horovod_prague: Horovod did not shut down; exiting.", file=sys.stderr, flush=True
            )
            os._exit(1)

    def shutdown(self) -> None:
        self._deadlines.close()  # no collective is overdue while Horovod shuts down
        super().shutdown()
        self._renew_deadlines()

    def flushed_before(self, process_set: Any) -> None:
        """``before_collective``, after the steps this rank has staged are flushed."""
        if self.job.runtime is None:
            return
        self.runtime()  # every rank starts Prague before its first collective
        self.flush()
        self.before_collective(process_set)


class _DtypePart:
    """The variables of one dtype in an average, their values as sent, and the collective's tag.

    Floating-point values are averaged, each weighted by ``weight`` when it is given (sent as
    ``weight * value`` with the weight itself, so the group's mean of both gives the weighted
    average); integer and bool ones summed in int64 (small types overflow and Horovod cannot
    sum bool), int64 ones as their two halves, ``hi`` then ``lo``, whose sums cannot overflow
    (``integer_sums``), and each variable takes its group's floor mean or its share
    (``received``). With ``overlap``, a floating-point part also sends its flag, last
    (``Overlap``).
    """

    def __init__(
        self,
        variables: list[tf.Variable],
        tag: str,
        weight: float | None,
        overlap: Overlap | None = None,
    ) -> None:
        self.variables = variables
        self.tag = tag
        dtype = variables[0].dtype
        self.dtype = dtype
        self.floating = dtype.is_floating or dtype.is_complex
        self.weight = weight if self.floating else None
        self.overlap = overlap if self.floating else None
        # Read now: the variables' later in-place updates copy their buffers, not these. Read
        # before the cast: casting an int64 variable to int64 returns the variable itself.
        self.values = [tf.identity(v) for v in variables]
        if not self.floating:
            self.values = [tf.cast(v, tf.int64) for v in self.values]

    def reduce(self, process_set: Any) -> list[tf.Tensor]:
        op = _hvd.Average if self.floating else _hvd.Sum
        sent = self.values
        if self.dtype == tf.int64:
            sent = [half for v in sent for half in halves(v)]
        if self.weight is not None:
            # Half precision is widened: a step count times a value could overflow it.
            wide = tf.float32 if self.dtype in (tf.float16, tf.bfloat16) else self.dtype
            w = tf.constant(self.weight, wide)
            sent = [*(w * tf.cast(v, wide) for v in sent), tf.fill([1], w)]
        if self.overlap is not None:
            sent = [*sent, tf.fill([1], tf.constant(self.overlap.flag, sent[-1].dtype))]
        return _hvd.grouped_allreduce(sent, op=op, name=self.tag, process_set=process_set)

    def received(
        self, reduced: list[tf.Tensor], size: int, share_of: int | None = None
    ) -> tuple[list[tf.Tensor], float]:
        """The averages in ``reduce``'s result, and the scale the members agreed on; integer
        ones the floor mean, or with ``share_of`` that member's share of the sum."""
        scale = 1.0
        if self.overlap is not None:
            scale = self.overlap.scale(float(tf.math.real(reduced[-1][0])))
            reduced = reduced[:-1]
        if self.weight is not None:
            return [tf.cast(r / reduced[-1][0], self.dtype) for r in reduced[:-1]], scale
        if self.floating:
            return list(reduced), scale
        means = self.means(reduced, size)
        if share_of is None:
            return [tf.cast(mean, self.dtype) for mean, _ in means], scale
        return [_narrow(_share(*mean, share_of), self.dtype) for mean in means], scale

    def means(self, reduced: list[tf.Tensor], size: int) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """The floor mean and the remainder of each integer variable's sum over the group,
        from the sums of what ``reduce`` sent."""
        if self.dtype != tf.int64:
            return [(s // size, s % size) for s in reduced]
        pairs = zip(reduced[0::2], reduced[1::2], strict=True)
        return [floor_mean(hi, lo, size) for hi, lo in pairs]


def _by_dtype(
    variables: Sequence[tf.Variable],
    name: str,
    weight: float | None,
    overlap: Overlap | None = None,
) -> list[_DtypePart]:
    same: dict[tf.DType, list[tf.Variable]] = {}
    for v in variables:
        same.setdefault(v.dtype, []).append(v)
    return [_DtypePart(vs, f"{name}.{dtype.name}", weight, overlap) for dtype, vs in same.items()]


def _share(mean: tf.Tensor, remainder: tf.Tensor, position: int) -> tf.Tensor:
    """``integer_share`` of each element of a group's sum, from its floor mean and remainder."""
    return mean + tf.cast(remainder > position, tf.int64)


def _clip(t: tf.Tensor, low: int, high: int) -> tf.Tensor:
    """An int64 tensor clamped to ``[low, high]``."""
    return tf.clip_by_value(t, tf.constant(low, tf.int64), tf.constant(high, tf.int64))


def _narrow(t: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """An int64 tensor as ``dtype``, clamped to its range (a corrected mask stays 0 or 1)."""
    low, high = (
        (0, 1) if dtype == tf.bool else (max(dtype.min, -(2**63)), min(dtype.max, 2**63 - 1))
    )
    return tf.cast(_clip(t, low, high), dtype)


class PragueSteps:
    """Counts Prague steps and takes each: the average with the group the Group Generator
    gives (every ``sync_every`` steps, the job's option, all ranks: ``WorldGroup``)."""

    def __init__(self, binding: TensorflowBinding) -> None:
        self.binding = binding
        self.count = 0

    def take(self, variables: list[tf.Variable]) -> None:
        self.count += 1
        self.binding.exchange(self.binding.models.step_tensors(variables))


binding = TensorflowBinding(_hvd)
