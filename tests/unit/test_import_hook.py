"""The drop-in's import hook, each case in a fresh interpreter."""

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from horovod_prague.common.import_hook import TORCH_WAITING_MODULES

REPO = Path(__file__).parents[2]


def _python(code, strategy=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_PRAGUE_")}
    env["PYTHONPATH"] = str(REPO)
    if strategy is not None:
        env["HOROVOD_PRAGUE_STRATEGY"] = strategy
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_without_the_variable_horovod_is_untouched_and_nothing_of_ours_loads():
    out = _python(
        "import sys, horovod.torch as h\n"
        "print(h.init.__module__, h.DistributedOptimizer.__module__)\n"
        "print(sorted(m for m in sys.modules if m.startswith('horovod_prague')))\n"
    )
    assert out == ["horovod.torch.mpi_ops horovod.torch.optimizer", "[]"]


def test_install_replaces_the_names_and_keeps_horovods_own_reachable():
    out = _python(
        "from horovod_prague.common import import_hook\n"
        "import_hook.install()\n"
        "import horovod.torch as h\n"
        "from horovod_prague.common.import_hook import originals, replacements\n"
        "names = list(replacements('horovod.torch'))\n"
        "print(all(getattr(h, n).__prague_target__ == 'horovod_prague.torch' for n in names))\n"
        "print(originals(h).init.__module__, originals(h).allreduce.__module__)\n"
        "import horovod_prague.torch as p\n"
        "print(all(not hasattr(getattr(p, n), '__prague_target__') for n in names))\n"
    )
    assert out == ["True", "horovod.torch.mpi_ops horovod.torch.mpi_ops", "True"]


def test_a_replaced_name_calls_prague():
    out = _python(
        "from horovod_prague.common import import_hook\n"
        "import_hook.install()\n"
        "import horovod.torch as hvd, torch\n"
        "opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)\n"
        "try:\n"
        "    hvd.DistributedOptimizer(opt)\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    assert out == ["horovod_prague is not initialized: call hvd.init() first"]


def test_importing_our_package_first_works_too():
    out = _python(
        "from horovod_prague.common import import_hook\n"
        "import_hook.install()\n"
        "import horovod_prague.torch as p\n"
        "import horovod.torch as h\n"
        "print(h.init.__prague_target__, p._binding.hvd.init.__module__)\n"
    )
    assert out == ["horovod_prague.torch horovod.torch.mpi_ops"]


def test_switching_the_drop_in_on_after_our_package_keeps_horovods_own_for_it():
    """Prague's package calls Horovod's functions, never the drop-in's forwarders back to
    itself, when ``install`` comes after ``import horovod_prague.torch``."""
    out = _python(
        "import horovod_prague.torch as p\n"
        "from horovod_prague.common import import_hook\n"
        "import_hook.install()\n"
        "import horovod.torch as h\n"
        "print(h.init.__prague_target__, hasattr(p._binding.hvd.init, '__prague_target__'))\n"
    )
    assert out == ["horovod_prague.torch False"]


@pytest.mark.parametrize("drop_in", [True, False], ids=["drop-in", "explicit"])
def test_elastic_resets_and_commits_go_through_prague(drop_in):
    """``hvd.elastic.run`` resets through ``Binding.reset``, and an elastic state's commit
    broadcasts behind the guard, under the drop-in and with ``horovod_prague.torch`` alike."""
    out = _python(
        (
            "from horovod_prague.common import import_hook\nimport_hook.install()\n"
            if drop_in
            else ""
        )
        + ("import horovod.torch as hvd\n" if drop_in else "import horovod_prague.torch as hvd\n")
        + "import horovod.torch.elastic as e, horovod.torch.elastic.state as s\n"
        "print(e._reset.__prague_target__, s.broadcast_object.__prague_target__)\n"
        "print(hvd.elastic.run is e.run)\n"
    )
    assert out == ["horovod_prague.torch.elastic horovod_prague.torch", "True"]


@pytest.mark.parametrize("drop_in", [True, False], ids=["drop-in", "explicit"])
def test_horovods_torch_modules_wait_with_pragues_synchronize(drop_in):
    """Every Horovod module that waits with ``synchronize`` calls Prague's, which sleeps
    between polls; a handle Horovod does not know gets Horovod's answer (None), not a loop."""
    out = _python(
        (
            "from horovod_prague.common import import_hook\nimport_hook.install()\n"
            "import horovod.torch as hvd\n"
            if drop_in
            else "import horovod_prague.torch as hvd\n"
        )
        + "import importlib\n"
        "from horovod_prague.common.import_hook import TORCH_WAITING_MODULES\n"
        "for name in TORCH_WAITING_MODULES:\n"
        "    print(name, importlib.import_module(name).synchronize.__prague_target__)\n"
        "print(hvd.synchronize(12345))\n"
        "from horovod_prague.common.import_hook import originals\n"
        "import horovod.torch, horovod.torch.mpi_ops as m\n"
        "print(originals(horovod.torch).synchronize is originals(m).synchronize)\n"
    )
    assert out == [f"{name} horovod_prague.torch" for name in TORCH_WAITING_MODULES] + [
        "None",
        "True",
    ]


@pytest.mark.parametrize("drop_in", [True, False], ids=["drop-in", "explicit"])
def test_keras_elastic_run_is_pragues(drop_in):
    """Keras's ``hvd.elastic.run`` is Prague's, which resets where Horovod's returned as if
    training had ended: a grouped all-reduce or a Prague wait that failed inside ``fit``."""
    module = "horovod.tensorflow.keras" if drop_in else "horovod_prague.keras"
    out = _python(
        (
            "from horovod_prague.common import import_hook\nimport_hook.install()\n"
            if drop_in
            else ""
        )
        + f"import {module} as hvd\n"
        "import horovod.tensorflow.elastic as e\n"
        "print(hvd.elastic.run.__prague_target__, e.run.__prague_target__)\n"
    )
    assert out == ["horovod_prague.tensorflow.elastic horovod_prague.tensorflow.elastic"]


@pytest.mark.skipif(
    not any((Path(p) / "horovod_prague_dropin.pth").exists() for p in site.getsitepackages()),
    reason="horovod-prague is not installed (scripts/bootstrap.py installs it)",
)
def test_the_installed_pth_switches_the_drop_in_on_with_the_variable():
    code = "import horovod.torch as h; print(hasattr(h.init, '__prague_target__'))"
    assert _python(code, strategy="smart") == ["True"]
    assert _python(code) == ["False"]
    assert _python(code, strategy="") == ["False"]
