"""What the framework packages' ``elastic`` modules share: Horovod elastic under Prague.

``hvd.elastic.run`` resets after a worker was lost or the hosts changed, through its module's
``_reset``; an elastic state's ``commit`` broadcasts whether hosts changed, a global
collective. Each framework's ``elastic`` module points Horovod's names at these, as the
drop-in does: the reset is ``Binding.reset``, and the broadcast goes through the package's
guard, so no rank in it leaves a partner waiting in a group (before: both timed out).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .binding import Binding
from .import_hook import patch


def reset_of(binding: Binding) -> Callable[[], None]:
    """Horovod elastic's ``_reset`` for ``binding``'s framework."""

    def _reset() -> None:
        binding.reset()

    return _reset


def guarded(package: str, name: str) -> Callable[..., Any]:
    """The Prague package's ``name`` (a guarded global collective), looked up when called:
    the package imports its ``elastic`` module before it defines its collectives."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(package), name)(*args, **kwargs)

    call.__name__ = name
    return call


def patch_horovod(*modules: str) -> None:
    """Point the names ``import_hook.REPLACED`` lists for Horovod's ``modules`` at ours."""
    for module in modules:
        patch(importlib.import_module(module))
