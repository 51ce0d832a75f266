"""docs/reference.md and the code name the same options, variables, functions and flags, and
the commands that README and docs/usage.md show are ones the launchers accept."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from pathlib import Path

import pytest

from horovod_prague import runner
from horovod_prague.bench import plan as bench_plan
from horovod_prague.common.binding import FUNCTIONS
from horovod_prague.common.config import ENV_PREFIX, PragueConfig

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "reference.md").read_text()
VARIABLE = re.compile(r"\bHOROVOD_PRAGUE_[A-Z_]+[A-Z]\b")


def _section(title: str) -> str:
    return REFERENCE.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _first_cells(title: str) -> list[str]:
    """The first cell of each row of the section's table."""
    rows = [line for line in _section(title).splitlines() if line.startswith("| ")]
    return [row.split("|")[1].strip() for row in rows[1:]]  # the first is the header


def test_every_option_and_only_the_options():
    documented = [re.findall(r"`(\w+)`", cell) for cell in _first_cells("Options")]
    assert [name for names in documented for name in names] == [
        f.name for f in dataclasses.fields(PragueConfig)
    ]


def test_each_option_row_gives_its_flag_and_variable():
    rows = [line for line in _section("Options").splitlines() if line.startswith("| `")]
    for field, row in zip(dataclasses.fields(PragueConfig), rows, strict=True):
        assert f"`{ENV_PREFIX}{field.name.upper()}`" in row, row
        assert runner.flag(field.name).split()[0] in row, row


def test_every_variable_the_code_reads_and_only_those():
    code = {
        name
        for folder in ("horovod_prague", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        for name in VARIABLE.findall(path.read_text())
    }
    options = {f"{ENV_PREFIX}{f.name.upper()}" for f in dataclasses.fields(PragueConfig)}
    documented = set(VARIABLE.findall(REFERENCE))
    assert code <= documented, code - documented
    assert documented <= code | options, documented - code - options


def test_every_horovodrun_flag():
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--prague")}
    documented = set(re.findall(r"--prague[a-z-]*", _section("Options")))
    assert flags == documented


def test_every_prague_bench_flag(capsys):
    with pytest.raises(SystemExit):
        bench_plan.parse_args(["--help"])
    listed = re.findall(r"^ {2}(-[^ ].*)$", capsys.readouterr().out, re.M)
    flags = {f for line in listed for f in re.findall(r"(--[a-z][a-z-]+)", line)} - {"--help"}
    documented = set(re.findall(r"`(--[a-z][a-z-]+)", _section("`prague-bench`")))
    assert flags == documented


def test_every_function():
    documented = {
        name for cell in _first_cells("Functions") for name in re.findall(r"`(\w+)", cell)
    }
    for name in FUNCTIONS:
        assert name in documented or name.rstrip("s") in documented, name


def _commands(path: Path, program: str) -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)
    lines = [line.split("  #")[0] for b in blocks for line in b.replace("\\\n", " ").splitlines()]
    return [shlex.split(line) for line in lines if line.startswith(program + " ")]


DOCS = [ROOT / "README.md", ROOT / "docs" / "usage.md"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_the_horovodrun_commands_parse(path, monkeypatch):
    from horovod.runner import launch

    commands = _commands(path, "horovodrun")
    assert commands or path.name != "README.md"
    for words in commands:
        monkeypatch.setattr(sys, "argv", words)
        args = launch.parse_args()
        assert args.command, words


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_the_prague_bench_commands_parse(path):
    commands = _commands(path, "prague-bench")
    assert commands or path.name != "README.md"
    for words in commands:
        bench_plan.parse_args(words[1:])
