#!/usr/bin/env python3
"""Set up everything horovod-prague needs, idempotently: system packages, ``.venv``, the
patched Horovod wheel (built once and cached outside the clone) and the package itself.

Run by ``scripts/demo.sh`` and ``scripts/test.sh``; safe to run by hand. Each step prints one
line, and a step that is already done is skipped. Standard library only.

Environment:
  HOROVOD_PRAGUE_CACHE   where built wheels, the sdist and build logs live
                         (default: ~/.cache/horovod-prague)
  HOROVOD_PRAGUE_JOBS    parallel compile jobs for the Horovod build (default: CPU count)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
REQUIREMENTS = ROOT / "requirements" / "dev.txt"
CACHE = Path(os.environ.get("HOROVOD_PRAGUE_CACHE", Path.home() / ".cache" / "horovod-prague"))

HOROVOD_VERSION = "0.28.1"
HOROVOD_SDIST_SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
# The versions the patches were made and tested for.
SUPPORTED = {"torch": "2.13.", "tensorflow": "2.21."}
APT_PACKAGES = [
    "g++",
    "make",
    "patch",
    "openmpi-bin",
    "libopenmpi-dev",
    # Emulated hosts (scripts/hosts.py): network namespaces joined by a bridge, sshd in each.
    "iproute2",
    "openssh-server",
    "openssh-client",
]
NEEDED_COMMANDS = {
    "g++": "g++",
    "make": "make",
    "patch": "patch",
    "mpicc": "libopenmpi-dev",
    "mpirun": "openmpi-bin",
    "ip": "iproute2",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
}
MIN_FREE_GIB_VENV = 8
MIN_FREE_GIB_BUILD = 6


class SetupError(Exception):
    """A problem the user must fix; the message says what and how."""


def read_series(patches: Path) -> list[Path]:
    """The patches in ``patches/series`` order (one file name a line; ``#`` comments). Every
    ``*.patch`` there must be listed once, and every name listed must exist."""
    names = [
        line.strip()
        for line in (patches / "series").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    present = sorted(p.name for p in patches.glob("*.patch"))
    if sorted(names) != present or len(set(names)) != len(names):
        raise SetupError(
            f"{patches / 'series'} must list every *.patch there once: listed {names}, "
            f"present {present}"
        )
    return [patches / name for name in names]


def main() -> int:
    started = time.monotonic()
    try:
        check_python()
        ensure_system_packages()
        ensure_venv()
        versions = check_framework_versions()
        ensure_horovod(versions)
        ensure_project()
    except SetupError as e:
        print(f"\nset-up failed: {e}", file=sys.stderr)
        return 1
    print(f"set-up: ready in {time.monotonic() - started:.0f}s")
    return 0


def step(message: str) -> None:
    print(f"set-up: {message}", flush=True)


def check_python() -> None:
    if sys.version_info[:2] != (3, 11):
        raise SetupError(
            f"Python 3.11 is required (the patched Horovod and the pinned torch wheel are "
            f"for 3.11); this is {sys.version.split()[0]} at {sys.executable}. "
            "Run the script with python3.11."
        )


def ensure_system_packages() -> None:
    missing = sorted({pkg for cmd, pkg in NEEDED_COMMANDS.items() if not shutil.which(cmd)})
    if not missing:
        step("system packages present (g++, make, patch, Open MPI, iproute2, OpenSSH)")
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SetupError(
            f"missing system packages: {' '.join(missing)}. Install them as root, e.g. "
            f"'apt-get install {' '.join(APT_PACKAGES)}', then run this again."
        )
    step(f"installing system packages: {' '.join(APT_PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = CACHE / "logs" / "apt.log"
    run_logged(["apt-get", "update"], log, env=env, what="apt-get update")
    run_logged(
        ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES],
        log,
        env=env,
        what="apt-get install",
    )


def ensure_venv() -> None:
    stamp = VENV / ".prague-requirements"
    wanted = digest([REQUIREMENTS.read_bytes(), sys.version.encode()])
    if stamp.exists() and stamp.read_text() == wanted and PY.exists():
        step(".venv up to date")
        return
    check_disk(ROOT, MIN_FREE_GIB_VENV, "the virtual environment (torch and TensorFlow)")
    if not PY.exists():
        step("creating .venv")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    step(f"installing Python packages from {REQUIREMENTS.relative_to(ROOT)} (a few minutes)")
    log = CACHE / "logs" / "pip-requirements.log"
    pip(["install", "--upgrade", "pip", "setuptools", "wheel"], log)
    pip(["install", "-r", str(REQUIREMENTS)], log)
    stamp.write_text(wanted)


def check_framework_versions() -> dict[str, str]:
    code = (
        "import importlib.metadata as m, subprocess;"
        "print(m.version('torch'));print(m.version('tensorflow-cpu'));"
        "print(subprocess.run(['mpirun','--version'],capture_output=True,text=True)"
        ".stdout.splitlines()[0])"
    )
    out = subprocess.run([str(PY), "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SetupError(f"could not read the installed framework versions:\n{out.stderr}")
    torch_v, tf_v, mpi_v = out.stdout.strip().splitlines()
    for name, have in (("torch", torch_v), ("tensorflow", tf_v)):
        if not have.startswith(SUPPORTED[name]):
            raise SetupError(
                f"{name} {have} is installed, but the patches in patches/ were made for "
                f"{name} {SUPPORTED[name]}x. Reinstall from {REQUIREMENTS.relative_to(ROOT)} "
                "(delete .venv and run again), or update the patches and SUPPORTED."
            )
    return {
        "torch": torch_v,
        "tensorflow": tf_v,
        "mpi": mpi_v,
        "python": sys.version.split()[0],
        "gcc": first_line(["g++", "--version"]),
    }


def ensure_horovod(versions: dict[str, str]) -> None:
    patches = read_series(ROOT / "patches")
    key = digest(
        [
            HOROVOD_SDIST_SHA256.encode(),
            *(p.read_bytes() for p in patches),
            repr(sorted(versions.items())).encode(),
        ]
    )[:20]
    stamp = VENV / ".prague-horovod"
    if stamp.exists() and stamp.read_text() == key:
        step(f"Horovod {HOROVOD_VERSION} (patched, build {key}) already installed")
        return
    wheel_dir = CACHE / "wheels" / key
    wheels = sorted(wheel_dir.glob("horovod-*.whl"))
    if wheels:
        step(f"installing cached Horovod wheel {wheels[0]}")
    else:
        wheels = [build_horovod(key, wheel_dir, patches)]
    pip(
        ["install", "--no-deps", "--force-reinstall", str(wheels[0])],
        CACHE / "logs" / "pip-horovod.log",
    )
    stamp.write_text(key)


def build_horovod(key: str, wheel_dir: Path, patches: list[Path]) -> Path:
    check_disk(CACHE, MIN_FREE_GIB_BUILD, "building Horovod")
    sdist = fetch_sdist()
    log = CACHE / "logs" / f"horovod-build-{key}.log"
    jobs = os.environ.get("HOROVOD_PRAGUE_JOBS", str(os.cpu_count() or 2))
    step(
        f"building Horovod {HOROVOD_VERSION} with {len(patches)} patches, {jobs} jobs "
        f"(once per machine: about 5 minutes on 2 idle cores); log: {log}"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="horovod-build-", dir=CACHE) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="tar")
        src = Path(tmp) / f"horovod-{HOROVOD_VERSION}"
        for patch in patches:
            result = subprocess.run(
                ["patch", "-p1", "--forward", "--batch", "-i", str(patch)],
                cwd=src,
                capture_output=True,
                text=True,
            )
            if result.returncode:
                raise SetupError(
                    f"patch {patch.name} does not apply to the Horovod "
                    f"{HOROVOD_VERSION} sdist:\n{result.stdout}{result.stderr}"
                )
        env = {
            **os.environ,
            "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOROVOD_WITH_PYTORCH": "1",
            "HOROVOD_WITH_TENSORFLOW": "1",
            "HOROVOD_WITH_GLOO": "1",
            "HOROVOD_WITH_MPI": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
            "MAKEFLAGS": f"-j{jobs}",
        }
        out = Path(tmp) / "dist"
        run_logged(
            [
                str(PY),
                "-m",
                "pip",
                "wheel",
                "-v",
                "--no-build-isolation",
                "--no-deps",
                "-w",
                str(out),
                str(src),
            ],
            log,
            env=env,
            what="the Horovod build",
        )
        built = sorted(out.glob("horovod-*.whl"))
        if not built:
            raise SetupError(f"the Horovod build produced no wheel; see {log}")
        wheel_dir.mkdir(parents=True, exist_ok=True)
        target = wheel_dir / built[0].name
        shutil.copy2(built[0], target.with_suffix(".part"))
        target.with_suffix(".part").rename(target)
    step(f"built {target.name} in {time.monotonic() - started:.0f}s, cached in {wheel_dir}")
    return target


def fetch_sdist() -> Path:
    target = CACHE / "sdist" / f"horovod-{HOROVOD_VERSION}.tar.gz"
    if not target.exists():
        step(f"downloading the Horovod {HOROVOD_VERSION} sdist")
        target.parent.mkdir(parents=True, exist_ok=True)
        pip(
            [
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(target.parent),
                f"horovod=={HOROVOD_VERSION}",
            ],
            CACHE / "logs" / "pip-download.log",
        )
    actual = hashlib.sha256(target.read_bytes()).hexdigest()
    if actual != HOROVOD_SDIST_SHA256:
        raise SetupError(
            f"{target} has sha256 {actual}, expected {HOROVOD_SDIST_SHA256}: this is not the "
            f"Horovod {HOROVOD_VERSION} sdist the patches were made for. Delete it and run "
            "again; if the index keeps serving it, do not build from it."
        )
    return target


def ensure_project() -> None:
    """Install this checkout (not editable: only a regular install writes the drop-in's .pth)."""
    stamp = VENV / ".prague-project"
    sources = sorted(
        p
        for pattern in ("horovod_prague/**/*.py", "*.pth", "pyproject.toml", "setup.py")
        for p in ROOT.glob(pattern)
    )
    wanted = digest([p.read_bytes() for p in sources] + [str(ROOT).encode()])
    if stamp.exists() and stamp.read_text() == wanted:
        step("horovod-prague installed, up to date with this checkout")
        return
    step("installing horovod-prague from this checkout")
    pip(
        ["install", "--no-deps", "--no-build-isolation", "--force-reinstall", str(ROOT)],
        CACHE / "logs" / "pip-project.log",
    )
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    stamp.write_text(wanted)


def pip(args: list[str], log: Path) -> None:
    run_logged(
        [str(PY), "-m", "pip", "--disable-pip-version-check", *args], log, what=f"pip {args[0]}"
    )


_NETWORK = re.compile(
    r"(connection|network|resolve|timed out|temporary failure|proxy|"
    r"No matching distribution|Could not find a version)",
    re.I,
)
_ERROR = re.compile(r"(error|fatal|No such file|undefined reference|multiple definition)", re.I)


def run_logged(cmd: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log``; on failure, summarise and name the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        result = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if result.returncode == 0:
        return
    lines = log.read_text(errors="replace").splitlines()
    tail = lines[-400:]
    if what.startswith("pip") and any(_NETWORK.search(line) for line in tail):
        raise SetupError(
            f"{what} failed and its output mentions the network: is the package index "
            f"reachable (pip's index settings, proxy)? Full log: {log}"
        )
    errors = [line.strip() for line in tail if _ERROR.search(line)][-12:]
    summary = "\n  ".join(errors) if errors else "\n  ".join(tail[-12:])
    raise SetupError(
        f"{what} failed (exit {result.returncode}). Key lines:\n  {summary}\nFull log: {log}"
    )


def check_disk(path: Path, gib: int, purpose: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path).free / 2**30
    if free < gib:
        raise SetupError(
            f"only {free:.1f} GiB free at {path}; {purpose} needs about {gib} GiB. "
            "Free some space (or point HOROVOD_PRAGUE_CACHE elsewhere) and retry."
        )


def digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def first_line(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
