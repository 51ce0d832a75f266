"""``prague-bench``'s options and the fault scenario's summary, without running a job."""

import pytest

from horovod_prague.bench.faults import REFERENCE, summarize
from horovod_prague.bench.plan import parse_args


def test_the_default_systems_leave_out_the_fault_reference():
    plan, _ = parse_args([])
    assert REFERENCE not in plan.systems and "allreduce" in plan.systems
    plan, _ = parse_args(["--fault", "5@100"])
    assert plan.systems[0] == REFERENCE and plan.ranks == [8]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fault", "5@300"], "the kill comes after the run's 250 steps"),
        (["--fault", "1@10", "--ranks", "4,8"], "one rank count and one scenario per run"),
        (["--readmit-after", "40"], "--readmit-after needs --fault"),
        (["--fault", "5@100", "--readmit-after", "0"], "seconds from 1 to 3600"),
        (["--fault", "5@100", "--hosts", "1x8"], "one leaves no survivor"),
        (["--fault", "1@10", "--ranks", "5"], "two hosts of this machine need an even number"),
        (["--fault", "5@10", "--hosts", "5x1"], "needs more than 6 ranks"),
        (
            ["--fault", "5@100", "--framework", "tensorflow", "--systems", "allreduce,prague"],
            "PyTorch on mnist1d only",
        ),
        (["--fault", "5@100", "--workload", "lm"], "PyTorch on mnist1d only"),
    ],
)
def test_fault_refuses_a_run_it_cannot_measure(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_failed_reference_leaves_the_accuracy_unknown():
    runs = [
        {"seed": 0, "system": REFERENCE, "failed": "exit 1"},
        {
            "seed": 0,
            "system": "allreduce",
            "wall": 9.0,
            "final_accuracy": 0.8,
            "same_model_on_every_rank": True,
        },
    ]
    (row,) = summarize(runs)
    assert row["accuracy_delta"] is None and row["survived"] == 1


def test_a_readmitted_host_comes_back_through_horovods_blacklist_cool_down(tmp_path):
    from horovod_prague.bench.cli import job_command

    plan, _ = parse_args(["--fault", "5@100", "--readmit-after", "40"])
    job = {"ranks": 8, "scenario": "random", "seed": 0, "system": "prague"}
    command = job_command(job, plan, tmp_path / "data", tmp_path / "out")
    at = command.index("--blacklist-cooldown-range")
    assert command[at + 1 : at + 3] == ["40", "40"] and "--min-np" in command
    plan, _ = parse_args(["--fault", "5@100"])
    assert "--blacklist-cooldown-range" not in job_command(job, plan, tmp_path, tmp_path)


def test_a_fault_on_emulated_hosts_runs_there_and_loses_one_host(tmp_path):
    from horovod_prague.bench.cli import job_command
    from horovod_prague.bench.faults import commit_window_bound
    from horovod_prague.bench.hosts import Hosts

    plan, _ = parse_args(["--fault", "5@100", "--hosts", "8x1"])
    assert plan.ranks == [8] and plan.slots == 1
    hosts = Hosts(tmp_path, {"names": [f"h{i}" for i in range(1, 9)], "addresses": [],
                             "slots": 1, "loopback_name": False, "token": ""})  # fmt: skip
    job = {"ranks": 8, "scenario": "random", "seed": 0, "system": "prague"}
    command = job_command(job, plan, tmp_path / "data", tmp_path / "out", hosts)
    assert command[command.index("-H") + 1] == ",".join(f"h{i}:1" for i in range(1, 9))
    # One slow rank per step, a different one each step: losing one host of one rank
    # leaves the other 7 free ranks more to gain than losing a host of 4.
    slow = [[3.0 if j % 8 == r else 1.0 for j in range(80)] for r in range(8)]
    one = commit_window_bound(slow, kill=(5, 8), steps=40, commit_every=8, host_size=1)
    half = commit_window_bound(slow, kill=(5, 8), steps=40, commit_every=8)
    assert one > half > 1.0
    for bad in (0, 3, 8):
        with pytest.raises(ValueError, match="host_size"):
            commit_window_bound(slow, kill=(5, 8), steps=40, commit_every=8, host_size=bad)


def test_the_table_gives_the_ranks_of_each_runs_last_world():
    from horovod_prague.bench.faults import markdown

    run = {"wall": 9.0, "final_accuracy": 0.8, "same_model_on_every_rank": True}
    runs = [
        {"seed": 0, "system": "allreduce", **run, "worlds": [{"resumed": [1.0]}] * 4},
        {"seed": 1, "system": "allreduce", **run, "worlds": [{"resumed": [1.0]}] * 8},
    ]
    (row,) = summarize(runs)
    assert row["last_world_size"] == [4, 8]
    assert markdown([row], {}).splitlines()[-1].endswith("| 4, 8 |")
