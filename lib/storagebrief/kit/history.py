"""Earlier studies of the same knobs on this machine (issue 48): a page-1 range built from one study's repeats
held neither the next study's answer nor this VM's drift (ingest 512.6 (500.4–524.8) then 494.3 (489.0–499.6)
23 minutes apart). Each brief render records the values behind its page-1 answers in
`<reports>/answers-history.csv`; a later brief of another study with the same parameters (params hash) and code
(storagebrief's commit) on the same machine (host, CPU, threads, memory, kernel) shows the range over all of them.

The file is tidy, one row per value: recorded_utc, study, run_id (sha256 of the study's runs.csv, 12 hex: a
re-render of the same results adds nothing), params_hash, code, machine, measure, target, value. It is not a DVC output:
`dvc repro` leaves it; delete it to forget earlier studies."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import time
from pathlib import Path

FILE = "answers-history.csv"
COLUMNS = ["recorded_utc", "study", "run_id", "params_hash", "code", "machine", "measure", "target", "value"]
MACHINE_KEYS = ("hostname", "cpu_model", "cpu_threads", "memory_total_bytes", "kernel")


def identity(study_dir) -> dict | None:
    """{run_id, params_hash, code, machine} of a study's results folder, or None without runs.csv or inventory.json."""
    if study_dir is None:
        return None
    d = Path(study_dir)
    try:
        run_id = hashlib.sha256((d / "runs.csv").read_bytes()).hexdigest()[:12]
        inv = json.loads((d / "inventory.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(inv, dict) or not inv.get("params_hash"):
        return None
    machine = "|".join(str(inv.get(k, "")) for k in MACHINE_KEYS)
    return {"run_id": run_id, "params_hash": str(inv["params_hash"]), "code": str(inv.get("package_git_commit", "")),
            "machine": machine}


def _rows(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError:
        return []
    rows = list(csv.DictReader(io.StringIO(text)))
    return [r for r in rows if set(COLUMNS) <= set(r)]          # a hand-edited or foreign file: its odd rows ignored


def earlier(study_dir, measure: str, target: str) -> list[list[float]]:
    """The values of `measure` on `target` from every other recorded study of the same parameters and code on the
    same machine as `study_dir`'s, one list per study (oldest first); [] when none or nothing can be matched."""
    me = identity(study_dir)
    if me is None:
        return []
    by_run: dict[str, list[float]] = {}
    for r in _rows(Path(study_dir).parent / FILE):
        same = (r["measure"], r["target"], r["params_hash"], r["code"], r["machine"]) == (
            measure, target, me["params_hash"], me["code"], me["machine"])
        if not same or r["run_id"] == me["run_id"]:
            continue
        v = _value(r["value"])
        if v is not None:
            by_run.setdefault(r["run_id"], []).append(v)
    return list(by_run.values())


def _value(text) -> float | None:
    """A recorded value, or None when it is not a finite positive number: the file is anyone's to edit, and a
    row of -5e9 or inf must not stretch page 1's range to "-5,000,000,000.0–inf"."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def record(reports_dir, answers: list[dict], study_dirs: dict[str, Path]) -> int:
    """Append the values behind page-1 answers (each answer's `measures`: {measure: values}, its `study` a key of
    study_dirs) not recorded yet; returns how many rows were added."""
    path = Path(reports_dir) / FILE
    have = _rows(path)
    seen = {(r["run_id"], r["measure"], r["target"]) for r in have}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    new = []
    for a in answers:
        me = identity(study_dirs.get(a.get("study")))
        if me is None:
            continue
        for measure, values in (a.get("measures") or {}).items():
            key = (me["run_id"], measure, str(a["target"]))
            if key in seen:
                continue
            seen.add(key)
            new += [{"recorded_utc": now, "study": a["study"], **me, "measure": measure, "target": str(a["target"]),
                     "value": repr(float(v))} for v in values if _value(v) is not None]
    if new:
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows([{k: r[k] for k in COLUMNS} for r in have] + new)
        from ..core.results import atomic_write_text
        atomic_write_text(path, out.getvalue())
    return len(new)
