"""scripts/bootstrap.py fails early and plainly on a wrong environment."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bootstrap(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bootstrap", ROOT / "scripts" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CACHE", tmp_path / "cache")
    return module


def test_a_tampered_sdist_is_refused(bootstrap):
    sdist = bootstrap.CACHE / "sdist" / f"horovod-{bootstrap.HOROVOD_VERSION}.tar.gz"
    sdist.parent.mkdir(parents=True)
    sdist.write_bytes(b"not the real sdist")
    with pytest.raises(bootstrap.SetupError, match="has sha256 .* expected 92a43f5a"):
        bootstrap.fetch_sdist()


def test_too_little_disk_names_the_need(bootstrap, tmp_path):
    with pytest.raises(bootstrap.SetupError, match=r"GiB free at .*building Horovod needs"):
        bootstrap.check_disk(tmp_path, 10**9, "building Horovod")


def test_a_failing_command_is_summarised_with_its_log(bootstrap, tmp_path):
    log = tmp_path / "build.log"
    script = (
        "import sys; print('\\n'.join(['noise'] * 500)); "
        "print('fatal error: x.h: No such file'); sys.exit(3)"
    )
    with pytest.raises(bootstrap.SetupError) as e:
        bootstrap.run_logged([sys.executable, "-c", script], log, what="the Horovod build")
    message = str(e.value)
    assert "the Horovod build failed (exit 3)" in message
    assert "fatal error: x.h: No such file" in message
    assert f"Full log: {log}" in message
    assert message.count("noise") == 0


def test_pip_network_failures_say_so(bootstrap, tmp_path):
    script = (
        "import sys; print('ERROR: Could not find a version that satisfies torch'); sys.exit(1)"
    )
    with pytest.raises(bootstrap.SetupError, match="package index reachable"):
        bootstrap.run_logged(
            [sys.executable, "-c", script], tmp_path / "pip.log", what="pip install"
        )


def test_unsupported_framework_versions_are_named(bootstrap, monkeypatch):
    class Result:
        returncode = 0
        stdout = "2.14.0\n2.21.0\nmpirun (Open MPI) 4.1.4\n"
        stderr = ""

    monkeypatch.setattr(bootstrap.subprocess, "run", lambda *a, **k: Result())
    with pytest.raises(
        bootstrap.SetupError, match="torch 2.14.0 is installed.*made for torch 2.13"
    ):
        bootstrap.check_framework_versions()


def test_missing_system_packages_without_root(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda cmd: None)
    monkeypatch.setattr(bootstrap.os, "geteuid", lambda: 1000)
    with pytest.raises(bootstrap.SetupError, match="missing system packages: .*openmpi-bin"):
        bootstrap.ensure_system_packages()


def test_every_patch_has_a_header_and_applies_with_p1(bootstrap):
    patches = bootstrap.read_series(ROOT / "patches")
    assert len(patches) == 22
    for patch in patches:
        text = patch.read_text()
        header = text.split("\n--- a/", 1)[0]
        assert len(header.strip().splitlines()) >= 3, f"{patch.name} explains nothing"
        assert "\n--- a/" in text and "\n+++ b/" in text


def test_the_series_lists_every_patch_once(bootstrap, tmp_path):
    (tmp_path / "a.patch").write_text("")
    (tmp_path / "b.patch").write_text("")
    (tmp_path / "series").write_text("# comment\nb.patch\n\na.patch\n")
    assert [p.name for p in bootstrap.read_series(tmp_path)] == ["b.patch", "a.patch"]
    (tmp_path / "series").write_text("b.patch\n")
    with pytest.raises(bootstrap.SetupError, match="must list every"):
        bootstrap.read_series(tmp_path)
    (tmp_path / "series").write_text("a.patch\nb.patch\nb.patch\n")
    with pytest.raises(bootstrap.SetupError, match="must list every"):
        bootstrap.read_series(tmp_path)


def test_a_failed_horovod_build_says_what_the_environment_lacks(bootstrap):
    """A torch whose headers need C++20 (2.14 on) and a CUDA torch without the toolkit each
    get their reason; the hint reads only this build's part of the log, so an earlier
    build's failure in the same log does not name the wrong cause."""
    cxx20 = "torch/include/ATen/ATen.h:5:2: error: #error C++20 or later compatible compiler"
    assert "needs C++20" in bootstrap.build_hint(f"... {cxx20} is required to use ATen.")
    cuda = "Could NOT find CUDAToolkit (missing: CUDAToolkit_INCLUDE_DIR CUDA_CUDART)"
    assert "CUDA toolkit" in bootstrap.build_hint(cuda)
    assert bootstrap.build_hint("gmake: *** [all] Error 2") == ""
