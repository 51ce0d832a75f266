"""scripts/hosts.py: emulated hosts (network namespaces with sshd) and Horovod jobs across them."""

import ipaddress
import os
import pwd
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HOSTS_SCRIPT, load_hosts_module

from horovod_prague.bench import cpu_limit

BIN = Path(sys.executable).parent
REPO = Path(__file__).parents[2]
OURS = ipaddress.IPv4Network("198.18.0.0/15")


def sh(*argv, check=True, timeout=60):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


def cli(*args, check=True, timeout=60):
    return sh(sys.executable, str(HOSTS_SCRIPT), *args, check=check, timeout=timeout)


def leftovers():
    """Everything of ours that exists on the machine: namespaces, links, state, sshd."""
    hosts = load_hosts_module()
    found = [f"netns {n}" for n in sh("ip", "netns", "list").stdout.split() if "prague" in n]
    for line in sh("ip", "-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith("prague"):
            found.append(f"link {name}")
    if hosts.STATE_DIR.exists():
        found.append(f"state {hosts.STATE_DIR}")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(hosts.STATE_DIR) in cmdline and "sshd" in cmdline:
            found.append(f"process {proc.name}: {cmdline}")
    return found


def machine_addresses():
    """The machine's own addresses (and gateways) that are not ours nor loopback."""
    out = set()
    for line in sh("ip", "-o", "addr", "show").stdout.splitlines():
        address = ipaddress.ip_address(line.split()[3].split("/")[0])
        if not address.is_loopback and address not in OURS:
            out.add(str(address))
    for family in ("-4", "-6"):
        for line in sh("ip", family, "route", "show", "default").stdout.splitlines():
            words = line.split()
            if "via" in words:
                out.add(words[words.index("via") + 1])
    # And an address outside every local network (TEST-NET-3, never routed anywhere).
    return sorted(out | {"203.0.113.1"})


def test_up_makes_hosts_with_a_common_nic(hosts):
    assert hosts.names == ["h1", "h2"]
    assert hosts.addresses == ["198.18.0.2", "198.18.0.3"]
    assert hosts.host_spec() == "h1:2,h2:2"
    assert hosts.alive()
    info = load_hosts_module().status()
    assert sorted(info["namespaces"]) == ["prague-h1", "prague-h2"]
    assert sorted(info["links"]) == ["prague-v1", "prague-v2", "prague0"]
    # Launcher and hosts all have a NIC named prague0 with an address of ours, and no other.
    assert "inet 198.18.0.1/24" in sh("ip", "-4", "addr", "show", "dev", "prague0").stdout
    for i, address in enumerate(hosts.addresses):
        addrs = sh(*hosts.host_command(i, ["ip", "-o", "addr", "show"])).stdout.splitlines()
        nics = sorted((line.split()[1], line.split()[3]) for line in addrs)
        assert nics == [("lo", "127.0.0.1/8"), ("lo", "::1/128"), ("prague0", f"{address}/24")]


@pytest.mark.parametrize(
    "hosts", [{"n": 2}, {"n": 2, "loopback_name": True}], indirect=True, ids=["plain", "loopback"]
)
def test_ssh_into_each_host(hosts):
    # From the launcher's side: ssh to each host, read its hostname and what its own name
    # (and the other host's name) resolves to there; then ssh from h1 on to h2.
    script = (
        "for h in h1 h2; do ssh $h 'echo $(hostname)"
        ' $(getent hosts $(hostname) | cut -d" " -f1)'
        ' $(python3 -c "import socket; print(socket.gethostbyname(socket.gethostname()))")'
        ' $(getent hosts h1 | cut -d" " -f1) $(getent hosts h2 | cut -d" " -f1)\'; done;'
        " ssh h1 ssh h2 hostname; getent hosts h1 h2"
    )
    home_ssh = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    had_home_ssh = home_ssh.exists()
    out = hosts.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    h1, h2 = ("127.0.1.1", "127.0.1.1") if hosts.loopback_name else hosts.addresses
    assert lines[0].split() == ["h1", h1, h1, h1, "198.18.0.3"]
    assert lines[1].split() == ["h2", h2, h2, "198.18.0.2", h2]
    assert lines[2] == "h2"
    assert [line.split() for line in lines[3:]] == [["198.18.0.2", "h1"], ["198.18.0.3", "h2"]]
    # Nothing written to ~/.ssh or /etc/hosts outside the run's mount namespace.
    assert "h1" not in Path("/etc/hosts").read_text().split()
    assert home_ssh.exists() == had_home_ssh


def test_hosts_reach_only_our_network(hosts):
    others = machine_addresses()
    for i in range(len(hosts.names)):
        routes = sh(*hosts.host_command(i, ["ip", "route", "show"])).stdout.splitlines()
        assert [r.split()[0] for r in routes] == ["198.18.0.0/24"], routes
        assert sh(*hosts.host_command(i, ["ip", "-6", "route", "show"])).stdout.strip() == ""
        for address in others:  # a route lookup only: no packet is sent
            proc = sh(*hosts.host_command(i, ["ip", "route", "get", address]), check=False)
            assert proc.returncode != 0 and "unreachable" in proc.stderr, (address, proc)
        ok = sh(*hosts.host_command(i, ["ip", "route", "get", "198.18.0.1"])).stdout
        assert "dev prague0" in ok
    # No IPv6 (no link-local address) on any of our interfaces, on either side.
    assert "inet6" not in sh("ip", "-6", "addr", "show", "dev", "prague0").stdout
    for i in range(len(hosts.names)):
        assert sh("ip", "-6", "addr", "show", "dev", f"prague-v{i + 1}").stdout.strip() == ""


BANDWIDTH = """
import socket, sys, time
if sys.argv[1] == "server":
    s = socket.create_server((sys.argv[2], 5201))
    print("ready", flush=True)
    c, _ = s.accept()
    n, t0 = 0, None
    while b := c.recv(1 << 20):
        t0 = t0 or time.monotonic()
        n += len(b)
    print(n * 8 / (time.monotonic() - t0) / 1e6)
else:
    c = socket.create_connection((sys.argv[2], 5201))
    for _ in range(int(sys.argv[3])):
        c.sendall(bytes(1 << 20))
"""


def mbit_per_s(hosts, megabytes):
    """Throughput of one TCP stream from h1 to h2 (our addresses only)."""
    server = subprocess.Popen(
        hosts.host_command(1, [sys.executable, "-c", BANDWIDTH, "server", hosts.addresses[1]]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        client = [sys.executable, "-c", BANDWIDTH, "client", hosts.addresses[1], str(megabytes)]
        sh(*hosts.host_command(0, client))
        return float(server.communicate(timeout=30)[0])
    finally:
        server.kill()
        server.wait()


def test_shape_limits_both_directions(hosts):
    hosts.shape("250mbit")
    for i in range(len(hosts.names)):
        inside = sh(*hosts.host_command(i, ["tc", "qdisc", "show", "dev", "prague0"])).stdout
        outside = sh("tc", "qdisc", "show", "dev", f"prague-v{i + 1}").stdout
        for qdisc in (inside, outside):
            assert re.search(r"qdisc tbf \S+ root .*rate 250Mbit burst", qdisc), qdisc
    assert load_hosts_module().status()["shape"] == "250mbit"
    hosts.shape("50mbit")
    rate = mbit_per_s(hosts, 4)
    assert 15 < rate < 56, f"{rate:.1f} Mbit/s through a 50mbit link"
    hosts.shape(None)
    for i in range(len(hosts.names)):
        assert "tbf" not in sh("tc", "qdisc", "show", "dev", f"prague-v{i + 1}").stdout
        assert "tbf" not in sh(*hosts.host_command(i, ["tc", "qdisc", "show"])).stdout
    assert mbit_per_s(hosts, 16) > 200


def test_cli_up_over_leftovers_run_and_down(emulated_hosts):
    emulated_hosts.require()
    cli("up", "2")
    # Leftovers of a crashed run: a stray namespace with a process in it, a stray veth pair.
    sh("ip", "netns", "add", "prague-h7")
    stray = subprocess.Popen(["ip", "netns", "exec", "prague-h7", "sleep", "600"])
    sh("ip", "link", "add", "prague-v7", "type", "veth", "peer", "name", "prague-v8")
    try:
        up = cli("up", "2", "--slots", "3")
        assert "h1=198.18.0.2, h2=198.18.0.3" in up.stdout and "h1:3,h2:3" in up.stdout
        assert stray.wait(timeout=5) != 0  # killed by the second up's cleanup
        assert cli("spec").stdout.strip() == "h1:3,h2:3"
        found = leftovers()
        assert sum(x.startswith("process") for x in found) == 2  # the two sshd
        assert {x for x in found if not x.startswith("process")} == {
            "netns prague-h1",
            "netns prague-h2",
            "link prague0",
            "link prague-v1",
            "link prague-v2",
            "state /run/prague-hosts",
        }
        out = cli("run", "--", "ssh", "h2", "hostname")
        assert out.stdout.strip() == "h2"
        assert cli("run", "--", "sh", "-c", "exit 7", check=False).returncode == 7
        cli("shape", "1gbit")
        assert "rate 1Gbit" in cli("status").stdout
        cli("shape", "none")
        # A process started over ssh and left running is killed by down.
        cli("run", "--", "ssh", "h1", "nohup sleep 600 >/dev/null 2>&1 &")
    finally:
        stray.kill()
        stray.wait()
    down = cli("down")
    assert re.search(r"killed [2-9] process\(es\) in prague-h1", down.stdout), down.stdout
    assert leftovers() == []
    assert "nothing to do" in cli("down").stdout
    assert cli("status").stdout.strip() == "no emulated hosts"
    out = cli("run", "--", "true", check=False)
    assert out.returncode == 2 and "run `up` first" in out.stderr


@pytest.mark.parametrize("interrupt", ["exception", "sigterm"])
def test_up_cleans_up_when_interrupted(emulated_hosts, monkeypatch, interrupt):
    emulated_hosts.require()
    emulated_hosts.close()
    module = emulated_hosts.module

    def start_sshds(self):
        assert sorted(module.status()["namespaces"]) == ["prague-h1", "prague-h2", "prague-h3"]
        if interrupt == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        raise RuntimeError("injected")

    monkeypatch.setattr(module.Hosts, "_start_sshds", start_sshds)
    handler = signal.getsignal(signal.SIGTERM)
    error = KeyboardInterrupt if interrupt == "sigterm" else RuntimeError
    with pytest.raises(error):
        module.Hosts.up(3)
    assert leftovers() == []
    assert signal.getsignal(signal.SIGTERM) == handler


# ----------------------------------------------------------------- Horovod across hosts

WORKER = """
import os
import socket

import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
values = [hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
          hvd.size(), socket.gethostname(), total]
os.write(1, f"RANK {' '.join(map(str, values))}\\n".encode())  # one write: lines stay whole
hvd.shutdown()
"""


def horovod_job(hosts, *flags, timeout=120):
    horovodrun = BIN / "horovodrun"
    if not horovodrun.exists():
        pytest.skip(f"{horovodrun} is not installed (run scripts/bootstrap.py)")
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [str(horovodrun), "-np", "4", "-H", hosts.host_spec(), *flags]
    out = hosts.run(
        [*cmd, sys.executable, "-c", WORKER],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-6000:]
    ranks = {}
    for line in out.stdout.splitlines():
        if "RANK" in line:
            words = line.split("RANK", 1)[1].split()
            ranks[int(words[0])] = (*map(int, words[1:6]), words[6], float(words[7]))
    return ranks


def check_two_hosts(ranks):
    # rank: (local_rank, local_size, cross_rank, cross_size, size, hostname, allreduced sum)
    assert ranks == {
        0: (0, 2, 0, 2, 4, "h1", 6.0),
        1: (1, 2, 0, 2, 4, "h1", 6.0),
        2: (0, 2, 1, 2, 4, "h2", 6.0),
        3: (1, 2, 1, 2, 4, "h2", 6.0),
    }


@pytest.mark.multirank
def test_horovod_gloo_job_across_two_hosts(hosts):
    # No --network-interface needed: horovodrun probes every host and finds that prague0 is the
    # one interface they all have. (On hosts whose own name is 127.0.1.1, Gloo uses it too:
    # test_multihost.py's stock PyTorch job runs there.)
    check_two_hosts(horovod_job(hosts, "--gloo"))


@pytest.mark.multirank
def test_horovod_mpi_job_across_two_hosts(hosts):
    # horovodrun passes --allow-run-as-root and -mca btl_tcp_if_include prague0 itself; this
    # keeps Open MPI's out-of-band channel (orted to mpirun) on prague0 too.
    check_two_hosts(horovod_job(hosts, "--mpi", "--mpi-args=--mca oob_tcp_if_include prague0"))


def test_a_slow_host_caps_what_its_sshd_starts(hosts):
    """``limit_cpu``: a process started on h2 through ssh runs in h2's cgroup, with its quota;
    ``down`` removes the cgroup with the hosts."""
    hosts.limit_cpu(1, 0.4)
    out = hosts.run(["ssh", "h2", "cat /proc/self/cgroup"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "prague-slow-h2" in out.stdout
    root, version = cpu_limit._controller()
    quota = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    assert (root / "prague-slow-h2" / quota).read_text().split()[0] == "40000"
    on_h1 = hosts.run(["ssh", "h1", "cat /proc/self/cgroup"], capture_output=True, text=True)
    assert "prague-slow" not in on_h1.stdout
    hosts.down()
    assert not (root / "prague-slow-h2").exists()
