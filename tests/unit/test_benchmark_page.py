"""docs/benchmarks.md: each table that names a result file is that file's, rendered by
``report.markdown``, under the command that made it; and every relative link resolves."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import statistics
from pathlib import Path

import pytest

from horovod_prague.bench import plan as bench_plan
from horovod_prague.bench import report

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "benchmarks.md"

# "Data: [`docs/results/X.json`](results/X.json), from:", a bash block, then the table.
SECTION = re.compile(
    r"Data: \[`(docs/results/[\w.-]+\.json)`\]\(results/[\w.-]+\.json\)[^\n]*\n\n"
    r"```bash\n(.*?)```\n\n((?:\|[^\n]*\n)+)",
    re.S,
)
PLAN_FIELDS = ("timeout", "cpu_units_per_ms")  # not flags: a limit, and a measured rate


def _sections(text: str) -> list[tuple[str, str, str]]:
    return SECTION.findall(text)


def _plan(command: str) -> dict:
    """The plan ``prague-bench`` makes of the command (its defaults included)."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    assert words[0] == "prague-bench", command
    plan, _ = bench_plan.parse_args(words[1:])
    return dataclasses.asdict(plan)


def test_every_result_file_the_page_names_heads_a_table():
    text = PAGE.read_text()
    named = set(re.findall(r"docs/results/[\w.-]+\.json", text))
    found = [data for data, _, _ in _sections(text)]
    assert sorted(found) == sorted(set(found)), "a data file heads two tables"
    assert named == set(found), f"named without its command and table: {named - set(found)}"
    assert {"docs/results/suite-bn-mlp-epoch.json", "docs/results/suite-lm.json"} <= named


@pytest.mark.parametrize(
    "data, command, table",
    [pytest.param(*s, id=Path(s[0]).name) for s in _sections(PAGE.read_text())],
)
def test_the_table_is_the_files_and_the_command_made_it(data, command, table):
    results = json.loads((ROOT / data).read_text())
    plan = results["plan"]
    assert table.strip() == report.markdown(results["summary"], plan["target"])
    made = _plan(command)
    for field, value in plan.items():
        if field not in PLAN_FIELDS:
            assert made[field] == value, f"{data}: --{field} is {made[field]!r}, ran {value!r}"


def test_the_check_fails_on_a_changed_figure():
    text = PAGE.read_text()
    data, command, table = _sections(text)[0]
    results = json.loads((ROOT / data).read_text())
    changed = table.replace("| prague | 3 |", "| prague | 2 |", 1)
    assert changed != table
    assert changed.strip() != report.markdown(results["summary"], results["plan"]["target"])
    with pytest.raises(AssertionError):
        test_the_table_is_the_files_and_the_command_made_it(
            data, command.replace("--seeds 3", "--seeds 2"), table
        )


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize(
    "path",
    [PAGE, *sorted((ROOT / "docs" / "results" / "earlier").glob("*.md"))],
    ids=lambda p: p.name,
)
def test_every_relative_link_resolves(path):
    for link in _links(path):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.is_file(), f"{path.name}: {link}"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"{path.name}: {link}"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    heads = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def _own_pace_against_balanced(*data: str) -> list[tuple[float, float, float]]:
    """Per seed: own pace's speed-up over ``allreduce-balanced``, and its accuracy (points)
    and test loss (nats) minus the balanced one's."""
    runs = [r for d in data for r in json.loads((ROOT / d).read_text())["runs"]]
    by_seed: dict[int, dict[str, dict]] = {}
    for run in runs:
        by_seed.setdefault(run["seed"], {})[run["system"]] = run
    out = []
    for systems in by_seed.values():
        b, p = systems["allreduce-balanced"], systems["prague/own_pace=on"]
        out.append(
            (
                b["wall"] / p["wall"],
                100 * (p["final_accuracy"] - b["final_accuracy"]),
                p["final_loss"] - b["final_loss"],
            )
        )
    return out


def test_the_slow_host_figures_over_all_seeds_are_the_files():
    text = " ".join(PAGE.read_text().split())
    first = _own_pace_against_balanced("docs/results/slow-host-2x2.json")
    more = _own_pace_against_balanced("docs/results/slow-host-2x2-more-seeds.json")
    assert len(first) == 3 and len(more) == 6
    said = "{:.2f}x `allreduce-balanced`{}, {:+.1f} points and {:+.3f} nats"
    for rows, how in ((first, " (per seed, then averaged)"), (more, ""), (first + more, "")):
        speed, points, nats = (statistics.mean(column) for column in zip(*rows, strict=True))
        assert said.format(speed, how, points, nats) in text
    points, nats = (statistics.stdev(c) for c in list(zip(*first + more, strict=True))[1:])
    assert f"standard deviation of {points:.1f} points ({nats:.3f} nats)" in text
    root = len(first + more) ** 0.5
    assert f"standard error is {points / root:.1f} point ({nats / root:.3f} nats)" in text
