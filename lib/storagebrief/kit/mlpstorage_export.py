"""`storagebrief export --mlperf DIR`: a submitter's folder of the MLPerf-named studies' runs, shaped as MLPerf
Storage's submission checker walks one (mlpstorage_py/submission_checker/loader.py):

    DIR/<division>/<submitter>/results/<system>/<training|checkpointing|kv_cache|vector_database>/…
    DIR/<division>/<submitter>/systems/<system>.yaml

One system per target; each `results/<system>/` is also one mlpstorage results directory, as the studies wrote it
(kit/mlpstorage_tree.py), so `mlpstorage reports reportgen --results-dir DIR/<division>/<submitter>/results/<system>`
reads it. Each `training/<model>/` gets an empty `datagen/`: the checker's layout has one for every training
workload (loader.py lists it and stops without it), and the emulate study records no datagen run (it writes its data
set itself, not with DLIO's datagen), so the checker finds none and says so. Where `make mlpstorage` has been run,
MLPerf's report generator is run on each system here and its decisions are written to DIR/verdicts.json
(kit/mlpstorage_verdict.py).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from ..core import results
from . import mlpstorage_tree as tree
from . import mlpstorage_verdict as verdict

STUDY_KIND = {"emulate": "training", "checkpoint": "checkpointing", "kv_cache": "kv_cache",
              "vector_search": "vector_database"}
DIVISIONS = ("open", "closed")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check(dest: Path, division: str, submitter: str) -> None:
    """Bad input, one line each, before any work."""
    if division not in DIVISIONS:
        raise ValueError(f"--division: {division!r}; allowed: {', '.join(DIVISIONS)}")
    if not NAME.match(submitter):
        raise ValueError(f"--submitter: {submitter!r}; allowed: letters, digits, '_', '.', '-' (up to 64), "
                         "starting with a letter or digit")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"--mlperf: {dest} exists and is not an empty folder; allowed: a new or empty folder")


def _system_yaml(inv: dict, target: str) -> str:
    info = tree.system_info(inv)
    t = next((x for x in inv.get("targets") or [] if x.get("name") == target), {})
    return yaml.safe_dump({"system_name": target, "submitter_tool": "storagebrief",
                           "storage": {"target": target, "path": t.get("path"), "filesystem": t.get("filesystem"),
                                       "device": t.get("device")},
                           "clients": {"num_hosts": info["num_hosts"], "total_memory_bytes": info["total_memory_bytes"],
                                       "hosts": info["hosts"]}}, sort_keys=False)


def export(reports: Path, dest: Path, division: str = "open", submitter: str = "storagebrief") -> dict:
    """Copy every study's MLPerf results tree into a submitter's folder; returns what went where and the verdicts."""
    check(dest, division, submitter)
    trees = []
    for study, kind in STUDY_KIND.items():
        base = Path(reports) / study / tree.TREE[0] / tree.TREE[1]
        for t in sorted(base.iterdir()) if base.is_dir() else []:
            if (t / kind).is_dir():
                trees.append((study, kind, t))
    if not trees:
        raise FileNotFoundError(f"no MLPerf results tree under {reports}/<study>/mlperf/results/: run the emulate, "
                                "checkpoint, kv-cache or vector-search study first")
    top = dest / division / submitter
    made: dict = {"folder": str(top), "systems": {}}
    for study, kind, t in trees:
        shutil.copytree(t / kind, top / "results" / t.name / kind, dirs_exist_ok=True)
        if kind == "training":
            for model in (top / "results" / t.name / kind).iterdir():
                (model / "datagen").mkdir(exist_ok=True)
        made["systems"].setdefault(t.name, {})[kind] = verdict.exported_runs(t / kind)
        sys_file = top / "systems" / f"{t.name}.yaml"
        if not sys_file.exists():
            try:
                inv = json.loads((Path(reports) / study / "inventory.json").read_text())
            except (OSError, ValueError):
                inv = {}
            sys_file.parent.mkdir(parents=True, exist_ok=True)
            results.atomic_write_text(sys_file, _system_yaml(inv, t.name))
    why = verdict.missing()
    doc: dict = {"not_run": why} if why else {"tool": f"MLPerf Storage mlpstorage_py (report generator) at "
                                                      f"{verdict.commit()}", "targets": {}}
    for system in ([] if why else made["systems"]):
        rd = top / "results" / system
        try:
            got = verdict.run(rd, log=dest / f"reportgen-{system}.txt")
        except verdict.ReportGenFailed as e:
            got = {"failed": str(e), "runs": []}
        doc["targets"][system] = verdict.counted(got, rd)
    results.write_json(dest / verdict.VERDICTS, doc)
    made["verdicts"] = doc
    return made


def summary_lines(made: dict) -> list[str]:
    out = [f"wrote {made['folder']}"]
    for system, kinds in made["systems"].items():
        out.append(f"  system '{system}': " + ", ".join(f"{k} {n} runs" for k, n in kinds.items()))
    doc = made["verdicts"]
    if doc.get("not_run"):
        out.append(f"MLPerf's report generator not run: {doc['not_run']}")
    for system, got in doc.get("targets", {}).items():
        if got.get("failed"):
            out.append(f"  '{system}': {got['failed']}")
            continue
        counts = {c: sum(r["category"] == c for r in got["runs"]) for c in ("CLOSED", "OPEN", "INVALID")}
        out.append(f"  MLPerf's report generator on '{system}': read {len(got['runs'])} of {got['exported_runs']} "
                   f"runs: " + ", ".join(f"{c} {n}" for c, n in counts.items() if n))
    return out
