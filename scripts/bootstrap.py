#!/usr/bin/env python3
"""Set up everything horovod-prague needs, idempotently: system packages, ``.venv``, the
patched Horovod wheel (built once and cached outside the clone) and the package itself.

Run by ``scripts/demo.sh`` and ``scripts/test.sh``; safe to run by hand. Each step prints one
line, and a step that is already done is skipped. Standard library only.

``--here``: install into the Python environment that runs the script (your own virtual
environment, with your framework already in it) instead of ``.venv``: the patched Horovod is
built against the torch and/or TensorFlow installed there, then this checkout is installed::

    source ~/my-env/bin/activate
    python scripts/bootstrap.py --here

Environment:
  HOROVOD_PRAGUE_CACHE   where built wheels, the sdist and build logs live
                         (default: ~/.cache/horovod-prague)
  HOROVOD_PRAGUE_JOBS    parallel compile jobs for the Horovod build (default: CPU count)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
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


def main(argv: list[str] | None = None) -> int:
    global PY, VENV
    started = time.monotonic()
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--here"]):
        print(f"usage: {Path(__file__).name} [--here]", file=sys.stderr)
        return 2
    try:
        check_python()
        if args == ["--here"]:
            PY, VENV = Path(sys.executable), Path(sys.prefix)
            check_build_tools()
            versions = installed_frameworks()
        else:
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


def check_build_tools() -> None:
    """``--here``: what the build needs, from the system or the environment."""
    missing = [cmd for cmd in ("g++", "make", "patch") if not shutil.which(cmd)]
    if not shutil.which("cmake") and not (VENV / "bin" / "cmake").exists():
        missing.append("cmake")
    if missing:
        raise SetupError(
            f"missing build tools: {' '.join(missing)}. Install them (Debian: 'apt-get install "
            "g++ make patch cmake'; or 'pip install cmake' in this environment), then run "
            "this again. Open MPI (mpicc) is optional: without it Horovod is built with Gloo."
        )
    if not importlib.util.find_spec("wheel") and not _setuptools_builds_wheels():
        raise SetupError(
            f"this environment ({sys.prefix}) cannot build wheels: run "
            "'python -m pip install wheel' in it, then run this again"
        )
    step(f"build tools present; installing into {sys.prefix}")


def _setuptools_builds_wheels() -> bool:
    """Whether setuptools has ``bdist_wheel`` of its own (70.1 and later)."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (70, 1)


def installed_frameworks() -> dict[str, str]:
    """``--here``: the frameworks of this environment, which the build is made for."""
    found: dict[str, str] = {}
    for name, dists in (("torch", ("torch",)), ("tensorflow", ("tensorflow", "tensorflow-cpu"))):
        for dist in dists:
            try:
                found[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                pass
    if not found:
        raise SetupError(
            f"neither torch nor TensorFlow is installed in {sys.prefix}: install your "
            "framework there first, then run this again"
        )
    for name, have in found.items():
        if not have.startswith(SUPPORTED[name]):
            step(f"note: {name} {have}; the patches were tested with {SUPPORTED[name]}x")
    step("building for " + ", ".join(f"{n} {v}" for n, v in found.items()))
    return {
        **found,
        "mpi": first_line(["mpirun", "--version"]) if shutil.which("mpicc") else "none",
        "python": sys.version.split()[0],
        "gcc": first_line(["g++", "--version"]),
    }


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
        wheels = [build_horovod(key, wheel_dir, patches, versions)]
    pip(
        ["install", "--no-deps", "--force-reinstall", str(wheels[0])],
        CACHE / "logs" / "pip-horovod.log",
    )
    if VENV != ROOT / ".venv":  # --here: Horovod's own dependencies, where missing
        pip(["install", str(wheels[0])], CACHE / "logs" / "pip-horovod.log")
    stamp.write_text(key)


def build_flags(versions: dict[str, str]) -> dict[str, str]:
    """Horovod's build variables for the frameworks and MPI in ``versions``.

    >>> build_flags({"torch": "2.13.0", "mpi": "none"})["HOROVOD_WITHOUT_TENSORFLOW"]
    '1'
    """
    flags = {}
    for name, var in (("torch", "PYTORCH"), ("tensorflow", "TENSORFLOW")):
        flags[f"HOROVOD_WITH{'' if name in versions else 'OUT'}_{var}"] = "1"
    flags[f"HOROVOD_WITH{'OUT' if versions.get('mpi') == 'none' else ''}_MPI"] = "1"
    return flags


def build_horovod(key: str, wheel_dir: Path, patches: list[Path], versions: dict[str, str]) -> Path:
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
            **build_flags(versions),
            "HOROVOD_WITH_GLOO": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
            "MAKEFLAGS": f"-j{jobs}",
        }
        out = Path(tmp) / "dist"
        wheel = ["-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w"]
        begun = log.stat().st_size if log.exists() else 0  # the log keeps earlier builds too
        try:
            run_logged([str(PY), *wheel, str(out), str(src)], log, "the Horovod build", env)
        except SetupError as e:
            this_build = log.read_bytes()[begun:].decode(errors="replace")
            raise SetupError(f"{e}{build_hint(this_build)}") from None

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
    log = CACHE / "logs" / "pip-project.log"
    if VENV == ROOT / ".venv":
        pip(["install", "--no-deps", "--no-build-isolation", "--force-reinstall", str(ROOT)], log)
    else:  # --here: built with the setuptools pyproject.toml asks for, not the environment's
        pip(["install", "--no-deps", "--force-reinstall", str(ROOT)], log)
        pip(["install", str(ROOT)], log)  # numpy, where missing
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


def build_hint(output: str) -> str:
    """What a failed Horovod build's ``output`` says the environment lacks ('' if nothing
    known).

    >>> "C++20" in build_hint("#error C++20 or later compatible compiler is required")
    True
    >>> build_hint("some other error")
    ''
    """
    if "C++20 or later compatible compiler is required" in output:
        return (
            f"\nThe torch here needs C++20 to build extensions against it; Horovod "
            f"{HOROVOD_VERSION} builds its PyTorch extension as C++17. Use torch 2.13 or older "
            "(the tested release is 2.13)."
        )
    if "Could NOT find CUDAToolkit" in output:
        return (
            "\nThe torch here is a CUDA build: Horovod's build against it needs the CUDA "
            "toolkit (cudart and its headers, found through CUDA_HOME). Install it, or a CPU "
            "build of torch."
        )
    return ""


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
