"""``DistributedOptimizer`` and ``DistributedGradientTape``: Horovod's wrappers, with Prague.

Horovod's wrappers all-reduce gradients. These keep each rank's own gradients, and average
the variables with the group the Group Generator gives this rank:

- ``DistributedOptimizer(opt)``: ``apply_gradients`` applies the local gradients, then averages
  the variables it updated (every ``sync_every`` steps: over all ranks).
- ``DistributedGradientTape(tape)``: ``gradient`` returns the local gradients and defers the
  step's average until they are applied: it runs right after a tf-keras or ``tf.compat.v1``
  optimizer's ``apply_gradients`` updates the tape's variables (``take_tape_steps_on_apply``);
  where they are updated otherwise, when the next ``gradient`` is asked for, before any
  guarded global collective, and at the end (``TensorflowBinding.defer``).

Both work eagerly and inside ``tf.function`` (the Prague step is staged, ``run_eagerly``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from ..common.arguments import check_horovod_arguments, check_sync_every, warn_ignored
from ..common.models import distinct
from .binding import PragueSteps, _hvd, binding
from .momentum import PRAGUE_WRAPPED, follow_momentum
from .staging import run_eagerly

KERAS3 = (
    "optimizer: {cls} is a Keras 3 optimizer; Horovod's TensorFlow wrappers need tf-keras "
    "(Keras 2). Set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported and use tf.keras"
)


class LocalAccumulation:
    """Horovod's ``backward_passes_per_step``: ``apply_gradients`` adds the gradients to local
    sums, and every ``passes``-th call applies the sums (divided by ``passes`` with
    ``average``) and is the Prague step. The other calls advance the optimizer's
    ``iterations``, as Horovod's do.

        >>> acc = LocalAccumulation(passes=2, average=True)
        >>> v = tf.Variable(0.0)
        >>> sgd = lambda pairs: [var.assign_sub(g) for g, var in pairs]
        >>> [bool(acc.apply([(tf.constant(g), v)], sgd, None)) for g in (1.0, 3.0)]
        [False, True]
        >>> float(v.numpy())
        -2.0
    """

    def __init__(self, passes: int, average: bool) -> None:
        self.passes = passes
        self.average = average
        self._sums: dict[Any, tf.Variable] = {}
        self._count: tf.Variable | None = None

    def apply(
        self,
        pairs: list[tuple[Any, tf.Variable]],
        apply_sums: Callable[[list[tuple[Any, tf.Variable]]], Any],
        iterations: tf.Variable | None,
    ) -> tf.Tensor:
        """Add ``pairs``' gradients; on the ``passes``-th call ``apply_sums`` and reset.
        True where the sums were applied. Eager or traced alike."""
        pairs = [(g, v) for g, v in pairs if g is not None]
        with tf.init_scope():  # created once, outside any traced function
            if self._count is None:
                self._count = tf.Variable(0, trainable=False, name="prague_backward_passes")
            for _, v in pairs:
                if v.ref() not in self._sums:
                    self._sums[v.ref()] = tf.Variable(
                        tf.zeros(v.shape, v.dtype), trainable=False, name="prague_grad_sum"
                    )
        sums = [self._sums[v.ref()] for _, v in pairs]
        for total, (g, _) in zip(sums, pairs, strict=True):
            total.assign_add(tf.convert_to_tensor(g))  # IndexedSlices summed dense
        count = self._count
        count.assign_add(1)
        scale = 1.0 / self.passes if self.average else 1.0

        def apply_and_reset() -> tf.Tensor:
            apply_sums([(t.read_value() * scale, v) for t, (_, v) in zip(sums, pairs, strict=True)])
            for t in sums:
                t.assign(tf.zeros_like(t))
            count.assign(0)
            return tf.constant(True)

        def skip() -> tf.Tensor:
            if iterations is not None:
                iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(count >= self.passes, apply_and_reset, skip)

    def applied_last(self) -> bool:
        """Whether the last ``apply`` applied the sums (eagerly, or inside a staged call)."""
        return self._count is not None and int(self._count.numpy()) == 0

    def variables(self) -> list[tf.Variable]:
        return [] if self._count is None else [self._count]


class _PragueState:
    """What a wrapped optimizer adds: its Prague step count, the variables it averages, and
    its local gradient accumulation (None: every ``apply_gradients`` is a step)."""

    def __init__(self, model: Any, accumulation: LocalAccumulation | None) -> None:
        self.steps = PragueSteps(binding)
        self.model = model
        self.accumulation = accumulation
        self.applied: list[tf.Variable] = []
        self.local: set[Any] = set()

    def take_step(self) -> None:
        if self.accumulation is None or self.accumulation.applied_last():
            self.steps.take(self.variables())

    def staged_inputs(self) -> list[tf.Variable]:
        extra = [] if self.accumulation is None else self.accumulation.variables()
        return [*self.variables(), *extra]

    def variables(self) -> list[tf.Variable]:
        """The model's variables (BatchNorm statistics too), then any other that
        ``apply_gradients`` updated; in the model's order, which a rank knows before its
        first step."""
        model = [] if self.model is None else binding.tensors(self.model)
        return [v for v in distinct([*model, *self.applied]) if v.ref() not in self.local]


class _PragueOptimizer:
    """Mixed in before the user's optimizer class; shares that optimizer's state."""

    _prague: _PragueState

    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        """Apply the local gradients, then average the variables with this step's group
        (with ``backward_passes_per_step``: every that many calls, see ``LocalAccumulation``)."""
        pairs = list(grads_and_vars)
        state = self._prague
        apply = super().apply_gradients  # type: ignore[misc]
        if state.accumulation is None:
            result = apply(pairs, *args, **kwargs)
        else:
            result = state.accumulation.apply(
                pairs, lambda sums: apply(sums, *args, **kwargs), getattr(self, "iterations", None)
            )
        state.applied = distinct([*state.applied, *(v for _, v in pairs)])
        deps = [] if result is None or tf.executing_eagerly() else [result]
        with tf.control_dependencies(deps):
            run_eagerly(state.take_step, state.staged_inputs)
        return result

    def register_local_var(self, var: tf.Variable) -> None:
        """Keep ``var`` out of Prague's averages (Horovod: out of the gradient all-reduce)."""
        self._prague.local.add(var.ref())


def wrap_optimizer(
    optimizer: Any,
    process_set: Any,
    model: Any = None,
    sync_every: int | None = None,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
) -> Any:
    """An object of a subclass of ``optimizer``'s class that shares its state, with Prague's
    ``apply_gradients``; registered with the binding so consensus and finish average it."""
    if type(optimizer).__module__.startswith("keras."):
        raise ValueError(KERAS3.format(cls=type(optimizer).__qualname__))
    if process_set.process_set_id != _hvd.global_process_set.process_set_id:
        raise ValueError(
            "process_set: Prague forms its groups over all ranks, so DistributedOptimizer "
            "needs the global process set"
        )
    check_sync_every(sync_every, binding.config)
    binding.runtime()  # a clear error before Prague is initialized
    cls = type(optimizer.__class__.__name__, (_PragueOptimizer, optimizer.__class__), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    accumulation = (
        LocalAccumulation(backward_passes_per_step, average_aggregated_gradients)
        if backward_passes_per_step > 1
        else None
    )
    state = _PragueState(model, accumulation)
    object.__setattr__(wrapped, "_prague", state)
    binding.models.track(state.variables)
    object.__setattr__(wrapped, PRAGUE_WRAPPED, getattr(optimizer, PRAGUE_WRAPPED, optimizer))
    follow_momentum(wrapped, stacklevel=3)
    return wrapped


def check_arguments(
    op: Any,
    gradient_predivide_factor: float,
    num_groups: int,
    groups: Any,
    backward_passes_per_step: int,
    compression: Any,
) -> None:
    """Horovod's argument checks; warnings for what has nothing to act on under Prague."""
    check_horovod_arguments(
        op,
        _hvd.Average,
        gradient_predivide_factor,
        num_groups,
        groups,
        backward_passes_per_step,
        _check_groups,
    )
    warn_ignored(compression, op, _hvd.Compression.none, _hvd.Average, "variables")


def _check_groups(groups: Any) -> None:
    if not (isinstance(groups, list) or groups > 0):
        raise ValueError(
            "groups should be a non-negative integer or a list of list of tf.Variable."
        )


def DistributedOptimizer(  # noqa: N802  (Horovod's name)
    optimizer: Any,
    name: str | None = None,
    use_locking: bool = False,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = _hvd.Compression.none,
    sparse_as_dense: bool = False,
    backward_passes_per_step: int = 1,
    op: Any = _hvd.Average,
    gradient_predivide_factor: float = 1.0,
    average_aggregated_gradients: bool = False,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = _hvd.global_process_set,
    scale_local_gradients: bool = True,
    *,
    model: Any = None,
    sync_every: int | None = None,
) -> Any:
    """Wrap a Keras (tf-keras) or ``tf.compat.v1`` optimizer: local step, then group average.

    Horovod's arguments are accepted; those that shape the gradient all-reduce have nothing to
    act on (``compression`` and ``op`` warn). Prague's own: ``model``, whose other variables
    (BatchNorm statistics) are averaged too; ``sync_every``: None or the job's
    ``--prague-sync-every`` (else ValueError), whose global average the Group Generator makes.
    """
    if op == _hvd.Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    check_arguments(
        op, gradient_predivide_factor, num_groups, groups, backward_passes_per_step, compression
    )
    passes = (backward_passes_per_step, average_aggregated_gradients)
    return wrap_optimizer(optimizer, process_set, model, sync_every, *passes)


class _PragueTape:
    """Mixed in before the user's tape class; shares that tape's state."""

    _prague_local: set[Any]

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        use_generic_names: bool = False,
        **kwargs: Any,
    ) -> Any:
        """The local gradients; the last step's deferred group average runs first."""
        variables = [
            v
            for v in tf.nest.flatten(sources)
            if isinstance(v, tf.Variable) and v.ref() not in self._prague_local
        ]
        binding.add_tape_sources(variables)
        run_eagerly(lambda: binding.defer(variables), lambda: variables)
        return super().gradient(target, sources, output_gradients, **kwargs)  # type: ignore[misc]

    def register_local_source(self, source: tf.Variable) -> None:
        """Keep ``source`` out of Prague's averages (Horovod: out of the all-reduce)."""
        self._prague_local.add(source.ref())

    def get_local_and_global_gradients(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        use_generic_names: bool = False,
    ) -> tuple[list[Any], list[Any]]:
        """Horovod's split of ``(source, gradient)`` pairs into local and averaged sources."""
        gradients = self.gradient(target, sources, output_gradients)
        pairs = list(zip(sources, gradients, strict=True))
        local = [(s, g) for s, g in pairs if s.ref() in self._prague_local]
        shared = [(s, g) for s, g in pairs if s.ref() not in self._prague_local]
        return local, shared


def DistributedGradientTape(  # noqa: N802  (Horovod's name)
    gradtape: tf.GradientTape,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = _hvd.Compression.none,
    sparse_as_dense: bool = False,
    op: Any = _hvd.Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = _hvd.global_process_set,
    scale_local_gradients: bool = True,
) -> tf.GradientTape:
    """Wrap ``gradtape``: ``gradient`` returns local gradients; the variables are averaged with
    the step's group right after an optimizer's ``apply_gradients`` updates them (updated
    otherwise: at the next ``gradient`` call, a guarded global collective, or the end).
    Horovod's arguments are accepted as by ``DistributedOptimizer``."""
    check_arguments(op, gradient_predivide_factor, num_groups, groups, 1, compression)
    if process_set.process_set_id != _hvd.global_process_set.process_set_id:
        raise ValueError(
            "process_set: Prague forms its groups over all ranks, so DistributedGradientTape "
            "needs the global process set"
        )
    binding.runtime()
    take_tape_steps_on_apply()
    cls = type(gradtape.__class__.__name__, (_PragueTape, gradtape.__class__), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(gradtape.__dict__)
    wrapped._prague_local = set()
    return wrapped


def take_tape_steps_on_apply() -> None:
    """Make the optimizers' ``apply_gradients`` take the step a tape deferred, once it has
    updated that tape's variables, so the group average starts as soon as the step ends.

    Patches the method that does the updates in the tf-keras optimizers (current and legacy)
    and ``tf.compat.v1.train.Optimizer``; an optimizer that has no variable a Prague tape
    differentiated is not affected. Idempotent.
    """
    for base in _optimizer_bases():
        owners = [k for k in base.__mro__ if "apply_gradients" in k.__dict__]
        if not owners:  # Keras 3's tf.keras.optimizers.legacy.Optimizer is a warning class
            continue
        method = owners[-1].__dict__["apply_gradients"]
        if not getattr(method, "_prague_takes_tape_step", False):
            owners[-1].apply_gradients = _taking_the_tape_step(method)


def _optimizer_bases() -> list[type]:
    """``tf.compat.v1``'s optimizer, and those of ``tf.keras`` (tf-keras, or Keras 3 without
    ``TF_USE_LEGACY_KERAS``) and of ``tf_keras`` if a script imported it directly."""
    bases: list[type] = [tf.compat.v1.train.Optimizer]
    keras_modules: list[Any] = []
    try:
        keras_modules.append(tf.keras)
    except (AttributeError, ImportError):  # no Keras at all
        pass
    if "tf_keras" in sys.modules:
        keras_modules.append(sys.modules["tf_keras"])
    for module in keras_modules:
        for name in ("optimizers.Optimizer", "optimizers.legacy.Optimizer"):
            try:
                base = functools.reduce(getattr, name.split("."), module)
            except (AttributeError, ImportError):  # a Keras without legacy optimizers
                continue
            if isinstance(base, type) and base not in bases:
                bases.append(base)
    return bases


def _taking_the_tape_step(apply_gradients: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(apply_gradients)
    def wrapper(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        pairs = list(grads_and_vars)
        result = apply_gradients(self, pairs, *args, **kwargs)
        sources = binding.tape_sources
        updated = [v for _, v in pairs if hasattr(v, "ref") and v.ref() in sources]
        if updated:
            follow_momentum(self, stacklevel=2)
            deps = [] if result is None or tf.executing_eagerly() else [result]
            with tf.control_dependencies(deps):
                run_eagerly(lambda: binding.applied(updated), lambda: updated)
        return result

    wrapper._prague_takes_tape_step = True  # type: ignore[attr-defined]
    return wrapper
