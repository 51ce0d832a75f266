"""The patched Horovod's launcher asks whether Horovod was built with Gloo or MPI of an
extension's library loaded alone, without importing a framework (``patches/0018``): before,
every ``horovodrun`` imported TensorFlow in a forked process first.

Each check runs in a fresh interpreter: the checks fork, and a fork of this process would
inherit the frameworks (and their libraries) that other tests loaded."""

import ast
import subprocess
import sys

import pytest

pytest.importorskip("horovod.common.util")


def _run(code: str) -> object:
    """The value of the last line ``code`` prints, in a fresh interpreter."""
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return ast.literal_eval(run.stdout.strip().splitlines()[-1])


def _frameworks_answers() -> tuple[bool, bool]:
    basics = pytest.importorskip("horovod.torch.mpi_ops")._basics
    return basics.gloo_built(), basics.mpi_built()


def test_pytorchs_library_answers_alone_without_importing_a_framework():
    gloo, _ = _frameworks_answers()
    seen = _run(
        "import sys\n"
        "import horovod.common.util as util\n"
        "def seen(ext):\n"
        "    imported = sorted({'torch', 'tensorflow'} & set(sys.modules))\n"
        "    return type(ext).__name__, imported, ext.gloo_built()\n"
        "print(repr(util._check_extension_lambda('torch', seen, 'asked', False, True)))\n"
    )
    assert seen == ("HorovodBasics", [], gloo)


def test_the_launchers_checks_give_the_frameworks_answers():
    answers = _run(
        "import horovod.common.util as util\nprint(repr((util.gloo_built(), util.mpi_built())))\n"
    )
    assert answers == _frameworks_answers()


def test_where_no_library_loads_alone_the_frameworks_are_imported_as_before():
    gloo, _ = _frameworks_answers()
    lines = subprocess.run(
        [
            sys.executable,
            "-c",
            "import horovod.common.util as util\n"
            "util.EXTENSION_LIBRARIES = dict.fromkeys(util.EXTENSIONS, 'no_such_library')\n"
            "print(repr(util.gloo_built(verbose=True)))\n",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.splitlines()
    assert ast.literal_eval(lines[-1]) == gloo
    tried_alone = [line for line in lines if "does not load alone" in line]
    assert len(tried_alone) == 3, lines  # TensorFlow's, PyTorch's and MXNet's
    assert any(line.startswith("Extension ") and " was built with Gloo" in line for line in lines)
