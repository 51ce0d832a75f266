"""``DistributedOptimizer``: Horovod's optimizer wrapper, with group averaging of the model.

Horovod's wrapper all-reduces gradients, then steps. This one steps on the local gradient,
then averages the parameters (and the models' buffers) with the group the Group Generator
gives this rank; every ``sync_every`` steps (the job's option) that group is all ranks::

    import horovod_prague.torch as hvd

    hvd.init(strategy="smart")
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

It takes Horovod's arguments and makes Horovod's checks. Those that shape how gradients are
all-reduced (``compression``, ``op``, ``gradient_predivide_factor``, ``groups``,
``sparse_as_dense``) have nothing to act on, since gradients stay local; see docs/usage.md.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from ..common.arguments import check_horovod_arguments, check_sync_every, warn_ignored
from ..common.config import share_at
from ..common.models import distinct
from . import adam
from .binding import _hvd, binding
from .buffers import ModelFinder

STEP_WARNING = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code."
)
PRAGUE_STATE_KEY = "prague"
MOMENTUM_BUFFER_OPTIMIZERS = (torch.optim.SGD, torch.optim.RMSprop)
"""Optimizers whose ``momentum_buffer`` updates ``p -= lr * buffer``: ``momentum_correction``
corrects theirs (``share_at``), and no other's."""
TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally."
)
_UNDER_OWN_PACE = (
    " Under own_pace=on this rank's batches are larger than the script's (up to twice): a "
    "script that cuts its batch into sub-batches of a fixed size takes more of them. Cut it "
    "into backward_passes_per_step parts (torch.chunk) instead, or turn own_pace off."
)


class _PragueOptimizer(torch.optim.Optimizer):
    """Mixed in before the user's optimizer class; shares that optimizer's state."""

    def _prague_setup(
        self,
        backward_passes_per_step: int,
        model: torch.nn.Module | None,
        scheduled_from: torch.optim.Optimizer | None,
    ) -> None:
        self._prague_scheduled_from = scheduled_from
        self.backward_passes_per_step = backward_passes_per_step
        self._prague_steps = 0
        self._adam_scales: list[float] | None = None
        self._synchronized = False
        self._should_synchronize = True
        self._passes: dict[int, int] = {}
        self._models = [model] if model is not None else None
        self._finder = None if model is not None else ModelFinder(self._params())
        for p in self._params():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._count_pass)
        binding.models.track(self.prague_tensors)
        self._param_groups_seen: tuple[int, ...] = ()
        self._param_groups_by_id: dict[int, dict[str, Any]] = {}
        with_momentum = isinstance(self, MOMENTUM_BUFFER_OPTIMIZERS) and any(
            group.get("momentum", 0) for group in [self.defaults, *self.param_groups]
        )
        binding.models.follow_momentum(
            binding.config(),
            self._take_momentum_share if with_momentum else None,
            self.state,
            type(self).__name__,
            "torch.optim.SGD and RMSprop",
            stacklevel=3,
        )

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _take_momentum_share(self, tensor: torch.Tensor, move: torch.Tensor, scale: float) -> None:
        """A group average added ``scale * move`` to ``tensor``: if it is one of this
        optimizer's parameters, its momentum buffer takes ``momentum_correction``'s share of
        that move as if it were a step (SGD and RMSprop update ``p -= lr * buffer``;
        ``share_at``)."""
        group = self._group_of(tensor)
        buffer = self.state.get(tensor, {}).get("momentum_buffer") if group else None
        if buffer is None:
            return
        lr = float(group["lr"])
        share = share_at(binding.config().momentum_share(), float(group.get("momentum", 0)))
        if share > 0 and lr > 0:
            buffer.sub_(move.to(buffer), alpha=share * scale / lr)

    def _group_of(self, tensor: torch.Tensor) -> dict[str, Any] | None:
        """The parameter group holding ``tensor`` (None for a buffer or another's tensor),
        from the current groups: ``add_param_group`` adds one, ``load_state_dict`` replaces
        them all (an elastic restore, a resumed checkpoint)."""
        seen = tuple(map(id, self.param_groups))
        if seen != self._param_groups_seen:
            self._param_groups_seen = seen
            self._param_groups_by_id = {
                id(p): group for group in self.param_groups for p in group["params"]
            }
        return self._param_groups_by_id.get(id(tensor))

    def _count_pass(self, p: torch.Tensor) -> None:
        passes = self._passes.get(id(p), 0) + 1
        if passes > self.backward_passes_per_step:
            raise AssertionError(TOO_MANY_PASSES + _UNDER_OWN_PACE * (binding.job.stats.scale > 1))
        self._passes[id(p)] = passes

    def prague_tensors(self) -> list[torch.Tensor]:
        """What a Prague step averages: every parameter, then the trained models' buffers."""
        if self._models is None:
            assert self._finder is not None
            self._models = self._finder.models()
            self._finder = None
        return distinct([*self._params(), *(b for m in self._models for b in m.buffers())])

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Change how many backward passes may accumulate before ``step()``."""
        if passes <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.backward_passes_per_step = passes
        self._passes.clear()

    def synchronize(self) -> None:
        """Finish this step's gradients; afterwards they may be modified (e.g. clipped).

        Prague applies each rank's own gradient, so there is nothing to wait for; the model
        itself is averaged in ``step()``.
        """
        self._passes.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Use after ``synchronize()``: ``step()`` inside does not synchronize again."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        """Apply the local gradient, then average the model with this step's group (every
        ``sync_every`` steps of the fastest rank, the Group Generator makes it all ranks)."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(STEP_WARNING, stacklevel=2)
            self.synchronize()
        self._synchronized = False
        self._passes.clear()
        if _inside_horovod_broadcast():
            return super().step(closure)
        with adam.scaled(self, self._adam_step_scales()):
            loss = super().step(closure)
        self._prague_steps += 1
        if self._prague_scheduled_from is not None:
            self._prague_scheduled_from._opt_called = True  # for its LR scheduler's order check
        binding.exchange(binding.models.step_tensors(self.prague_tensors()))
        return loss

    def _adam_step_scales(self) -> list[float]:
        """Each parameter group's factor for this step (``adam_correction``), measured
        every ``adam.EVERY`` steps; all 1 when it is off or for another optimizer."""
        if not adam.corrects(self) or binding.config().adam_correction != "on":
            return []
        if self._adam_scales is None or self._prague_steps % adam.EVERY == 0:
            ranks = binding.hvd.size()
            self._adam_scales = [adam.scale(self, group, ranks) for group in self.param_groups]
        return self._adam_scales

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, with Prague's step count."""
        state = super().state_dict()
        state[PRAGUE_STATE_KEY] = {"steps": self._prague_steps}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from ``state_dict()``; one without Prague's step count sets it to 0.
        As Horovod's, it forgets the backward passes counted and a ``synchronize()`` made
        since the last step (an elastic restore comes back to a step's start)."""
        self._passes.clear()
        self._synchronized = False
        self._should_synchronize = True
        state = dict(state_dict)
        prague = state.pop(PRAGUE_STATE_KEY, None)
        super().load_state_dict(state)
        self._prague_steps = int(prague["steps"]) if prague else 0
        self._adam_scales = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients and the count of accumulated backward passes."""
        self._passes.clear()
        super().zero_grad(set_to_none)


def DistributedOptimizer(  # noqa: N802  (Horovod's name)
    optimizer: torch.optim.Optimizer,
    named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
    compression: Any = _hvd.Compression.none,
    backward_passes_per_step: int = 1,
    op: Any = _hvd.Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: Any = _hvd.global_process_set,
    *,
    model: torch.nn.Module | None = None,
    sync_every: int | None = None,
) -> torch.optim.Optimizer:
    """Wrap ``optimizer``: local step, then group averaging of the model (Prague).

    Horovod's arguments keep their meaning where Prague has one: ``named_parameters`` is
    checked as Horovod checks it; ``backward_passes_per_step`` gradients accumulate locally
    before each ``step()``. Prague's own:

    model: the module whose buffers (BatchNorm statistics) are averaged with the parameters.
        Default: found from the forward passes before the first step (``buffers.ModelFinder``).
    sync_every: None or the job's ``sync_every`` (``--prague-sync-every``), else ValueError:
        the Group Generator makes the periodic global average for all ranks at once.

    Returns an object of a subclass of ``optimizer``'s class sharing its state, as Horovod does.
    Call ``hvd.init`` (``horovod_prague.torch.init``) first.
    """
    _check_horovod_arguments(
        optimizer,
        named_parameters,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        num_groups,
        groups,
    )
    if named_parameters is not None:
        _check_named_parameters(optimizer, list(named_parameters))
    if process_set.process_set_id != _hvd.global_process_set.process_set_id:
        raise ValueError(
            "process_set: Prague forms its groups over all ranks, so DistributedOptimizer "
            "needs the global process set"
        )
    _warn_ignored(compression, op)
    check_sync_every(sync_every, binding.config)
    binding.runtime()  # a clear error before Prague is initialized
    cls = type(optimizer.__class__.__name__, (_PragueOptimizer, optimizer.__class__), {})
    wrapped = cls.__new__(cls)
    state = dict(optimizer.__dict__)
    # An LR scheduler made before wrapping puts its own ``step`` on the instance, bound to
    # ``optimizer``; copied, it would step ``optimizer``'s class and never average.
    instance_step = state.pop("step", None)
    scheduled = getattr(instance_step, "_wrapped_by_lr_sched", False)
    if instance_step is not None and not scheduled:
        raise ValueError(
            "optimizer: its step() was replaced on the instance (optimizer.step = ...), so "
            "Prague cannot add the group average to it; wrap the optimizer first, then patch"
        )
    wrapped.__dict__.update(state)
    wrapped._prague_setup(backward_passes_per_step, model, optimizer if scheduled else None)
    return wrapped


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer, root_rank: int, model: Any = None
) -> None:
    """Horovod's ``broadcast_optimizer_state``, plus Prague's step count from ``root_rank``.

    A job resumed from a checkpoint loaded on one rank must count ``sync_every`` alike on
    every rank: the global averages are collectives all ranks take at the same step.
    """
    _hvd.broadcast_optimizer_state(optimizer, root_rank, model=model)
    if isinstance(optimizer, _PragueOptimizer):
        optimizer._prague_steps = _hvd.broadcast_object(
            optimizer._prague_steps, root_rank, name="prague.optimizer_steps"
        )


def _check_horovod_arguments(
    optimizer: Any,
    named_parameters: Any,
    backward_passes_per_step: int,
    op: Any,
    gradient_predivide_factor: float,
    num_groups: int,
    groups: Any,
) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer)}")
    check_horovod_arguments(
        op,
        _hvd.Average,
        gradient_predivide_factor,
        num_groups,
        groups,
        backward_passes_per_step,
        _check_groups,
    )


def _check_groups(groups: Any) -> None:
    if isinstance(groups, list):
        seen: set[int] = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
    elif not (isinstance(groups, int) and groups > 0):
        raise ValueError(
            "groups should be a non-negative integer or a list of list of torch.Tensor."
        )


def _check_named_parameters(
    optimizer: torch.optim.Optimizer, named: list[tuple[str, torch.Tensor]]
) -> None:
    if any(not isinstance(item, tuple) for item in named):
        raise ValueError(
            "named_parameters should be a sequence of tuples (name, parameter), usually "
            "produced by model.named_parameters()."
        )
    names = [name for name, _ in named]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(
            "Parameter names in named_parameters must be unique. "
            f"Found duplicates: {', '.join(duplicates)}"
        )
    named_ids = {id(p) for _, p in named}
    unnamed = [
        id(p) for group in optimizer.param_groups for p in group["params"] if id(p) not in named_ids
    ]
    if unnamed:
        raise ValueError(
            "named_parameters was specified, but one or more model parameters were not "
            f"named. Python object ids: {', '.join(map(str, unnamed))}"
        )


def _warn_ignored(compression: Any, op: Any) -> None:
    warn_ignored(compression, op, _hvd.Compression.none, _hvd.Average, "parameters")


def _inside_horovod_broadcast() -> bool:
    """Whether Horovod's ``broadcast_optimizer_state`` is calling ``step()``.

    For any optimizer class but its own, it calls ``step()`` once with zero gradients to create
    the optimizer's state. Only the local step may run then: a group step there would put a
    step no script asked for into the Group Generator's order.
    """
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        if (
            frame.f_code.co_name == "broadcast_optimizer_state"
            and frame.f_globals.get("__name__") == "horovod.torch.functions"
        ):
            return True
        frame = frame.f_back
    return False
