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

from collections.abc import Callable, Iterable
from typing import Any

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

    def follow(self, follower: MoveFollower, changes: object) -> None:
        """Call ``follower(tensor, move, scale)`` at every reported move. ``changes`` is what
        the follower changes (an optimizer's state): a later follower of the same replaces
        it, so that two wrappers of one optimizer correct its buffers once."""
        self._followers[id(changes)] = follower

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
