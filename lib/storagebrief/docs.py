"""The generated parts of README.md and docs/, derived from the code they describe.

`storagebrief docs` checks them, `--write` rewrites them (tests/test_docs.py fails when they differ), so
a new study cannot be missing from the README's table and a column list cannot drift from the `COLUMNS`
that declares it. A generated part sits between two HTML comments, which a Markdown forge does not show:

    <!-- generated: columns (storagebrief docs --write) -->
    ...
    <!-- end generated: columns -->

What is generated:
  README.md               the table of studies (from the registry, plus the "Reproduces:" line of each
                          study's page)
  docs/studies/<name>.md  the study's runs.csv columns (its metrics room's COLUMNS)
  docs/run-table.md       the engine's and the monitor's columns (core.columns), which every runs.csv starts with
"""
from __future__ import annotations

import re
from pathlib import Path

from . import studies
from .core import columns as core_columns
from .core.study import Study

BEGIN = "<!-- generated: {name} (storagebrief docs --write) -->"
END = "<!-- end generated: {name} -->"
REPRODUCES = re.compile(r"^\*\*Reproduces:\*\*\s*(.+)$", re.M)


def study_page(study: Study) -> str:
    """The study's reference page, relative to the project root."""
    return f"docs/studies/{study.name}.md"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def columns_table(declared) -> str:
    """A Markdown table of declared runs.csv columns, in their declared order."""
    rows = ["| column | unit | kind | meaning |", "|---|---|---|---|"]
    rows += [f"| `{c.name}` | {_cell(c.unit) or '—'} | {c.kind} | {_cell(c.meaning)} |" for c in declared]
    return "\n".join(rows)


def reproduces(root: Path, study: Study) -> str:
    """What the study reproduces, as its page says on its "**Reproduces:**" line ('—' without one)."""
    page = root / study_page(study)
    found = REPRODUCES.search(page.read_text()) if page.is_file() else None
    return found.group(1).strip() if found else "—"


def studies_table(root: Path) -> str:
    """The README's table of every registered study, in the brief's order."""
    rows = ["| # | study | reproduces | command | notebook | reference |", "|---|---|---|---|---|---|"]
    for study in studies.REGISTRY.values():
        number = Path(study.notebook).name.split("_", 1)[0]
        notebook = str(Path(study.notebook).with_suffix(".ipynb"))
        rows.append(f"| {number} | {_cell(study.title)} | {_cell(reproduces(root, study))} | "
                    f"`storagebrief {study.command}` | `{notebook}` | [{study_page(study)}]({study_page(study)}) |")
    return "\n".join(rows)


def _study_columns(study: Study) -> str:
    return (f"Every column `{study.name}` adds to runs.csv, from `COLUMNS` in "
            f"`{study.source_dir}/metrics.py` (each row also holds the engine's and the monitor's: "
            "[run-table.md](../run-table.md)):\n\n" + columns_table(study.room("metrics").COLUMNS))


def _run_table(kind: str) -> str:
    return columns_table(core_columns.ENGINE_COLUMNS if kind == "engine" else core_columns.MONITOR_COLUMNS)


def parts(root: Path) -> list[tuple[str, str, str]]:
    """Every generated part: (file relative to root, part name, its content)."""
    out = [("README.md", "studies", studies_table(root)),
           ("docs/run-table.md", "engine-columns", _run_table("engine")),
           ("docs/run-table.md", "monitor-columns", _run_table("monitor"))]
    out += [(study_page(s), "columns", _study_columns(s)) for s in studies.REGISTRY.values()]
    return out


def _block(name: str, content: str) -> str:
    return f"{BEGIN.format(name=name)}\n{content}\n{END.format(name=name)}"


def _span(text: str, name: str) -> tuple[int, int] | None:
    begin, end = text.find(BEGIN.format(name=name)), text.find(END.format(name=name))
    if begin < 0 or end < begin:
        return None
    return begin, end + len(END.format(name=name))


def differences(root: Path) -> list[str]:
    """One line per generated part that is missing or differs from what the code implies."""
    found = []
    for rel, name, content in parts(root):
        path = root / rel
        text = path.read_text() if path.is_file() else None
        span = _span(text, name) if text is not None else None
        if text is None:
            found.append(f"{rel}: missing (a page for every registered study)")
        elif span is None:
            found.append(f"{rel}: has no generated part '{name}'")
        elif text[span[0]:span[1]] != _block(name, content):
            found.append(f"{rel}: generated part '{name}' differs from the code")
        if name == "columns" and text is not None and not REPRODUCES.search(text):
            found.append(f"{rel}: has no '**Reproduces:** ...' line (the README's table reads it)")
    return found


def write(root: Path) -> list[str]:
    """Rewrite every generated part; a page without the part gets it appended (a study's page without a
    file gets one holding its title and columns: write the rest). Returns the files changed."""
    changed = []
    for rel, name, content in parts(root):
        path = root / rel
        text = path.read_text() if path.is_file() else f"# {parts_title(rel)}\n"
        span = _span(text, name)
        new = (text[:span[0]] + _block(name, content) + text[span[1]:] if span
               else text.rstrip("\n") + "\n\n" + _block(name, content) + "\n")
        if new != (path.read_text() if path.is_file() else None):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new)
            changed.append(rel)
    return sorted(set(changed))


def parts_title(rel: str) -> str:
    for study in studies.REGISTRY.values():
        if study_page(study) == rel:
            return study.title
    return Path(rel).stem
