"""README.md and docs/ (issue 37): a short README whose table holds every registered study, and a
reference whose generated parts (the studies table, every study's columns) match the code."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace

import pytest

from conftest import REPO
from storagebrief import docs, studies
from storagebrief.core.columns import Column

README = REPO / "README.md"
DOCS = REPO / "docs"
MARKDOWN = [README, *sorted(DOCS.rglob("*.md"))]


def _copy(tmp_path):
    shutil.copy(README, tmp_path / "README.md")
    shutil.copytree(DOCS, tmp_path / "docs")
    return tmp_path


def test_readme_is_short_and_names_the_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make study" in text and "make test" in text and "make test-fast" in text


def test_generated_parts_match_the_code():
    assert docs.differences(REPO) == []


def test_every_registered_study_is_a_row_of_the_readme_table():
    rows = [line for line in README.read_text().splitlines() if line.startswith("| ")]
    for study in studies.REGISTRY.values():
        row = [r for r in rows if f"`storagebrief {study.command}`" in r]
        assert len(row) == 1, f"{study.name}: no row of the README's studies table"
        assert study.notebook.replace(".py", ".ipynb") in row[0] and docs.study_page(study) in row[0]
        assert (REPO / docs.study_page(study)).is_file()


def test_a_new_study_or_a_changed_column_is_caught_and_written(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    page = root / "docs/studies/preprocess.md"
    page.write_text(page.read_text().replace("| `processes` |", "| `processes_typo` |"))
    assert docs.differences(root) == ["docs/studies/preprocess.md: generated part 'columns' differs from the code"]
    # a study the registry gains (here a copy of preprocess under another name) is missing twice
    extra = replace(studies.REGISTRY["preprocess"], name="preprocess", command="extra-study")
    monkeypatch.setitem(studies.REGISTRY, "extra", extra)
    assert any(d.startswith("README.md: generated part 'studies' differs") for d in docs.differences(root))
    assert "README.md" in docs.write(root)
    assert docs.differences(root) == []
    assert "`storagebrief extra-study`" in (root / "README.md").read_text()


def test_columns_table_escapes_what_markdown_would_split():
    table = docs.columns_table((Column("a_s", "s", "x | y"),))
    assert table.splitlines()[-1] == "| `a_s` | s | number | x \\| y |"


def test_architecture_names_every_module():
    """docs/architecture.md's module map matches the code: every package and module is named there."""
    text = (DOCS / "architecture.md").read_text()
    lib = REPO / "lib" / "storagebrief"
    names = {p.stem for p in lib.rglob("*.py") if p.stem not in ("__init__", "__main__")}
    names |= {p.name for p in lib.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", text))
    assert not missing, f"docs/architecture.md's module map does not name: {missing}"


def test_cited_tests_exist():
    """Every `test_x.py::test_y` README or docs/ cites names a test that exists (tests move, citations follow)."""
    defined = {}
    for f in (REPO / "tests").rglob("test_*.py"):
        defined.setdefault(f.name, set()).update(re.findall(r"^def (test_\w+)", f.read_text(), flags=re.M))
    wrong = []
    for md in MARKDOWN:
        last = None
        for f, t in re.findall(r"(test_\w+\.py)?(?:::(test_\w+))?", md.read_text()):
            if f:
                last = f
            f = f or last                      # `::test_y` continues the file cited before it
            if (f or t) and (f not in defined or (t and t not in defined[f])):
                wrong.append(f"{md.relative_to(REPO)}: {f}::{t}" if t else f"{md.relative_to(REPO)}: {f}")
    assert not wrong, f"cited tests that do not exist: {sorted(set(wrong))}"


@pytest.mark.parametrize("md", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(md):
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text())
    broken = [link for link in links if "://" not in link and not (md.parent / link).exists()]
    assert not broken, broken


def test_no_page_calls_a_published_study_the_seed():
    """The reader meets the studies by name (the Samsung SDC 2023 study, the KIOXIA CM7 brief, ...)."""
    found = [f"{md.relative_to(REPO)}:{i}" for md in MARKDOWN
             for i, line in enumerate(md.read_text().splitlines(), 1)
             if re.search(r"(?<!`)\bseeds?\b(?!`)|\bseed's\b", line, flags=re.I)]
    assert not found, found


def test_every_page_is_in_the_index():
    """docs/README.md lists every page of docs/, so a page another change adds is found from the README."""
    index = (DOCS / "README.md").read_text()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.name != "README.md")
    missing = [p for p in pages if f"]({p})" not in index]
    assert not missing, f"add to docs/README.md's table: {missing}"
