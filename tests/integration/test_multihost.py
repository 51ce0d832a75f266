"""Jobs across emulated hosts (``scripts/hosts.py``: network namespaces with sshd), launched as
on a cluster, ``horovodrun -H h1:2,h2:2`` through ssh, with and without ``--prague``."""

from __future__ import annotations

import collections

import pytest
from launch import BIN, REPO, run_ranks

pytestmark = pytest.mark.multirank

PYTORCH = str(REPO / "examples" / "pytorch_digits.py")


def run_on_hosts(hosts, script, tmp_path, spec, controller="gloo", args=(), flags=(), env=None):
    np = sum(int(h.rpartition(":")[2]) for h in spec.split(","))
    horovodrun = [str(BIN / "horovodrun"), "-np", str(np), "-H", spec]
    if controller == "gloo":
        horovodrun.append("--gloo")
    else:
        # Open MPI's own connections on the hosts' network too (horovodrun sets its data's).
        horovodrun += ["--mpi", "--mpi-args=--mca oob_tcp_if_include prague0"]
    job = run_ranks(
        script,
        tmp_path,
        np=np,
        controller=controller,
        args=args,
        env=env,
        timeout=240,
        launcher=hosts.run_command(horovodrun),
        launcher_flags=flags,
    ).check()
    assert len(job.reports) == np, job.output[-3000:]
    return job


def _hosts_of(job):
    return {rep["rank"]: rep["host"] for rep in job.reports}


@pytest.mark.parametrize(
    ("controller", "loopback_name", "flags"),
    [
        ("gloo", True, ("--prague",)),
        ("gloo", True, ()),
        ("mpi", False, ("--prague",)),
    ],
    ids=["gloo-prague", "gloo-stock", "mpi-prague"],
)
def test_the_pytorch_example_across_two_hosts(
    tmp_path, emulated_hosts, controller, loopback_name, flags
):
    """The plain example on 2 hosts x 2 ranks. With ``loopback_name`` each host's own name
    resolves to 127.0.1.1, as Debian and Ubuntu write it: every job failed there before
    patches/0007 (process sets' Gloo contexts connected to that address)."""
    hosts = emulated_hosts(2, loopback_name=loopback_name)
    job = run_on_hosts(
        hosts, "unmodified.py", tmp_path, "h1:2,h2:2", controller, (PYTORCH, "--epochs", "3"), flags
    )
    assert all(rep["drop_in"] == bool(flags) for rep in job.reports)
    assert len({rep["final"] for rep in job.reports}) == 1, "ranks differ at the end"
    steps = list(zip(*(rep["hashes"] for rep in job.reports), strict=True))
    differing = sum(len(set(per_rank)) > 1 for per_rank in steps)
    assert (differing > len(steps) // 2) if flags else differing == 0


@pytest.mark.parametrize(
    ("api", "controller"), [("tensorflow", "gloo"), ("keras", "mpi")], ids=["tf-gloo", "keras-mpi"]
)
def test_tensorflow_and_keras_across_two_hosts(tmp_path, emulated_hosts, api, controller):
    hosts = emulated_hosts(2, loopback_name=True)
    job = run_on_hosts(
        hosts, "tf_preamble.py", tmp_path, "h1:2,h2:2", controller, (api,), ("--prague",)
    )
    assert all(rep["drop_in"] and rep["intra_op"] == 1 for rep in job.reports)
    assert len({rep["final"] for rep in job.reports}) == 1, "ranks differ at the end"


def test_hosts_with_different_numbers_of_ranks(tmp_path, emulated_hosts):
    """``-H h1:4,h2:2``: the Gloo store gives every rank the layout (nodes of 4 and 2)."""
    hosts = emulated_hosts(2)
    job = run_on_hosts(
        hosts, "meetings.py", tmp_path, "h1:4,h2:2", args=("30",), flags=("--prague",)
    )
    assert _hosts_of(job) == {0: "h1", 1: "h1", 2: "h1", 3: "h1", 4: "h2", 5: "h2"}
    assert len({rep["final"] for rep in job.reports}) == 1, "ranks differ at the end"
    met = {tuple(g) for rep in job.reports for g in rep["met"] if len(g) < 6}
    assert any(all(r < 4 for r in g) for g in met), "no group inside h1"
    assert any(any(r < 4 for r in g) and any(r >= 4 for r in g) for g in met), "none across"


def _kinds(job):
    """For each rank, in order: whether each of its group averages stayed on one host."""
    host = _hosts_of(job)
    size = len(job.reports)
    return {
        rep["rank"]: [len({host[r] for r in g}) == 1 for g in rep["met"] if len(g) < size]
        for rep in job.reports
    }


def test_static_alternates_intra_and_inter_host_groups(tmp_path, emulated_hosts):
    hosts = emulated_hosts(2)
    job = run_on_hosts(
        hosts, "meetings.py", tmp_path, "h1:2,h2:2", args=("20",), flags=("--prague", "static")
    )
    for rank, kinds in _kinds(job).items():
        assert len(kinds) >= 10, (rank, kinds)
        # The schedule's cycle: intra-host, inter-host, ...; a rank may skip an average
        # (in flight), never two of one kind in a row.
        assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False)), (rank, kinds)
    assert len({rep["final"] for rep in job.reports}) == 1


def test_smart_mixes_intra_and_inter_host_groups_on_four_hosts(tmp_path, emulated_hosts):
    hosts = emulated_hosts(4)
    job = run_on_hosts(
        hosts, "meetings.py", tmp_path, "h1:2,h2:2,h3:2,h4:2", args=("20",), flags=("--prague",)
    )
    assert set(_hosts_of(job).values()) == {"h1", "h2", "h3", "h4"}
    counts = collections.Counter(k for kinds in _kinds(job).values() for k in kinds)
    total = counts[True] + counts[False]
    assert total >= 40, counts
    # Divisions alternate intra- and inter-host; random groups would stay on one host 1/7 of
    # the time.
    assert 0.25 <= counts[True] / total <= 0.75, counts
    assert len({rep["final"] for rep in job.reports}) == 1
