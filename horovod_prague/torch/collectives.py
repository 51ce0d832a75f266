"""Horovod's PyTorch collectives as a script calls them under Prague: named alike on every member.

Every PyTorch collective of Horovod, synchronous or not, grouped or not, reaches the C++ library
through one private function per kind in ``horovod.torch.mpi_ops`` (``_allreduce_async``,
``_allgather_async`` ...), which takes the name. Prague puts the functions of the same names
here in their place (``import_hook.TORCH_NAMED_FUNCTIONS``), so an unnamed collective gets a name
that every member gives it alike, and the script's collective is remembered for its wait's
deadline (``horovod_prague.common.script_collectives``, ``ScriptWaits.wait``).
Prague's own collectives pass through them with their names unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import horovod.torch.mpi_ops

from ..common.import_hook import TORCH_NAMED_FUNCTIONS, originals
from .binding import binding

_mpi_ops = originals(horovod.torch.mpi_ops)


def _named(function: str) -> Callable[..., int]:
    original = getattr(_mpi_ops, function)
    kind = function.strip("_").removesuffix("_async")
    signature = inspect.signature(original)

    def call(*args: Any, **kwargs: Any) -> int:
        bound = signature.bind(*args, **kwargs)
        process_set = bound.arguments.get("process_set", _mpi_ops.global_process_set)
        # By id and ranks: Horovod may give a removed set's id to a set of other ranks.
        key = (process_set.process_set_id, tuple(process_set.ranks or ()))
        name = binding.script_waits.name(kind, bound.arguments["name"], key)
        bound.arguments["name"] = name
        handle = original(*bound.args, **bound.kwargs)
        binding.script_waits.started(handle, name, process_set)
        return handle

    call.__name__ = call.__qualname__ = function
    call.__doc__ = f"Horovod's ``{function}``, named alike on every member (module doc)."
    return call


globals().update({function: _named(function) for function in TORCH_NAMED_FUNCTIONS})
