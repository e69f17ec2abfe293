"""A brief of the studies you choose (issue 62): `storagebrief brief --studies emulate,kv_cache,vector_search`.

Each chosen study's newest complete results are looked for in the pipeline's `<reports>/<study>/` and in the
notebook and CLI runs' `<reports>/runs/<time>/<study>/`. Complete: status.json says `complete: true` for that
study (a run cut short, or one still running, says false); results older than status.json (a runs.csv without
one) count as complete, as the brief has always read them. Newest: status.json's `finished_at`, else the
runs.csv's time.

The brief of them is rendered in a folder of its own, `<reports>/briefs/<study>+<study>/`: a link per study named
after it (the brief reads `<folder>/<study>/`, so every part of it, the appendices included, holds those studies
and no other), and sources.json saying where each came from, which Appendix B shows. Nothing else is written:
the studies' folders are read, never copied or changed.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..core import results
from ..core.engine_outputs import STATUS
from ..studies import REGISTRY

BRIEFS = "briefs"                 # <reports>/briefs/<study>+<study>/
SOURCES = "sources.json"          # in that folder: where each study's results came from
RUNS = "runs.csv"


class ChoiceError(ValueError):
    """--studies names no study, or a chosen study has no complete results: one line, before any work."""


def allowed() -> str:
    """The names --studies takes: each study's key, with its command name where that differs."""
    return ", ".join(s.name + (f" ({s.command})" if s.command != s.name else "") for s in REGISTRY.values())


def parse(text: str | list[str], option: str = "--studies") -> list[str]:
    """Study keys (registry order) from a comma-separated list of keys or command names (kv_cache or kv-cache);
    a notebook's list of names too. `option` names the parameter in the error: `--studies`, or brief.ipynb's
    `studies =`."""
    if isinstance(text, (list, tuple)):
        text = ",".join(map(str, text))
    names = [n.strip() for n in str(text).split(",")]
    chosen = set()
    for n in names:
        key = next((s.name for s in REGISTRY.values() if n in (s.name, s.command)), None)
        if key is None:
            what = "an empty name" if not n else f"'{n}' is not a study"
            raise ChoiceError(f"{option} {text!r}: {what}; allowed (comma-separated): {allowed()}")
        chosen.add(key)
    return [k for k in REGISTRY if k in chosen]


@dataclass(frozen=True)
class Source:
    key: str
    dir: Path                  # the study's results folder
    finished: datetime         # UTC
    origin: str                # "the pipeline", "run <time>", "a notebook run" or "a CLI run"


def _finished(d: Path, key: str) -> datetime | None:
    """When the results in d were completed, or None where they are not complete results of this study."""
    runs = d / RUNS
    if not runs.is_file():
        return None
    mtime = datetime.fromtimestamp(runs.stat().st_mtime, timezone.utc)
    if not (d / STATUS).exists():
        return mtime                              # results written before status.json: finished, as the brief reads
    try:
        status = json.loads((d / STATUS).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or status.get("complete") is not True or status.get("study", key) != key:
        return None
    try:
        when = datetime.fromisoformat(str(status.get("finished_at")))
    except ValueError:
        return mtime
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def entry_of(d: Path) -> str:
    """How the run that wrote the results in d was started (inventory.json `entry`: pipeline, notebook, CLI), or ''."""
    try:
        got = json.loads((d / "inventory.json").read_text()).get("entry")
    except (OSError, ValueError, AttributeError):
        return ""
    return got if isinstance(got, str) else ""


def _top_origin(reports: Path, d: Path) -> str:
    """Where `<reports>/<study>/` came from: a run's own folder when `reports` is one (`--reports
    reports/runs/<time>`), else the pipeline's folder unless its inventory says a notebook or CLI run wrote it
    there (`storagebrief <study> --out reports/<study>`)."""
    if reports.resolve().parent.name == "runs":
        return f"run {reports.resolve().name}"
    how = entry_of(d)
    return f"a {how} run" if how in ("notebook", "CLI") else "the pipeline"


def shown(path: str | Path) -> str:
    """A results folder as a reader finds it: relative to its project ('reports/runs/<time>/emulate'), else the
    whole path."""
    from ..kit.history import project_of
    path = Path(os.path.abspath(path))
    root = project_of(path)
    return os.path.relpath(path, root) if root is not None else str(path)


def complete_results(reports: str | Path, key: str) -> list[Source]:
    """Every complete result of study `key` under `reports`, oldest first."""
    reports = Path(reports)
    places = [(reports / key, _top_origin(reports, reports / key))]
    runs = reports / "runs"
    if runs.is_dir():
        places += [(d / key, f"run {d.name}") for d in sorted(runs.iterdir()) if d.is_dir()]
    found = [Source(key, d, when, origin) for d, origin in places
             if d.is_dir() and (when := _finished(d, key)) is not None]
    return sorted(found, key=lambda s: (s.finished, str(s.dir)))


def _name(option: str) -> str:
    """The parameter alone: '--studies', or 'studies' for the notebook's `studies =`."""
    return option.rstrip(" =")


def choose(reports: str | Path, keys: list[str], option: str = "--studies") -> dict[str, Source]:
    """Each chosen study's newest complete results; ChoiceError naming those that have none."""
    found = {k: complete_results(reports, k) for k in keys}
    missing = [k for k, v in found.items() if not v]
    if missing:
        raise ChoiceError(
            f"{_name(option)}: no complete results of {', '.join(missing)} in {reports}/<study>/ or "
            f"{reports}/runs/*/<study>/ "
            "(a run cut short or still running is not complete): " + (
                f"run it first (its notebook, `storagebrief {REGISTRY[missing[0]].command}` or `dvc repro "
                f"{missing[0]}`)" if len(missing) == 1 else "run them first (their notebooks, `storagebrief "
                "<study>` or `dvc repro <study>`)"))
    return {k: v[-1] for k, v in found.items()}


def folder_for(reports: str | Path, keys: list[str]) -> Path:
    return Path(reports) / BRIEFS / "+".join(keys)


def prepare(reports: str | Path, chosen: dict[str, Source], option: str = "--studies") -> Path:
    """The brief folder of these studies: a link per study to its chosen results and sources.json. Links a
    previous --studies left there are replaced; anything else named after a study is not ours, and refused."""
    reports = Path(reports)
    folder = folder_for(reports, list(chosen))
    for d in (reports / BRIEFS, folder):
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            raise ChoiceError(f"{_name(option)}: '{d}' is a link or a file, not a folder this command made: move it "
                              "away")
    folder.mkdir(parents=True, exist_ok=True)
    for entry in folder.iterdir():
        if entry.name in REGISTRY:
            if not entry.is_symlink():
                raise ChoiceError(f"{_name(option)}: '{entry}' is not a link this command made (it holds results of "
                                  "its own): move it away")
            entry.unlink()
    for key, src in chosen.items():
        os.symlink(os.path.relpath(src.dir.resolve(), folder.resolve()), folder / key, target_is_directory=True)
    results.write_json(folder / SOURCES, {key: {"folder": shown(src.dir),
                                                "origin": src.origin,
                                                "finished_at": src.finished.isoformat(timespec="seconds")}
                                          for key, src in chosen.items()})
    return folder


NOTEBOOK_OPTION = "studies ="      # brief.ipynb's parameter, as its errors name it


def from_notebook(reports: str | Path, studies: str) -> Path:
    """The brief notebook's `studies = "a,b"`: the folder of a brief of those studies (parse, choose, prepare);
    a bad name is the CLI's one line naming the notebook's parameter, before any work."""
    keys = parse(studies, NOTEBOOK_OPTION)
    return prepare(reports, choose(reports, keys, NOTEBOOK_OPTION), NOTEBOOK_OPTION)


def summary(chosen: dict[str, Source]) -> list[str]:
    """One line per study for the terminal: which results the brief shows."""
    return [f"{REGISTRY[k].title}: results of {src.origin} ({shown(src.dir)}/, "
            f"finished {src.finished.strftime('%Y-%m-%d %H:%M UTC')})" for k, src in chosen.items()]


def sources(reports_dir: str | Path) -> dict[str, dict]:
    """sources.json of a chosen-studies brief folder ({} for any other reports folder, or one that does not read)."""
    f = Path(reports_dir) / SOURCES
    try:
        data = json.loads(f.read_text()) if f.is_file() else {}
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k in REGISTRY and isinstance(v, dict)} if isinstance(data, dict) else {}


def show_sources(reports_dir: str | Path) -> None:
    """Appendix B's table of where each study's results came from, in a chosen-studies brief (nothing otherwise)."""
    import pandas as pd

    from ..report.display import show_table
    found = sources(reports_dir)
    if not found:
        return
    rows = []
    for key, src in found.items():
        how = entry_of(Path(reports_dir) / key) or "not recorded"
        rows.append({"Study": REGISTRY[key].title, "Results": str(src.get("folder", "?")),
                     "From": src.get("origin", "?"), "Started from": how, "Finished": _when(src.get("finished_at"))})
    show_table(pd.DataFrame(rows), "The studies chosen for this brief (storagebrief brief --studies), each from its "
                                   "newest complete results")


def _when(text) -> str:
    try:
        return datetime.fromisoformat(str(text)).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return "not recorded"
