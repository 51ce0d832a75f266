"""A CPU quota on a process and the processes it starts: a slow host, made of a fast one.

``prague-bench --slow-host CORES`` puts the last emulated host's sshd (``hosts.Hosts``) in a
cgroup of its own whose CPU time is capped at ``CORES`` cores: every rank that sshd starts
there inherits the cap, so the host computes, communicates and waits as a host with less CPU
would, whatever its script does. cgroup v1 (``cpu.cfs_quota_us``) or v2 (``cpu.max``); root
only. Every cgroup made here is named ``prague-slow-*`` and ``remove_all`` removes them::

    path = limit(pid, cores=0.5, name="h2")    # pid and its future children: half a core
    remove_all()                               # once the processes in it have ended
"""

from __future__ import annotations

import contextlib
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "prague-slow-"
PERIOD_US = 100_000


class CpuLimitError(RuntimeError):
    """No cgroup CPU controller this process may use."""


def _controller() -> tuple[Path, int]:
    """The CPU controller's hierarchy and its cgroup version."""
    v1 = ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return ROOT, 2
    raise CpuLimitError(
        f"no cgroup CPU controller under {ROOT} (cgroup v1's cpu or v2's cpu): a slow host "
        "needs one, and root"
    )


def limit(pid: int, cores: float, name: str) -> Path:
    """Cap ``pid`` (and what it starts from now on) at ``cores`` cores; the cgroup's path."""
    if not 0.01 <= cores <= 1024:
        raise ValueError(f"--slow-host: expected a number of cores from 0.01, got {cores}")
    root, version = _controller()
    path = root / f"{PREFIX}{name}"
    try:
        path.mkdir(exist_ok=True)
        quota = round(cores * PERIOD_US)
        if version == 1:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            control = root / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
            (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        (path / "cgroup.procs").write_text(str(pid))
    except OSError as e:
        raise CpuLimitError(
            f"could not cap process {pid} at {cores:g} cores in {path}: {e}"
        ) from None
    return path


def release(pid: int) -> None:
    """Take ``pid`` out of a cap that ``limit`` gave it (into the controller's root cgroup);
    a process in no ``prague-slow-*`` cgroup is left where it is."""
    try:
        if PREFIX not in Path(f"/proc/{pid}/cgroup").read_text():
            return
        root, _ = _controller()
        (root / "cgroup.procs").write_text(str(pid))
    except (CpuLimitError, OSError):
        pass


def remove_all() -> list[str]:
    """Remove every cgroup ``limit`` made whose processes have all ended; what it removed."""
    try:
        root, _ = _controller()
    except CpuLimitError:
        return []
    done = []
    for path in sorted(root.glob(f"{PREFIX}*")):
        with contextlib.suppress(OSError):
            path.rmdir()
            done.append(f"removed cgroup {path}")
    return done
