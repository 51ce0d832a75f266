"""The models a rank's Prague steps average, and who follows the moves group averages make.

The optimizers register their models (``track``): a Prague step, a consensus and the final
average then average every tracked model, so that a group's members average the same tensors
whichever optimizer stepped. An optimizer whose momentum takes a share of each group
average's move registers how (``follow``); the framework reports each move (``moved``).
Both last as long as the process's binding, across elastic resets, as the optimizers do::

    models = TrackedModels()
    models.track(lambda: list(model.parameters()))
    models.follow(take_momentum_share, changes=optimizer.state)
    models.tensors()  # every tracked model's tensors, each once
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

from .config import PragueConfig

MoveFollower = Callable[[Any, Any, float], None]
"""Told ``(tensor, move, scale)`` when a group average added ``scale * move`` to ``tensor``."""


class TrackedModels:
    """The registered models and move followers of one process."""

    def __init__(self) -> None:
        self._listers: list[Callable[[], list[Any]]] = []
        self._followers: dict[int, MoveFollower] = {}

    def __bool__(self) -> bool:
        """Whether any model is tracked."""
        return bool(self._listers)

    def track(self, tensors: Callable[[], list[Any]]) -> None:
        """Register a model, as a function that lists its tensors."""
        self._listers.append(tensors)

    def tensors(self) -> list[Any]:
        """The tensors of every tracked model, each once, in registration order."""
        return distinct(t for tensors in self._listers for t in tensors())

    def step_tensors(self, own: list[Any]) -> list[Any]:
        """What an optimizer's Prague step averages: every tracked model (``own`` if none).

        The Group Generator's groups belong to ranks, not to optimizers: with two optimizers,
        rank i's first may meet rank j's second in a group. Averaging every tracked model at
        every step makes each group average the same tensors on every member.
        """
        return self.tensors() if self else own

    def world_tensors(self, values: list[Any]) -> list[Any]:
        """What a world average (a consensus, a sync, the final one) averages: every tracked
        model in registration order, then those of ``values`` not among them, in their order.

        Tracked models are included so that a consensus leaves every one of them equal on all
        ranks, and come first so that the order does not depend on how the caller lists them:
        ``finish([p1, p2])`` on one rank and a consensus over an optimizer's ``[p2, p1]`` on
        another pair the same tensors.
        """
        return distinct([*self.step_tensors(values), *values])

    def follow(self, follower: MoveFollower, changes: object) -> None:
        """Call ``follower(tensor, move, scale)`` at every reported move. ``changes`` is what
        the follower changes (an optimizer's state): a later follower of the same replaces
        it, so that two wrappers of one optimizer correct its buffers once."""
        self._followers[id(changes)] = follower

    def follow_momentum(
        self,
        config: PragueConfig,
        follower: MoveFollower | None,
        changes: object,
        name: str,
        corrected: str,
        stacklevel: int = 1,
    ) -> None:
        """``follow`` with ``follower``, the momentum correction of an optimizer (its class
        ``name``) that changes ``changes``, unless the job's share is 0
        (``momentum_correction``). Group averages of any size report their moves; world
        averages do not: they bring every rank to one model and leave the optimizers as they
        are. None: the optimizer keeps no momentum the framework can correct, and an explicit
        ``momentum_correction`` warns, saying which the framework corrects (``corrected``);
        ``stacklevel`` as ``warnings.warn`` would count it in the caller."""
        if config.momentum_share() == 0:
            return
        if follower is not None:
            self.follow(follower, changes)
        elif config.momentum_correction_set():
            warnings.warn(
                f"momentum_correction={config.momentum_correction}: {name} keeps no "
                f"momentum for it to correct (it corrects {corrected} with momentum > 0)",
                stacklevel=stacklevel + 1,
            )

    @property
    def followed(self) -> bool:
        """Whether any follower waits for moves (else the framework need not report them)."""
        return bool(self._followers)

    def moved(self, tensor: Any, move: Any, scale: float) -> None:
        """A framework's report that a group average added ``scale * move`` to ``tensor``."""
        for follower in self._followers.values():
            follower(tensor, move, scale)


def distinct(values: Iterable[Any]) -> list[Any]:
    """``values`` without repeats of the same object, in first-seen order.

    By identity, since tensors compare element-wise.

        >>> a, b = [1], [1]
        >>> distinct([a, b, a]) == [a, b] and distinct([a, b, a])[1] is b
        True
    """
    seen: set[int] = set()
    found = []
    for v in values:
        if id(v) not in seen:
            seen.add(id(v))
            found.append(v)
    return found
