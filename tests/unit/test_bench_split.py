"""``prague-bench --split fixed``: batches as a plain script takes them, the balanced
All-Reduce baseline, and ``--slow-host``'s CPU quota."""

from __future__ import annotations

import itertools
import types
from collections import Counter
from pathlib import Path

import pytest

from horovod_prague.bench import cpu_limit
from horovod_prague.bench.cli import job_command
from horovod_prague.bench.plan import parse_args
from horovod_prague.bench.script_batches import ScriptBatches


def _command(*args: str, system: str) -> list[str]:
    plan, _ = parse_args(list(args))
    job = {"ranks": plan.ranks[0], "scenario": "persistent", "seed": 0, "system": system}
    return job_command(job, plan, Path("data"), Path("out.json"))


def test_a_fixed_split_takes_a_scripts_batches_and_the_bound_its_shares():
    fixed = ("--ranks", "4", "--split", "fixed", "--sampling", "epoch")
    assert "--loader" in _command(*fixed, system="prague/own_pace=on")
    assert "--own-pace" not in _command(*fixed, system="prague/own_pace=on")
    balanced = _command(
        *fixed, "--systems", "allreduce-poll,allreduce-balanced", system="allreduce-balanced"
    )
    assert {"--loader", "--balanced", "--poll-wait"} <= set(balanced)
    assert "--loader" in _command("--ranks", "4", system="prague")  # fixed: the default
    bound = _command("--ranks", "4", "--split", "bound", system="prague")
    assert "--own-pace" in bound and "--loader" not in bound
    for system in ("undisturbed", "prague"):  # a fault run: every rank the same steps
        command = _command("--fault", "5@100", system=system)
        assert "--loader" not in command and "--own-pace" not in command, system


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slow-host", "0.5"], "--slow-host needs --hosts"),
        (["--hosts", "2x2", "--slow-host", "0"], "--slow-host 0: cores from 0.01"),
        (["--hosts", "2x2", "--slow-host", "1e9"], "--slow-host 1e+09: cores from 0.01"),
        (["--split", "fixed", "--framework", "tensorflow", "--systems", "allreduce"], "PyTorch"),
        (["--split", "fixed", "--sampling", "whole"], "--split fixed (the default) takes"),
        (
            ["--split", "bound", "--systems", "allreduce,allreduce-balanced"],
            "allreduce-balanced takes batches",
        ),
        (["--framework", "tensorflow", "--systems", "allreduce"], "ask for --split bound"),
        (["--fault", "5@100", "--split", "bound"], "--fault: every rank takes the same steps"),
        (["--fault", "5@100", "--systems", "allreduce,allreduce-balanced"], "sizes batches"),
    ],
)
def test_a_split_or_slow_host_that_cannot_run_is_refused(args, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(args)
    assert message in capsys.readouterr().err


class _Trainer:
    """Rank ``rank`` of 4; its allgather answers with the given rows."""

    def __init__(self, rank: int, rows: list[tuple[int, float]]) -> None:
        self.rank, self.size, self.rows = rank, 4, rows

    def allgather_object(self, value, name):
        return self.rows


def test_balanced_batches_follow_the_measured_speeds_and_weigh_by_share():
    rows = [(1000, 1.0), (1000, 1.0), (1000, 1.0), (1000, 4.0)]  # the last rank 4x slower
    ranks = [ScriptBatches(_Trainer(r, rows), 4000, "epoch", 0, 64, True) for r in range(4)]
    passes = [list(itertools.islice(iter(b), 32)) for b in ranks]  # two passes of 16 batches
    first = [[len(batch) for batch, _ in p[:16]] for p in passes]
    assert first == [[64] * 15 + [40]] * 4  # the DataLoader's own split
    second = [p[16:] for p in passes]
    sizes = [sum(len(batch) for batch, _ in p) for p in second]
    assert sum(sizes) == 4000 and sizes[3] < sizes[0] / 3
    weights = [{w for _, w in p} for p in second]
    assert weights[3] == {sizes[3] / 1000} and weights[0] == {sizes[0] / 1000}
    seen = Counter(int(i) for p in second for batch, _ in p for i in batch)
    assert set(seen) == set(range(4000)) and set(seen.values()) == {1}


def test_a_scripts_batches_are_the_data_loaders_without_balancing():
    (b,) = [ScriptBatches(_Trainer(1, []), 100, "shard", 0, 8)]
    one, two = list(itertools.islice(iter(b), 4)), list(itertools.islice(iter(b), 4))
    assert [w for _, w in one] == [1.0] * 4 and [list(x) for x, _ in one] == [
        list(x) for x, _ in two
    ]  # shard: no set_epoch, the same order every pass


@pytest.mark.parametrize("version", [1, 2])
def test_a_slow_host_gets_its_quota_in_a_cgroup_of_its_own(tmp_path, monkeypatch, version):
    monkeypatch.setattr(cpu_limit, "ROOT", tmp_path)
    controller = tmp_path / "cpu" if version == 1 else tmp_path
    controller.mkdir(exist_ok=True)
    if version == 1:
        (controller / "cpu.cfs_quota_us").write_text("-1")
    else:
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory")
        (tmp_path / "cgroup.subtree_control").write_text("memory")
    path = cpu_limit.limit(4242, cores=0.4, name="h2")
    assert path == controller / "prague-slow-h2"
    assert (path / "cgroup.procs").read_text() == "4242"
    quota = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    assert (path / quota).read_text() == ("40000" if version == 1 else "40000 100000")
    with pytest.raises(ValueError, match="--slow-host"):
        cpu_limit.limit(4242, cores=0, name="h2")


def test_no_cpu_controller_is_said_plainly(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_limit, "ROOT", tmp_path)
    with pytest.raises(cpu_limit.CpuLimitError, match="no cgroup CPU controller"):
        cpu_limit.limit(1, cores=1, name="h1")
    assert cpu_limit.remove_all() == []


def test_script_batches_refuse_a_sampling_no_sampler_gives():
    with pytest.raises(ValueError, match="epoch or shard"):
        ScriptBatches(types.SimpleNamespace(rank=0, size=2), 10, "whole", 0, 2)
