"""The drop-in: Horovod's framework modules, with Prague's replacements, for unmodified scripts.

``horovod_prague_dropin.pth`` (installed beside the package) calls ``install()`` when a Python
process starts with ``HOROVOD_PRAGUE_STRATEGY`` set, as ``horovodrun --prague`` sets it in
every worker. Without the variable the ``.pth`` line reads it and does nothing else.

``install()`` puts a finder on ``sys.meta_path``. When ``horovod.torch``, ``horovod.tensorflow``
or ``horovod.tensorflow.keras`` is imported, Horovod's own code runs unchanged; then the names
in ``REPLACED`` are pointed at the Prague functions of the same name (looked up when
called, so import order never matters). Horovod's originals stay reachable through
``originals()``, which is what the Prague packages call.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# Horovod's synchronous and asynchronous collectives that can run on the global process set.
# Under Prague each one first brings the model to consensus (``Binding.guard``).
TORCH_GLOBAL_COLLECTIVES = (
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "sparse_allreduce_async",
    "allgather",
    "allgather_async",
    "grouped_allgather",
    "grouped_allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "barrier",
    "broadcast_object",
    "allgather_object",
    "broadcast_parameters",
    "broadcast_optimizer_state",
)

TF_GLOBAL_COLLECTIVES = (
    "allreduce",
    "grouped_allreduce",
    "allgather",
    "grouped_allgather",
    "broadcast",
    "broadcast_",
    "broadcast_variables",
    "broadcast_global_variables",
    "broadcast_object",
    "allgather_object",
    "alltoall",
    "reducescatter",
    "grouped_reducescatter",
)
# Horovod's PyTorch modules that wait for operations with ``synchronize``, which spins; Prague's
# sleeps between polls (``horovod_prague.torch.synchronize``).
TORCH_WAITING_MODULES = (
    "horovod.torch.mpi_ops",
    "horovod.torch.functions",
    "horovod.torch.optimizer",
    "horovod.torch.sync_batch_norm",
)
# The private functions of ``horovod.torch.mpi_ops`` through which every PyTorch collective
# passes its name to Horovod's C++ library: Prague's (``horovod_prague.torch.collectives``) give
# an unnamed collective a name every member gives alike.
TORCH_NAMED_FUNCTIONS = (
    "_allreduce_async",
    "_grouped_allreduce_async",
    "_allgather_async",
    "_grouped_allgather_async",
    "_broadcast_async",
    "_alltoall_async",
    "_reducescatter_async",
    "_grouped_reducescatter_async",
)
KERAS_GLOBAL_COLLECTIVES = (
    "allreduce",
    "allgather",
    "broadcast",
    "reducescatter",
    "broadcast_global_variables",
)
# Horovod's functions that add and remove process sets: under Prague a script's set may have
# the ranks of one of Prague's, which Horovod holds once (``process_sets.ProcessSetPool``).
PROCESS_SET_FUNCTIONS = ("add_process_set", "add_process_sets", "remove_process_set")

# Horovod module -> the Prague modules whose functions replace its names, and those names.
REPLACED: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "horovod.torch": (
        (
            "horovod_prague.torch",
            (
                "init",
                "shutdown",
                "join",
                "synchronize",
                "DistributedOptimizer",
                *TORCH_GLOBAL_COLLECTIVES,
                *PROCESS_SET_FUNCTIONS,
            ),
        ),
    ),
    # Horovod's own modules wait for their operations with the ``synchronize`` they imported.
    **{module: (("horovod_prague.torch", ("synchronize",)),) for module in TORCH_WAITING_MODULES},
    "horovod.torch.mpi_ops": (
        ("horovod_prague.torch", ("synchronize",)),
        ("horovod_prague.torch.collectives", TORCH_NAMED_FUNCTIONS),
    ),
    "horovod.tensorflow": (
        (
            "horovod_prague.tensorflow",
            (
                "init",
                "shutdown",
                "join",
                "DistributedOptimizer",
                "DistributedGradientTape",
                *TF_GLOBAL_COLLECTIVES,
                *PROCESS_SET_FUNCTIONS,
            ),
        ),
    ),
    "horovod.tensorflow.keras": (
        (
            "horovod_prague.keras",
            (
                "init",
                "shutdown",
                "DistributedOptimizer",
                *KERAS_GLOBAL_COLLECTIVES,
                *PROCESS_SET_FUNCTIONS,
            ),
        ),
    ),
    # ``hvd.elastic.run``'s reset (Keras's elastic runs TensorFlow's), and the broadcast with
    # which an elastic state's ``commit`` checks for host changes: a global collective, guarded.
    "horovod.torch.elastic": (("horovod_prague.torch.elastic", ("_reset",)),),
    "horovod.torch.elastic.state": (("horovod_prague.torch", ("broadcast_object",)),),
    "horovod.tensorflow.elastic": (
        ("horovod_prague.tensorflow.elastic", ("_reset", "run")),
        ("horovod_prague.tensorflow", ("broadcast_object",)),
    ),
    # ``run`` resets on a failed grouped all-reduce or Prague wait inside a ``tf.function``.
    "horovod.tensorflow.keras.elastic": (("horovod_prague.tensorflow.elastic", ("run",)),),
}
# Standalone Keras (``import keras``), which is Keras 3 with TensorFlow 2.16 and later, where
# Horovod 0.28's wrappers do not work; scripts use ``horovod.tensorflow.keras`` with tf-keras.
NOT_YET = ("horovod.keras",)

_originals: dict[str, dict[str, Any]] = {}


def install() -> None:
    """Replace Horovod's functions in modules imported from now on (idempotent)."""
    if not any(isinstance(f, _DropInFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _DropInFinder())
    for name in REPLACED:
        if name in sys.modules:
            patch(sys.modules[name])


def patch(module: ModuleType) -> None:
    """Point ``module``'s replaced names at Prague's functions, once per module object.

    Once only: a script may have wrapped a patched name since (a wrapper that calls the
    forwarder it found); patching again would take that wrapper for Horovod's original, and
    Prague's function would call the wrapper that calls it.
    """
    if getattr(module, "__prague_patched__", False):
        return
    module.__prague_patched__ = True  # type: ignore[attr-defined]
    saved = _originals.setdefault(module.__name__, {})
    for name, target in replacements(module.__name__).items():
        original = getattr(module, name)
        if getattr(original, "__prague_target__", None) == target:
            # Imported from a module patched first (``synchronize`` from ``mpi_ops``): keep
            # Horovod's own reachable through ``originals`` all the same.
            saved.setdefault(name, original.__wrapped__)
            continue
        saved[name] = original
        setattr(module, name, _forward(target, name, original))


def patch_horovod(*modules: str) -> None:
    """Import Horovod's ``modules`` and point their replaced names at ours: what the drop-in
    does on import, for a script that imports Prague's packages instead."""
    for module in modules:
        patch(importlib.import_module(module))


def replacements(module: str) -> dict[str, str]:
    """Each name of Horovod's ``module`` that Prague replaces -> the Prague module that has it."""
    return {name: target for target, names in REPLACED[module] for name in names}


def originals(module: ModuleType) -> ModuleType:
    """``module`` as Horovod made it: a copy whose replaced names are Horovod's own, whether
    the drop-in replaced them before this call or does so after it (``install`` once a Prague
    package has taken its copy)."""
    view = ModuleType(module.__name__)
    view.__dict__.update(vars(module))
    view.__dict__.update(_originals.get(module.__name__, {}))
    return view


def _forward(target: str, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(target), name)(*args, **kwargs)

    call.__prague_target__ = target  # type: ignore[attr-defined]
    # TensorFlow's AutoGraph calls functions marked so as they are, inside a tf.function too.
    call.autograph_info__ = {}  # type: ignore[attr-defined]
    return call


class _DropInFinder(importlib.abc.MetaPathFinder):
    """Finds Horovod's modules as usual and patches those in ``REPLACED`` once loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in NOT_YET:
            warnings.warn(
                f"HOROVOD_PRAGUE_STRATEGY is set, but the Prague drop-in does not cover "
                f"{fullname}, which runs as stock Horovod; use horovod.tensorflow.keras "
                "(tf-keras) instead",
                stacklevel=2,
            )
            return None
        if fullname not in REPLACED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        patch(module)
