"""README's headline figures are those of the result files it names, and its command made
the first: a plain script's runs at 8 and 16 ranks, and the bound beside them."""

from __future__ import annotations

import json
import re
import shlex
import statistics
from pathlib import Path

from horovod_prague.bench.workload import delays

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DATA = "docs/results/script-bn-mlp-n8.json"
DATA_16 = "docs/results/script-bn-mlp-n16.json"
BOUND = "docs/results/suite-bn-mlp-epoch.json"


def _summary(ranks: int, system: str, data: str | None = None) -> dict:
    data = data or (DATA if ranks == 8 else DATA_16)
    results = json.loads((ROOT / data).read_text())
    (row,) = [
        r
        for r in results["summary"]
        if r["ranks"] == ranks and r["system"] == system and r["scenario"] == "random"
    ]
    return row


def _equal_steps_bound(ranks: int, steps: int, seed: int) -> float:
    """All-Reduce's compute time over that of the slowest rank when every rank takes
    ``steps`` steps: the best ratio the injected delays allow a script."""
    factors = delays("random", ranks, steps, seed)
    return sum(max(c) for c in zip(*factors, strict=True)) / max(map(sum, factors))


def _gains() -> str:
    return README.split("## What it gains", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_its_data_files():
    for data in (DATA, DATA_16, BOUND):
        assert f"`{data}`" in _gains(), data


def test_the_headline_figures_are_the_data_files():
    text = " ".join(_gains().split())
    eight, sixteen = _summary(8, "prague"), _summary(16, "prague")
    assert f"**{eight['throughput']:.2f}x** faster" in text
    steps = json.loads((ROOT / DATA).read_text())["plan"]["steps"]
    equal_steps = statistics.mean(_equal_steps_bound(8, steps, seed) for seed in (1, 2, 3))
    assert f"at {round(100 * eight['throughput'] / equal_steps)}% of the bound" in text
    assert f"**{100 * eight['accuracy_delta']:+.1f} points**" in text
    assert f"16 ranks it is {sixteen['throughput']:.2f}x faster" in text
    assert f"with {100 * sixteen['accuracy_delta']:+.1f} points" in text
    assert _summary(8, "allreduce-poll")["throughput"] == 1.0  # the baseline of the ratios
    bound = [_summary(n, "prague", BOUND)["throughput"] for n in (8, 16)]
    assert f"reach {bound[0]:.2f}x and {bound[1]:.2f}x" in text
    for data in (DATA, DATA_16):
        assert json.loads((ROOT / data).read_text())["plan"]["split"] == "fixed", data


def test_the_readme_command_is_the_data_files_plan():
    block = re.search(r"```bash\n(prague-bench .*?)```", _gains(), re.S)
    assert block, "no prague-bench command in What it gains"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    flags = dict(zip(words[1::2], words[2::2], strict=True))
    plan = json.loads((ROOT / DATA).read_text())["plan"]
    assert flags["--workload"] == plan["workload"]
    assert flags.get("--split", "fixed") == plan["split"]  # fixed: the default
    assert flags["--sampling"] == plan["sampling"]
    assert [int(r) for r in flags["--ranks"].split(",")] == plan["ranks"]
    assert flags["--scenarios"].split(",") == plan["scenarios"]
    assert flags["--systems"].split(",") == plan["systems"]
    assert int(flags["--seeds"]) == plan["seeds"]
    assert int(flags["--first-seed"]) == plan["first_seed"]
    assert int(flags["--steps"]) == plan["steps"]
    assert "300 batches" in _gains() and plan["steps"] == 300


def test_the_readme_is_read_in_two_minutes():
    assert len(README.encode()) <= 5 * 1024
