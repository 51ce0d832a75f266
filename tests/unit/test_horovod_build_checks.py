"""The patched Horovod's launcher asks whether Horovod was built with Gloo or MPI of an
extension's library loaded alone, without importing a framework (``patches/0018``): before,
every ``horovodrun`` imported TensorFlow in a forked process first."""

import ast
import subprocess
import sys

import pytest

util = pytest.importorskip("horovod.common.util")

# Run in a fresh interpreter: the check forks, and a fork of this process would inherit the
# frameworks other tests imported.
ASK = """
import sys
import horovod.common.util as util

def seen(ext):
    return type(ext).__name__, sorted({"torch", "tensorflow"} & set(sys.modules)), ext.gloo_built()

print(repr(util._check_extension_lambda(EXTENSION, seen, "asked", False, library_only=True)))
"""


def _asked_alone(extension: str) -> object:
    """What the check of ``extension``'s library alone sees: the kind of object asked, the
    frameworks imported, and its Gloo answer; None where the library does not load alone."""
    run = subprocess.run(
        [sys.executable, "-c", ASK.replace("EXTENSION", repr(extension))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return ast.literal_eval(run.stdout.strip().splitlines()[-1])


def test_pytorchs_library_answers_alone_without_importing_a_framework():
    torch_ops = pytest.importorskip("horovod.torch.mpi_ops")
    assert _asked_alone("torch") == ("HorovodBasics", [], torch_ops._basics.gloo_built())


def test_a_library_that_needs_its_framework_to_load_gives_no_answer():
    pytest.importorskip("horovod.tensorflow")
    # libtensorflow_framework is found only through TensorFlow's import.
    assert _asked_alone("tensorflow") is None


def test_the_launchers_checks_give_the_frameworks_answer():
    basics = pytest.importorskip("horovod.torch.mpi_ops")._basics
    assert util._built("gloo_built", "built with Gloo", False) == basics.gloo_built()
    assert util._built("mpi_built", "built with MPI", False) == basics.mpi_built()
