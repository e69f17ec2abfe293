"""The brief's one gate to a study's results: read them, or say in one sentence why not.

Every part of the brief that touches a study's folder (its section, the snapshot cards, the
block-level characterization, the cover) goes through read_study(), so a study whose files are
empty, binary, not UTF-8, cut mid-row, missing columns or holding words where numbers belong
gets a "could not be read: <why>" paragraph and every other section still renders. After the
gate a study's brief and metrics code may assume its runs.csv parses, has the columns the study
declares (RUNS_COLUMNS in its metrics room) and numbers where it declares numbers, and that the
side files the brief reads (the registry's brief_inputs, metrics.json, status.json) parse.

status.json (written by the sweep engine when it has one; absent = older results, nothing said)
tells whether the sweep finished: {"complete", "runs_planned", "runs_done", "started_at",
"finished_at", "stopped_by"}.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..core import columns, reruns, results
from ..core.engine_outputs import STATUS
from ..studies import REGISTRY

RUNS = "runs.csv"
# Read by the brief for every study, beside the study's own brief_inputs.
ENGINE_FILES = ("inventory.json", "notes.json", "metrics.json", "characterization.csv", STATUS)
# Kinds of the columns every runs.csv has (core.columns: REQUIRED_COLUMNS, declared in ENGINE_COLUMNS).
COMMON_KINDS = columns.kinds(columns.REQUIRED_COLUMNS)


class Unreadable(ValueError):
    """A study's file cannot be used; the message says which and why, for the reader of the brief."""


@dataclass
class StudyInput:
    key: str
    title: str
    dir: Path
    frame: pd.DataFrame | None = None
    names: list[str] = field(default_factory=list)      # targets, reference first
    problem: str | None = None                          # why the results could not be read
    status: dict | None = None                          # status.json, when the engine wrote one

    @property
    def ok(self) -> bool:
        return self.problem is None

    def cut_short(self) -> str | None:
        """The note an unfinished sweep's section starts with (None: finished, or no status.json)."""
        s = self.status
        if not s or s["complete"]:
            return None
        by = f" (stopped by {s['stopped_by']})" if s.get("stopped_by") else ""
        return (f"This sweep was cut short: {s['runs_done']} of {s['runs_planned']} runs{by}; "
                "figures cover only those runs.")


def _text(path: Path) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise Unreadable(f"{path.name} is empty")
    if b"\0" in data:
        raise Unreadable(f"{path.name} is binary, not text (it holds NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{path.name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV the package wrote, checked whole: text, every row complete, ending with a newline."""
    text = _text(path)
    # pandas' writer ends every row with a newline: a file that does not was cut while being written,
    # and its last value may be a cut number that still parses.
    if not text.endswith(("\n", "\r")):
        raise Unreadable(f"{path.name} was cut mid-row (its last line has no newline)")
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
        for row in reader:
            if row and len(row) != len(header):
                what = "was cut mid-row" if reader.line_num == text.count("\n") else "is malformed"
                raise Unreadable(f"{path.name} {what}: line {reader.line_num} has {len(row)} of {len(header)} fields")
    except csv.Error as exc:
        raise Unreadable(f"{path.name} is not valid CSV (line {reader.line_num}: {exc})") from None
    return pd.read_csv(io.StringIO(text))


def read_json(path: Path) -> dict:
    text = _text(path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(obj, dict):
        raise Unreadable(f"{path.name} holds a JSON {type(obj).__name__}, not an object")
    return obj


def _check_columns(frame: pd.DataFrame, kinds: dict[str, str]) -> None:
    """kinds: column -> "text", "number", or "number?" (may be absent: a study whose every run failed
    has no metric columns; numbers when present)."""
    missing = [c for c, kind in kinds.items() if c not in frame.columns and not kind.endswith("?")]
    if missing:
        raise Unreadable(f"{RUNS} lacks column(s) {', '.join(missing)}")
    for col, kind in kinds.items():
        if kind.rstrip("?") != "number" or col not in frame.columns:
            continue
        values = frame[col]
        bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()   # blanks are allowed (failed runs)
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise Unreadable(f"{RUNS} column {col} holds text where numbers belong "
                             f"({int(bad.sum())} value(s), e.g. {str(values.iloc[i])!r} on line {i + 2})")


def _check_status(s: dict) -> dict:
    for key in ("runs_planned", "runs_done"):
        v = s.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise Unreadable(f"{STATUS}: {key} is {v!r}, not a whole number")
    if not isinstance(s.get("complete"), bool):
        raise Unreadable(f"{STATUS}: complete is {s.get('complete')!r}, not true or false")
    if s.get("stopped_by") is not None and not isinstance(s["stopped_by"], str):
        raise Unreadable(f"{STATUS}: stopped_by is {s['stopped_by']!r}, not text")
    return s


def _check_side_files(study, d: Path) -> dict[str, dict]:
    """Every file beside runs.csv that the brief reads must parse; returns the JSON ones by name.
    Folders (timeseries/, traces/) are read file by file by code that already skips a bad one."""
    out = {}
    for name in dict.fromkeys((*study.brief_inputs, *ENGINE_FILES)):
        f = d / name
        if name == RUNS or not f.is_file():
            continue
        if name.endswith(".json"):
            out[name] = read_json(f)
        elif name.endswith(".csv") and not _no_rows(f):
            read_csv(f)
    inv = out.get("inventory.json", {})
    if not isinstance(inv.get("targets", []), list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in inv.get("targets", [])):
        raise Unreadable("inventory.json: targets is not a list of targets with names")
    warnings = out.get("notes.json", {}).get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise Unreadable("notes.json: warnings is not a list of texts")
    return out


def _no_rows(f: Path) -> bool:
    """A side table written with no rows (results.write_csv of an empty frame leaves a bare newline, atomically):
    a sweep part that did not run (kv_cache's prefill off), for its section to say, not an unreadable result.
    runs.csv never passes here: an empty runs.csv stays unreadable."""
    return f.stat().st_size <= 2 and not f.read_bytes().strip()


def target_order(frame: pd.DataFrame, inventory: dict) -> list[str]:
    """Targets in params order (the first is the reference), from the run's inventory."""
    present = set(frame.target.astype(str))
    names = [t["name"] for t in inventory.get("targets", []) if t["name"] in present]
    return names or list(dict.fromkeys(frame.target.astype(str)))


_cache: dict[Path, tuple[tuple, StudyInput]] = {}


def _signature(d: Path) -> tuple:
    """The files' sizes and times: the brief reads each study several times, re-reads only on change."""
    out = []
    for f in sorted(d.iterdir()) if d.is_dir() else []:
        try:
            st = f.stat()
            out.append((f.name, st.st_size, st.st_mtime_ns))
        except OSError:
            continue
    return tuple(out)


def read_study(key: str, study_dir: str | Path) -> StudyInput:
    """A study's results checked whole, or the one-sentence reason they cannot be used."""
    study = REGISTRY[key]
    d = Path(study_dir)
    sig = _signature(d)
    hit = _cache.get(d.resolve())
    if hit and hit[0] == sig:
        return hit[1]
    s = StudyInput(key, study.title, d)
    try:
        if (d / STATUS).is_file():
            s.status = _check_status(read_json(d / STATUS))
        side = _check_side_files(study, d)
        if not (d / RUNS).is_file():
            raise Unreadable(f"there is no {RUNS}")
        try:
            results.check_schema_version(d / RUNS)
        except results.SchemaError as exc:
            raise Unreadable(str(exc)) from None
        frame = read_csv(d / RUNS)
        if frame.empty:
            raise Unreadable(f"{RUNS} holds no runs (a header line only)")
        _check_columns(frame, {**COMMON_KINDS, **study.room("metrics").RUNS_COLUMNS})
        for col in ("run_id", "target", "repeat"):     # every row the engine writes has them
            blank = frame[col].isna().to_numpy().nonzero()[0]
            if len(blank):
                raise Unreadable(f"{RUNS} line {int(blank[0]) + 2} has no {col}")
        frame = reruns.kept(frame)      # disturbed runs a later row re-ran are not read (core/reruns.py)
        s.frame, s.names = frame, target_order(frame, side.get("inventory.json", {}))
    except Unreadable as exc:
        s.problem = str(exc)
    except OSError as exc:      # a permission or I/O error is a reason too, not a crash of the brief
        s.problem = f"{Path(exc.filename or '?').name}: {exc.strerror}"
    _cache[d.resolve()] = (sig, s)
    return s


def studies(reports_dir: str | Path) -> list[StudyInput]:
    """Every registered study that left results (runs.csv, or status.json of a sweep that began), in
    brief order, read through the gate; bad ones carry their problem."""
    out = []
    for study in REGISTRY.values():
        d = Path(reports_dir) / study.name
        if (d / RUNS).exists() or (d / STATUS).exists():
            out.append(read_study(study.name, d))
    return out


def recorded(reports_dir: str | Path, key: str) -> dict[str, str]:
    """Study title -> what its results recorded under `key` in inventory.json, where they recorded a text."""
    out = {}
    for s in studies(reports_dir):
        try:
            h = read_json(s.dir / "inventory.json").get(key)
        except (Unreadable, OSError):
            continue
        if isinstance(h, str) and h:
            out[s.title] = h
    return out


def params_hashes(reports_dir: str | Path) -> dict[str, str]:
    """Study title -> the params hash its results recorded (inventory.json), where they recorded one."""
    return recorded(reports_dir, "params_hash")


def entries(reports_dir: str | Path) -> dict[str, str]:
    """Study title -> how its run was started (inventory.json `entry`: pipeline, notebook or CLI), where recorded."""
    return recorded(reports_dir, "entry")


def readable(reports_dir: str | Path) -> list[StudyInput]:
    return [s for s in studies(reports_dir) if s.ok]


__all__ = ["StudyInput", "Unreadable", "entries", "params_hashes", "read_csv", "read_json", "read_study", "readable",
           "studies", "target_order"]


def unapplied_profiles(frame: pd.DataFrame) -> dict[str, str]:
    """target -> how much of its emulated profile was not applied, from the runs' own rows."""
    out = {}
    if "emulated" not in frame or "profile" not in frame:
        return out
    for name, g in frame.groupby("target"):
        prof = str(g.profile.fillna("").iloc[0])
        applied = g.emulated.astype(str).str.lower().eq("true")
        if prof and prof != "nan" and not applied.all():
            share = "none" if not applied.any() else f"{int((~applied).sum())} of {len(g)}"
            out[name] = f"profile {prof} not applied in {share} of its runs (they ran unthrottled)"
    return out


def all_unapplied(reports_dir) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in readable(reports_dir):
        for t, why in unapplied_profiles(s.frame).items():
            out.setdefault(t, why)
    return out


def latest_inventory(reports_dir) -> dict:
    """The newest inventory.json that reads (a study's corrupt one does not take the appendix with it), with
    the targets of every study's inventory: a study that ran on some targets only (the object sweep's
    directory-vs-S3 pair) does not hide the others. A target's newest description wins."""
    found = sorted(Path(reports_dir).glob("*/inventory.json"), key=lambda p: p.stat().st_mtime)
    newest, targets = {}, {}
    for f in found:
        try:
            inv = read_json(f)
        except (Unreadable, OSError):
            continue
        if isinstance(inv.get("targets", []), list):
            newest = inv
            for t in inv.get("targets", []):
                if isinstance(t, dict) and "name" in t:
                    targets[t["name"]] = t
    return {**newest, "targets": list(targets.values())} if newest else {}
