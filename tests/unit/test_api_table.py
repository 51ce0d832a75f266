"""docs/usage.md's tables of Horovod's API under the flag stay true: every public name of the
installed Horovod's framework modules is in one row, and each script a row names as checking
it calls every name of the row."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
USAGE = REPO / "docs" / "usage.md"
TESTS = REPO / "tests"
SCRIPT_FOLDERS = (TESTS / "conformance" / "scripts", TESTS / "integration" / "workers")
MODULES = ("horovod.torch", "horovod.tensorflow", "horovod.tensorflow.keras")
STATUSES = ("stock", "guarded", "Prague", "warns", "error", "does not apply")


def tables() -> dict[str, list[tuple[list[str], str, list[str]]]]:
    """Module -> its rows: (names, status, scripts)."""
    found: dict[str, list[tuple[list[str], str, list[str]]]] = {}
    rows: list[tuple[list[str], str, list[str]]] | None = None
    for line in USAGE.read_text().splitlines():
        cells = line.strip().strip("|").split("|") if line.startswith("|") else []
        cells = [c.strip() for c in cells]
        if len(cells) == 3 and cells[1] == "under the flag":
            rows = found.setdefault(cells[0].strip("`"), [])
        elif rows is not None and len(cells) == 3 and not cells[0].startswith("---"):
            names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[0])
            scripts = re.findall(r"`([\w.]+\.py)`", cells[2])
            rows.append((names, cells[1], scripts))
        elif not cells:
            rows = None
    return found


def public_names(module: str) -> set[str]:
    hvd = importlib.import_module(module)
    return {
        n for n in dir(hvd) if not n.startswith("_") and not inspect.ismodule(getattr(hvd, n))
    }


def test_there_is_a_table_for_each_framework_module():
    assert set(tables()) == set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_one_row(module):
    pytest.importorskip(module)
    rows = tables()[module]
    listed = [name for names, _, _ in rows for name in names]
    assert len(listed) == len(set(listed)), f"names listed twice for {module}"
    public = public_names(module)
    assert not public - set(listed), f"{module} names missing from the table"
    assert not set(listed) - public, f"names in the table that {module} does not have"


@pytest.mark.parametrize("module", MODULES)
def test_each_row_has_a_status_and_its_scripts_call_its_names(module):
    for names, status, scripts in tables()[module]:
        assert status.startswith(STATUSES), (names, status)
        paths = [folder / s for s in scripts for folder in SCRIPT_FOLDERS if (folder / s).exists()]
        assert len(paths) == len(scripts), f"a script of {names} does not exist: {scripts}"
        if not scripts:
            continue
        texts = [p.read_text() for p in paths]
        for name in names:
            called = re.compile(rf"\bhvd\.(callbacks\.)?{re.escape(name)}\b")
            assert any(called.search(t) for t in texts), f"none of {scripts} calls hvd.{name}"
