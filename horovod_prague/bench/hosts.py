"""Emulated hosts on one Linux machine: network namespaces with sshd, for multi-host runs.

``up N`` makes N "hosts" ``h1..hN``, each a network namespace (``prague-h1``...) with its own
hostname (a UTS namespace), its own ``/etc/hosts`` (a bind mount in its own mount namespace)
and its own sshd, all on one bridge. Each host's NIC and the launcher's bridge are named
``prague0``, so ``horovodrun`` finds an interface common to every host, as on a cluster::

    python3 scripts/hosts.py up 2
    python3 scripts/hosts.py run -- horovodrun -np 4 -H h1:2,h2:2 --gloo python train.py
    python3 scripts/hosts.py shape 250mbit       # tbf on both directions of every host's link
    python3 scripts/hosts.py down

``run`` starts its command in a private mount namespace where ``/etc/hosts`` also names
``h1..hN`` and ssh uses this run's own key and known-hosts file, so ``ssh h1`` just works.
Nothing is written to ``~/.ssh``, ``/etc/ssh`` or ``/etc/hosts``: the key pair, sshd's config
and host key, the hosts files, pid files and logs all live in one state directory
(``/run/prague-hosts``, or ``$PRAGUE_HOSTS_STATE``), which ``down`` removes. The one thing
made outside it is sshd's privilege separation directory ``/run/sshd`` when it is missing
(``down`` removes it again when it made it and it is empty).

Network: addresses from 198.18.0.0/24 only (the launcher's bridge 198.18.0.1, host i
198.18.0.(1+i)); each namespace has the on-link route to 198.18.0.0/24 and no other, so
it cannot reach any other address of the machine. IPv6 is off on these interfaces. There is
no delay emulation (no ``sch_netem`` in this kernel), only bandwidth (``tbf``).

Root only. Standard library only; importable (``Hosts.up(2)``; ``prague-bench --hosts``
uses it) and run as ``scripts/hosts.py``. One file, as the hosts are one thing to make and
take down: the namespaces, their sshd and the state directory are made together and undone
in reverse order.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from . import cpu_limit

STATE_DIR = Path(os.environ.get("PRAGUE_HOSTS_STATE", "/run/prague-hosts"))
MARKER = ".prague-hosts"  # a state directory holds this file; nothing else is ever removed
BRIDGE = "prague0"  # the launcher's NIC; each namespace's NIC has the same name
NETNS_PREFIX = "prague-h"
VETH_PREFIX = "prague-v"  # the launcher-side end of host i's veth pair: prague-v<i>
NETWORK = ipaddress.IPv4Network("198.18.0.0/24")
LAUNCHER_ADDRESS = str(NETWORK.network_address + 1)
LOOPBACK_NAME_ADDRESS = "127.0.1.1"
MAX_HOSTS = 200
SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
SSH_PORT = 22
SSHD_START_TIMEOUT = 15.0

_NETNS_RE = re.compile(rf"^{re.escape(NETNS_PREFIX)}\d+$")
_LINK_RE = re.compile(rf"^({re.escape(BRIDGE)}|{re.escape(VETH_PREFIX)}\d+)$")
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)$", re.IGNORECASE)
_PREFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}

# Run as ``sh -c _WRAPPER argv0 HOSTNAME [SRC DST]... -- CMD...`` inside a fresh mount (and,
# for a host, UTS) namespace: set the hostname ("-": keep it), bind-mount each SRC over DST,
# then become CMD, so that its exit status and signals are CMD's own.
_WRAPPER = """set -e
if [ "$1" != - ]; then hostname "$1"; fi
shift
while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done
shift
exec "$@"
"""


class HostsError(RuntimeError):
    """Something went wrong making or using the emulated hosts."""


class HostsUnavailable(HostsError):
    """This machine cannot make emulated hosts (not root, a tool missing, no namespaces)."""


# --------------------------------------------------------------------------- helpers


def _sh(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise HostsError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def check_environment() -> str | None:
    """Why emulated hosts cannot be made here, or None when they can."""
    if sys.platform != "linux":
        return "emulated hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, bind mounts)"
    for tool in ("ip", "tc", "unshare", "mount", "hostname", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, util-linux, openssh-client)"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} is not installed (openssh-server)"
    if not _home_ssh_dir().is_dir() and not Path("/etc/ssh/ssh_config").is_file():
        return "neither ~/.ssh nor /etc/ssh/ssh_config exists to bind the ssh config over"
    return None


def _home_ssh_dir() -> Path:
    # OpenSSH reads ~/.ssh from the passwd entry's home, not $HOME.
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"


def parse_layout(spec: str) -> tuple[int, int]:
    """``HxS`` (H emulated hosts of S ranks each) as ``(H, S)``.

    >>> parse_layout("8x1"), parse_layout("2X4")
    ((8, 1), (2, 4))
    """
    h, x, k = spec.lower().partition("x")
    if not (x and h.isdigit() and k.isdigit() and int(h) >= 1 and int(k) >= 1):
        raise ValueError(f"expected HxS such as 2x4, got {spec!r}")
    return int(h), int(k)


def parse_rate(rate: str) -> float:
    """A tc rate (``1gbit``, ``250mbit``, ``10mbps``) in bytes per second.

    >>> parse_rate("1gbit"), parse_rate("250mbit"), parse_rate("2mbps")
    (125000000.0, 31250000.0, 2000000.0)
    """
    m = _RATE_RE.match(rate.strip())
    if not m:
        raise ValueError(f"bad rate {rate!r}: expected e.g. 1gbit, 250mbit, 10mbps")
    value = float(m.group(1)) * _PREFIXES[m.group(2).lower()]
    bytes_per_s = value / 8 if m.group(3).lower() == "bit" else value
    if bytes_per_s < 1000:
        raise ValueError(f"rate {rate!r} is too low")
    return bytes_per_s


def tbf_args(rate: str) -> list[str]:
    """``tc qdisc ... tbf`` parameters for a rate: a bucket of 10 ms at that rate, at least
    64 KiB (a whole GSO packet on a veth, so none is split), and a queue of 50 ms.

    >>> tbf_args("1gbit")
    ['tbf', 'rate', '1gbit', 'burst', '1250000', 'latency', '50ms']
    >>> tbf_args("10mbit")
    ['tbf', 'rate', '10mbit', 'burst', '65536', 'latency', '50ms']
    """
    burst = max(int(parse_rate(rate) / 100), 65536)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]


def _list_netns() -> list[str]:
    proc = _sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return sorted((n for n in names if _NETNS_RE.match(n)), key=_index)


def _list_links() -> list[str]:
    proc = _sh("ip", "-o", "link", "show", check=False)
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            name = parts[1].strip().split("@")[0]
            if _LINK_RE.match(name):
                names.append(name)
    return names


def _index(name: str) -> int:
    return int(re.sub(r"\D", "", name) or 0)


def _netns_pids(netns: str) -> list[int]:
    proc = _sh("ip", "netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return False


def _kill_all(pids: Sequence[int], grace: float = 2.0) -> None:
    """SIGTERM, then after ``grace`` seconds SIGKILL, every pid; wait until they are gone."""
    pids = [p for p in pids if p != os.getpid()]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            # Reap those that are our own children (the API's sshd processes).
            for pid in pids:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.05)


def _disable_ipv6(interface: str, netns: str | None = None) -> None:
    """No IPv6 (so no link-local address and no traffic) on one of our interfaces."""
    if not Path("/proc/sys/net/ipv6").exists():
        return
    path = f"/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"
    if netns is None:
        Path(path).write_text("1\n")
    else:
        _sh("ip", "netns", "exec", netns, "sh", "-c", f"echo 1 > {path}")


# --------------------------------------------------------------------------- cleanup


def down(state_dir: Path | str = STATE_DIR) -> list[str]:
    """Remove every emulated host and what belongs to it; safe to call at any time.

    Kills every process in the ``prague-h*`` namespaces, deletes the namespaces, the
    ``prague0`` bridge and ``prague-v*`` veths, and the state directory. Returns what it did.
    """
    state_dir = Path(state_dir)
    done: list[str] = []
    state = _read_state(state_dir)
    for netns in _list_netns():
        pids = _netns_pids(netns)
        if pids:
            _kill_all(pids)
            done.append(f"killed {len(pids)} process(es) in {netns}")
        _sh("ip", "netns", "del", netns, check=False)
        done.append(f"deleted namespace {netns}")
    # A veth goes when its peer's namespace goes, but asynchronously: delete what is left.
    deadline = time.monotonic() + 5
    while (links := _list_links()) and time.monotonic() < deadline:
        for link in links:
            if _sh("ip", "link", "del", link, check=False).returncode == 0:
                done.append(f"deleted link {link}")
        time.sleep(0.05)
    if links:
        raise HostsError(f"could not delete links {links}")
    done += cpu_limit.remove_all()  # the slow host's cgroup, now that its processes ended
    if state_dir.is_dir() and (state_dir / MARKER).exists():
        shutil.rmtree(state_dir)
        done.append(f"removed {state_dir}")
    if state and state.get("made_privsep_dir"):
        with contextlib.suppress(OSError):
            PRIVSEP_DIR.rmdir()  # only when empty
    return done


def _read_state(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM (and SIGINT, as usual) raise inside the block, so that cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# --------------------------------------------------------------------------- hosts


class Hosts:
    """A live set of emulated hosts (``Hosts.up(n)`` makes one, ``Hosts.attach()`` finds it).

    >>> with Hosts.up(2) as hosts:                                      # doctest: +SKIP
    ...     subprocess.run(hosts.run_command(["ssh", "h2", "hostname"]))
    """

    def __init__(self, state_dir: Path, state: dict) -> None:
        self.state_dir = Path(state_dir)
        self.names: list[str] = list(state["names"])
        self.addresses: list[str] = list(state["addresses"])
        self.slots: int = state["slots"]
        self.loopback_name: bool = state["loopback_name"]
        self.token: str = state["token"]
        self._procs: list[subprocess.Popen] = []

    # ---- making and finding

    @classmethod
    def up(
        cls,
        n: int,
        slots: int = 2,
        loopback_name: bool = False,
        state_dir: Path | str = STATE_DIR,
    ) -> Hosts:
        """Make ``n`` hosts ``h1..hn`` (after removing whatever an earlier run left)."""
        if not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"n must be between 1 and {MAX_HOSTS}, not {n}")
        if slots < 1:
            raise ValueError("slots must be at least 1")
        reason = check_environment()
        if reason:
            raise HostsUnavailable(reason)
        state_dir = Path(state_dir)
        made: list[Hosts] = []  # to reap the sshd processes it started, if it fails
        with _signals_raise():
            try:
                down(state_dir)
                return cls._make(n, slots, loopback_name, state_dir, made)
            except BaseException:
                with _signals_ignored():
                    if made:
                        made[0].down()
                    else:
                        down(state_dir)
                raise

    @classmethod
    def attach(cls, state_dir: Path | str = STATE_DIR) -> Hosts:
        """The hosts that ``up`` made (in this process or another one)."""
        state = _read_state(Path(state_dir))
        if state is None:
            raise HostsError(f"no emulated hosts: {state_dir} has no state (run `up` first)")
        return cls(Path(state_dir), state)

    @classmethod
    def _make(
        cls, n: int, slots: int, loopback_name: bool, state_dir: Path, made: list[Hosts]
    ) -> Hosts:
        if state_dir.exists() and any(state_dir.iterdir()):
            raise HostsError(f"{state_dir} exists and is not ours: remove it or pick another")
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (state_dir / MARKER).write_text("made by scripts/hosts.py; removed by `down`\n")
        names = [f"h{i}" for i in range(1, n + 1)]
        addresses = [str(NETWORK.network_address + 1 + i) for i in range(1, n + 1)]
        made_privsep = not PRIVSEP_DIR.exists()
        state = {
            "names": names,
            "addresses": addresses,
            "slots": slots,
            "loopback_name": loopback_name,
            "token": secrets.token_hex(8),
            "made_privsep_dir": made_privsep,
            "shape": None,
            "pids": {},
        }
        _write_json(state_dir / "state.json", state)
        hosts = cls(state_dir, state)
        made.append(hosts)
        hosts._write_files()
        if made_privsep:
            PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        hosts._make_network()
        hosts._start_sshds()
        state["pids"] = {name: p.pid for name, p in zip(names, hosts._procs, strict=True)}
        _write_json(state_dir / "state.json", state)
        return hosts

    def _write_files(self) -> None:
        d = self.state_dir
        ssh_dir = d / "ssh"
        ssh_dir.mkdir(mode=0o700)
        key = ssh_dir / "id_ed25519"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "prague-hosts job", "-f", str(key))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "prague-hosts host",
            "-f", str(d / "ssh_host_ed25519_key"))  # fmt: skip
        pub = key.with_suffix(".pub").read_text().strip()
        (d / "authorized_keys").write_text(f'from="{NETWORK}" {pub}\n')
        (ssh_dir / "known_hosts").touch()
        (ssh_dir / "config").write_text(
            "# Written by scripts/hosts.py for the emulated hosts.\n"
            "Host *\n"
            f"    IdentityFile {key}\n"
            "    IdentitiesOnly yes\n"
            "    StrictHostKeyChecking no\n"
            f"    UserKnownHostsFile {ssh_dir / 'known_hosts'}\n"
            "    GlobalKnownHostsFile /dev/null\n"
            "    LogLevel ERROR\n"
            f"    Port {SSH_PORT}\n"
            "    BatchMode yes\n"
            "    ConnectTimeout 10\n"
        )
        host_lines = "".join(f"{a} {n}\n" for a, n in zip(self.addresses, self.names, strict=True))
        original = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        if original and not original.endswith("\n"):
            original += "\n"
        (d / "launcher_hosts").write_text(
            f"{original}# emulated hosts (scripts/hosts.py)\n{host_lines}"
        )
        for name, address in zip(self.names, self.addresses, strict=True):
            hd = d / name
            hd.mkdir()
            lines = [
                "127.0.0.1 localhost",
                "::1 localhost ip6-localhost ip6-loopback",
                f"{LAUNCHER_ADDRESS} prague-launcher",
            ]
            if self.loopback_name:
                lines.append(f"{LOOPBACK_NAME_ADDRESS} {name}")  # as Debian's installer writes
            for other, other_address in zip(self.names, self.addresses, strict=True):
                if other != name or not self.loopback_name:
                    lines.append(f"{other_address} {other}")
            (hd / "hosts").write_text("\n".join(lines) + "\n")
            (hd / "hostname").write_text(name + "\n")
            (hd / "sshd_config").write_text(
                "# Written by scripts/hosts.py for an emulated host.\n"
                f"Port {SSH_PORT}\n"
                f"ListenAddress {address}\n"
                f"HostKey {d / 'ssh_host_ed25519_key'}\n"
                f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
                f"PidFile {hd / 'sshd.pid'}\n"
                "PermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "StrictModes no\n"
                "UsePAM no\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "X11Forwarding no\n"
                "MaxStartups 100:30:200\n"
                "MaxSessions 100\n"
                "LogLevel INFO\n"
            )

    def _make_network(self) -> None:
        try:
            _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        except HostsError as e:
            raise HostsUnavailable(f"cannot create a bridge: {e}") from e
        _disable_ipv6(BRIDGE)
        _sh("ip", "addr", "add", f"{LAUNCHER_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        for i, address in enumerate(self.addresses, start=1):
            netns, veth = self.netns(i - 1), f"{VETH_PREFIX}{i}"
            try:
                _sh("ip", "netns", "add", netns)
            except HostsError as e:
                raise HostsUnavailable(f"cannot create a network namespace: {e}") from e
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", BRIDGE, "netns", netns)
            _disable_ipv6(veth)
            _sh("ip", "link", "set", veth, "master", BRIDGE, "up")
            _disable_ipv6(BRIDGE, netns)
            _sh("ip", "-n", netns, "addr", "add", f"{address}/{NETWORK.prefixlen}", "dev", BRIDGE)
            _sh("ip", "-n", netns, "link", "set", BRIDGE, "up")
            _sh("ip", "-n", netns, "link", "set", "lo", "up")

    def _ssh_mounts(self) -> list[str]:
        """Bind mounts that make ssh use this run's key, config and known hosts."""
        ssh_dir = self.state_dir / "ssh"
        home_ssh = _home_ssh_dir()
        if home_ssh.is_dir():
            return [str(ssh_dir), str(home_ssh)]
        # No ~/.ssh to cover (and none is made): the system-wide client config stands in.
        return [str(ssh_dir / "config"), "/etc/ssh/ssh_config"]

    def _start_sshds(self) -> None:
        for i, name in enumerate(self.names):
            hd = self.state_dir / name
            mounts = [str(hd / "hosts"), "/etc/hosts", *self._ssh_mounts()]
            if Path("/etc/hostname").is_file():
                mounts += [str(hd / "hostname"), "/etc/hostname"]
            argv = [
                "ip", "netns", "exec", self.netns(i),
                "unshare", "--mount", "--uts", "--propagation", "private", "--",
                "/bin/sh", "-c", _WRAPPER, "prague-hosts", name, *mounts, "--",
                SSHD, "-D", "-f", str(hd / "sshd_config"), "-E", str(hd / "sshd.log"),
            ]  # fmt: skip
            with open(hd / "start.log", "wb") as log:
                self._procs.append(
                    subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # no terminal's Ctrl-C reaches it
                    )
                )
        deadline = time.monotonic() + SSHD_START_TIMEOUT
        waiting = dict(enumerate(self.addresses))
        while waiting:
            for i, address in list(waiting.items()):
                proc = self._procs[i]
                if proc.poll() is not None:
                    raise HostsError(
                        f"sshd of {self.names[i]} exited ({proc.returncode}):\n"
                        + self._logs(self.names[i])
                    )
                with contextlib.suppress(OSError), socket.create_connection((address, SSH_PORT), 1):
                    del waiting[i]
            if waiting and time.monotonic() > deadline:
                missing = ", ".join(self.names[i] for i in waiting)
                raise HostsError(f"sshd of {missing} did not start listening in time")
            if waiting:
                time.sleep(0.02)

    def _logs(self, name: str) -> str:
        out = []
        for log in ("start.log", "sshd.log"):
            with contextlib.suppress(OSError):
                out.append((self.state_dir / name / log).read_text()[-2000:])
        return "\n".join(out)

    # ---- using

    def netns(self, index: int) -> str:
        """The network namespace of host ``index`` (0-based)."""
        return f"{NETNS_PREFIX}{index + 1}"

    def host_spec(self, slots: int | None = None, n: int | None = None) -> str:
        """``h1:2,h2:2,...`` for ``horovodrun -H``."""
        k = self.slots if slots is None else slots
        return ",".join(f"{name}:{k}" for name in self.names[: n or len(self.names)])

    def run_command(self, cmd: Sequence[str]) -> list[str]:
        """The argv that runs ``cmd`` on the launcher's side, able to ``ssh hI``."""
        mounts = [str(self.state_dir / "launcher_hosts"), "/etc/hosts", *self._ssh_mounts()]
        return [
            "unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", _WRAPPER, "prague-hosts", "-", *mounts, "--", *cmd,
        ]  # fmt: skip

    def run(self, cmd: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run(self.run_command(cmd), **kwargs)``."""
        return subprocess.run(self.run_command(cmd), **kwargs)

    def host_command(self, index: int, cmd: Sequence[str]) -> list[str]:
        """The argv that runs ``cmd`` directly in host ``index``'s namespaces (no ssh)."""
        pid = self._sshd_pid(index)
        return ["nsenter", "-t", str(pid), "-n", "-m", "-u", "--", *cmd]

    def _sshd_pid(self, index: int) -> int:
        pidfile = self.state_dir / self.names[index] / "sshd.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError) as e:
            raise HostsError(f"sshd of {self.names[index]} is not running") from e

    def shape(self, rate: str | None) -> None:
        """Limit each host's link to ``rate`` in both directions (``None``/"none": no limit)."""
        if rate in (None, "none"):
            for i in range(len(self.names)):
                _sh("tc", "-n", self.netns(i), "qdisc", "del", "dev", BRIDGE, "root", check=False)
                _sh("tc", "qdisc", "del", "dev", f"{VETH_PREFIX}{i + 1}", "root", check=False)
            rate = None
        else:
            args = tbf_args(rate)
            for i in range(len(self.names)):
                _sh("tc", "-n", self.netns(i), "qdisc", "replace", "dev", BRIDGE, "root", *args)
                _sh("tc", "qdisc", "replace", "dev", f"{VETH_PREFIX}{i + 1}", "root", *args)
        state = _read_state(self.state_dir) or {}
        if state.get("token") == self.token:
            state["shape"] = rate
            _write_json(self.state_dir / "state.json", state)

    def limit_cpu(self, index: int, cores: float) -> None:
        """Make host ``index`` slow: its sshd, and every process it starts from now on, get
        ``cores`` cores of CPU time in all (``cpu_limit``)."""
        cpu_limit.limit(self._sshd_pid(index), cores, self.names[index])

    def reset(self) -> None:
        """Back to as ``up`` left it: links up and not shaped, no CPU cap, no process but sshd
        in the hosts."""
        self.shape(None)
        for i in range(len(self.names)):
            _sh("ip", "-n", self.netns(i), "link", "set", BRIDGE, "up")
            keep = self._sshd_pid(i)
            _kill_all([p for p in _netns_pids(self.netns(i)) if p != keep], grace=1.0)
            cpu_limit.release(keep)
        cpu_limit.remove_all()

    def alive(self) -> bool:
        """Whether these hosts still exist (nobody ran ``down`` or another ``up`` since)."""
        state = _read_state(self.state_dir)
        if not state or state.get("token") != self.token:
            return False
        if _list_netns() != [self.netns(i) for i in range(len(self.names))]:
            return False
        try:
            return all(_alive(self._sshd_pid(i)) for i in range(len(self.names)))
        except HostsError:
            return False

    def down(self) -> list[str]:
        done = down(self.state_dir)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        self._procs.clear()
        return done

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc) -> None:
        self.down()


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def status(state_dir: Path | str = STATE_DIR) -> dict:
    """What exists: namespaces, links (with their qdisc), the state and its sshd processes."""
    state_dir = Path(state_dir)
    state = _read_state(state_dir)
    links = {}
    for link in _list_links():
        qdisc = _sh("tc", "qdisc", "show", "dev", link, "root", check=False).stdout.strip()
        links[link] = qdisc
    namespaces = {}
    for netns in _list_netns():
        qdisc = _sh("tc", "-n", netns, "qdisc", "show", "dev", BRIDGE, "root", check=False)
        namespaces[netns] = {"pids": _netns_pids(netns), "qdisc": qdisc.stdout.strip()}
    sshd = {}
    if state:
        for name in state["names"]:
            try:
                pid = int((state_dir / name / "sshd.pid").read_text().split()[0])
                sshd[name] = pid if _alive(pid) else None
            except (OSError, ValueError, IndexError):
                sshd[name] = None
    return {
        "state_dir": str(state_dir) if state_dir.exists() else None,
        "hosts": state and dict(zip(state["names"], state["addresses"], strict=True)),
        "slots": state and state["slots"],
        "loopback_name": state and state["loopback_name"],
        "shape": state and state["shape"],
        "sshd": sshd,
        "namespaces": namespaces,
        "links": links,
    }


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hosts.py", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR, help=f"default: {STATE_DIR}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="make N hosts h1..hN (removing leftovers first)")
    p.add_argument("n", type=int)
    p.add_argument("--slots", type=int, default=2, help="slots per host in `spec` (default 2)")
    p.add_argument(
        "--loopback-name",
        action="store_true",
        help="each host's own name resolves to 127.0.1.1 there, as Debian installers write",
    )
    p = sub.add_parser("run", help="run a command that can ssh to the hosts: run -- CMD...")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p = sub.add_parser("shape", help="limit each host's link: RATE (1gbit, 250mbit) or none")
    p.add_argument("rate")
    sub.add_parser("down", help="remove the hosts and everything they left")
    p = sub.add_parser("status", help="what exists")
    p.add_argument("--json", action="store_true")
    sub.add_parser("spec", help="print h1:K,h2:K,... for horovodrun -H")
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            t0 = time.monotonic()
            hosts = Hosts.up(args.n, args.slots, args.loopback_name, args.state_dir)
            listing = ", ".join(
                f"{n}={a}" for n, a in zip(hosts.names, hosts.addresses, strict=True)
            )
            print(f"up in {time.monotonic() - t0:.1f} s: {listing}; -H {hosts.host_spec()}")
        elif args.command == "run":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                parser.error("run needs a command: run -- CMD...")
            argv = Hosts.attach(args.state_dir).run_command(cmd)
            sys.stdout.flush()
            os.execvp(argv[0], argv)
        elif args.command == "shape":
            rate = None if args.rate == "none" else args.rate
            if rate is not None:
                parse_rate(rate)
            Hosts.attach(args.state_dir).shape(rate)
        elif args.command == "down":
            t0 = time.monotonic()
            done = down(args.state_dir)
            print(f"down in {time.monotonic() - t0:.1f} s: {'; '.join(done) or 'nothing to do'}")
        elif args.command == "spec":
            print(Hosts.attach(args.state_dir).host_spec())
        elif args.command == "status":
            info = status(args.state_dir)
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                _print_status(info)
    except (HostsError, ValueError) as e:
        print(f"hosts.py {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _print_status(info: dict) -> None:
    if not (info["hosts"] or info["namespaces"] or info["links"] or info["state_dir"]):
        print("no emulated hosts")
        return
    print(f"state: {info['state_dir'] or '(none)'}")
    if info["hosts"]:
        print(
            f"hosts: {info['hosts']} (slots {info['slots']}, loopback name "
            f"{info['loopback_name']}, shape {info['shape'] or 'none'})"
        )
        print(f"sshd pids: {info['sshd']}")
    for netns, d in info["namespaces"].items():
        print(f"namespace {netns}: {len(d['pids'])} process(es); {d['qdisc'] or 'no qdisc'}")
    for link, qdisc in info["links"].items():
        print(f"link {link}: {qdisc or 'no qdisc'}")


if __name__ == "__main__":
    sys.exit(main())
