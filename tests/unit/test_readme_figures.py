"""README's headline figures are those of the result file it names, and its command made it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DATA = "docs/results/suite-bn-mlp-epoch.json"


def _summary(ranks: int, system: str) -> dict:
    results = json.loads((ROOT / DATA).read_text())
    (row,) = [
        r
        for r in results["summary"]
        if r["ranks"] == ranks and r["system"] == system and r["scenario"] == "random"
    ]
    return row


def _gains() -> str:
    return README.split("## What it gains", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_its_data_file():
    assert f"`{DATA}`" in _gains()


def test_the_headline_figures_are_the_data_files():
    text = " ".join(_gains().split())
    eight, sixteen = _summary(8, "prague"), _summary(16, "prague")
    assert f"**{eight['throughput']:.2f}x** faster" in text
    assert f"at {round(100 * eight['of_bound'])}% of the bound" in text
    assert f"**{100 * eight['accuracy_delta']:+.1f} points**" in text
    assert f"16 ranks it is {sixteen['throughput']:.2f}x faster" in text
    assert f"with {100 * sixteen['accuracy_delta']:+.1f} points" in text
    assert _summary(8, "allreduce-poll")["throughput"] == 1.0  # the baseline of the ratios


def test_the_readme_command_is_the_data_files_plan():
    block = re.search(r"```bash\n(prague-bench .*?)```", _gains(), re.S)
    assert block, "no prague-bench command in What it gains"
    words = shlex.split(block.group(1).replace("\\\n", " "))
    flags = dict(zip(words[1::2], words[2::2], strict=True))
    plan = json.loads((ROOT / DATA).read_text())["plan"]
    assert flags["--workload"] == plan["workload"]
    assert flags["--sampling"] == plan["sampling"]
    assert [int(r) for r in flags["--ranks"].split(",")] == plan["ranks"]
    assert flags["--scenarios"].split(",") == plan["scenarios"]
    assert flags["--systems"].split(",") == plan["systems"]
    assert int(flags["--seeds"]) == plan["seeds"]
    assert int(flags["--first-seed"]) == plan["first_seed"]
    assert int(flags["--steps"]) == plan["steps"]
    assert "300 steps" in _gains() and plan["steps"] == 300


def test_the_readme_is_read_in_two_minutes():
    assert len(README.encode()) <= 5 * 1024
