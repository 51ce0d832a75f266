"""docs/reliability.md names real tests, and its links and those of docs/limitations.md lead
to files that exist.

A test is cited as ``tests/<dir>/<file>.py::<name>`` or ``tests/<dir>/<file>.py::<Class>::<name>``
(a parametrised id such as ``name[case]`` counts as ``name``). A file cited alone
(``tests/unit/test_x.py``) must exist too."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGE = DOCS / "reliability.md"
LINKED = [PAGE, DOCS / "limitations.md"]

CITATION = re.compile(r"\b(tests/[\w./-]+?\.py)((?:::[A-Za-z_]\w*(?:\[[^\]`\s]*\])?)*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def citations(text: str) -> list[tuple[str, list[str]]]:
    """Each cited file with the names after it (``::`` parts, parametrised ids dropped)."""
    found = []
    for match in CITATION.finditer(text):
        names = [re.sub(r"\[.*\]$", "", part) for part in match.group(2).split("::")[1:]]
        found.append((match.group(1), names))
    return found


@functools.cache
def definitions(path: Path) -> set[str]:
    """Every test a file defines: ``name`` for functions, ``Class::name`` for methods."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{item.name}")
    return names


def problems_with_citations(text: str) -> list[str]:
    problems = []
    for file, names in citations(text):
        path = REPO / file
        if not path.is_file():
            problems.append(f"{file}: no such file")
            continue
        if names and "::".join(names) not in definitions(path):
            problems.append(f"{file}::{'::'.join(names)}: not defined in {file}")
    return problems


def problems_with_links(page: Path) -> list[str]:
    problems = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        file = target.split("#", 1)[0]
        if not (page.parent / file).exists():
            problems.append(f"{page.name}: link to {target}: no such file")
    return problems


def test_the_page_cites_tests():
    assert len([c for c in citations(PAGE.read_text()) if c[1]]) >= 50


def test_every_cited_test_exists():
    assert problems_with_citations(PAGE.read_text()) == []


@pytest.mark.parametrize("page", LINKED, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page):
    assert problems_with_links(page) == []


def test_a_bogus_citation_or_link_is_caught(tmp_path):
    """The checks above can fail."""
    real = "tests/unit/test_join.py::test_join_once_per_epoch_then_finish"
    assert problems_with_citations(f"`{real}[x-1]`") == []
    bogus = [
        "tests/unit/test_join.py::test_that_does_not_exist",
        "tests/unit/no_such_file.py::test_x",
        "tests/unit/test_join.py::NoClass::test_join_once_per_epoch_then_finish",
    ]
    assert len(problems_with_citations(" ".join(f"`{b}`" for b in bogus))) == 3
    page = tmp_path / "page.md"
    page.write_text("[a](missing.md#x) [b](https://example.org) [c](#here)")
    assert problems_with_links(page) == ["page.md: link to missing.md#x: no such file"]
