"""MLPerf's verdict on an exported run, by MLPerf's code: mlpstorage's report generator (the v3.0 code line, the
commit `make mlpstorage` pins) run in its own Python 3.12 environment on each target's results directory of a study
(kit/mlpstorage_tree.py), through kit/mlpstorage_driver.py. Nothing of MLPerf's is imported here.

`record(out_dir)` writes `<out>/mlperf/verdicts.json`: per target, the generator's directory validation, each run's
category (CLOSED / OPEN / INVALID) with MLPerf's issues, each workload's, its processing errors, and the storagebrief
run id of each run folder. Where `make mlpstorage` has not been run it records why instead (`not_run`), and the
brief says so: no verdict is made up.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..core import results
from ..core.causes import EnvironmentFailure, untrusted
from . import mlpstorage_tree as tree

REPO = Path(__file__).resolve().parents[3]
HOME_ENV = "STORAGEBRIEF_MLPSTORAGE"
DRIVER = Path(__file__).with_name("mlpstorage_driver.py")
VERDICTS = "verdicts.json"
TIMEOUT_S = 120
# MLPerf's reasons that come from its own code, not from the run: the reader is told so (docs/mlperf-tools.md)
ITS_OWN = {"check_num_files_train failed with error": (
    "MLPerf's generator drops the system information when it reads a run from a complete metadata file "
    "(`_from_metadata` in its `rules/models.py`), so its data-set size check fails on every such training run, "
    "MLPerf's own included; whether the data set meets MLPerf's 5 × host-memory rule is this study's own check")}


class ReportGenFailed(EnvironmentFailure):
    """MLPerf's report generator did not finish (its own last words): one line."""


def home() -> Path:
    return Path(os.environ.get(HOME_ENV) or REPO / ".mlpstorage")


def missing() -> str | None:
    """Why MLPerf's report generator cannot run here, or None when it can."""
    h = home()
    python = h / "venv" / "bin" / "python"
    try:
        if not python.exists() or not (h / "mlpstorage_py" / "report_generator.py").is_file():
            return f"MLPerf's mlpstorage is not installed in {h}: run `make mlpstorage` (Python 3.12, PyPI once)"
        runnable = os.access(python, os.X_OK)
    except OSError:         # its venv's Python links into a folder this user may not enter (root's 0700 home)
        runnable = False
    if not runnable:
        return (f"MLPerf's mlpstorage in {h} cannot be run by this user (its Python, {python}, links to a file "
                "this user may not execute): install it as this user (make mlpstorage) to get MLPerf's verdict")
    return None


def commit() -> str:
    try:
        return (home() / "COMMIT").read_text().split()[0]
    except (OSError, IndexError):
        return "unknown"


def run(results_dir: Path, log: Path | None = None) -> dict:
    """The generator's decisions on one results directory (the driver's JSON); its printed report goes to `log`."""
    why = missing()
    if why:
        raise ReportGenFailed(why)
    h = home()
    out = Path(results_dir) / ".verdict.json"
    env = {**os.environ, "PYTHONPATH": str(h), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        p = subprocess.run([str(h / "venv" / "bin" / "python"), str(DRIVER), str(results_dir), str(out)], env=env,
                           capture_output=True, text=True, timeout=TIMEOUT_S, cwd=str(results_dir))
    except subprocess.TimeoutExpired:
        raise ReportGenFailed(f"MLPerf's report generator ran past {TIMEOUT_S} s on {results_dir}") from None
    except OSError as exc:
        raise ReportGenFailed(f"MLPerf's report generator could not be started ({h / 'venv' / 'bin' / 'python'}: "
                              f"{exc.strerror})") from None
    if log is not None:
        results.atomic_write_text(log, p.stdout + p.stderr)
    try:
        got = json.loads(out.read_text())
    except (OSError, ValueError):
        last = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        raise ReportGenFailed(f"MLPerf's report generator failed on {results_dir}: {untrusted(last[0], 200)}") from None
    finally:
        out.unlink(missing_ok=True)
    for r in got["runs"]:
        try:
            r["storagebrief_run_id"] = json.loads((Path(results_dir) / r["folder"] / tree.OURS).read_text())["run_id"]
        except (OSError, ValueError, KeyError):
            r["storagebrief_run_id"] = None
    return got


def exported_runs(results_dir: Path) -> int:
    """Run folders in a results directory: those holding exactly one *_metadata.json."""
    return sum(1 for d, _, files in os.walk(results_dir) if sum(f.endswith("_metadata.json") for f in files) == 1)


def counted(got: dict, results_dir: Path) -> dict:
    """The generator's decisions with the run folders exported there, in all and per benchmark type."""
    got["exported_runs"] = exported_runs(results_dir)
    got["exported"] = {k: exported_runs(Path(results_dir) / k) for k in tree.KINDS if (Path(results_dir) / k).is_dir()}
    return got


def record(out_dir: Path) -> dict:
    """verdicts.json for every target's results directory of a study's export; returns what it wrote."""
    base = Path(out_dir).joinpath(*tree.TREE)
    targets = sorted(d for d in base.iterdir() if d.is_dir()) if base.is_dir() else []
    why = missing()
    doc: dict = {"tool": f"MLPerf Storage mlpstorage_py (report generator) at {commit()}",
                 "python": sys.version.split()[0], "targets": {}}
    if why:
        doc = {"not_run": why, "targets": {}}
    else:
        for t in targets:
            try:
                got = run(t, log=Path(out_dir) / "mlperf" / f"reportgen-{t.name}.txt")
            except ReportGenFailed as e:        # a dependency's failure: one line in the file and the brief
                got = {"failed": str(e), "runs": []}
            doc["targets"][t.name] = counted(got, t)
    base.parent.mkdir(parents=True, exist_ok=True)        # always: the brief stage reads it
    results.write_json(base.parent / VERDICTS, doc)
    return doc


def load(out_dir: Path) -> dict | None:
    try:
        return json.loads((Path(out_dir) / "mlperf" / VERDICTS).read_text())
    except (OSError, ValueError):
        return None


def lines(out_dir: Path, kind: str) -> list[str]:
    """The brief's words: per target, what MLPerf's report generator made of the study's runs of `kind`."""
    doc = load(out_dir)
    if doc is None:
        return []
    if doc.get("not_run"):
        return [f"MLPerf's report generator was not run on these results: {doc['not_run']}."]
    out = []
    for t, got in doc["targets"].items():
        if got.get("failed"):
            out.append(f"MLPerf's report generator on target '{t}': {got['failed']}.")
            continue
        runs = [r for r in got["runs"] if r["benchmark_type"] == kind]
        if not runs:
            continue
        counts = {c: sum(r["category"] == c for r in runs) for c in ("CLOSED", "OPEN", "INVALID")}
        reasons: dict[str, int] = {}
        for r in runs:
            for i in r["issues"]:
                if i["category"] != "CLOSED":
                    reasons[i["text"]] = reasons.get(i["text"], 0) + 1
        said = "; ".join(f"`{text.replace('`', '')}` ({n} of {len(runs)})" for text, n in reasons.items())
        tally = ", ".join(f"{c} {n}" for c, n in counts.items() if n)
        own = [why for text, why in ITS_OWN.items() if any(text in r for r in reasons)]
        out.append(f"MLPerf's report generator (mlpstorage at {doc['tool'].split(' at ')[-1][:7]}) on target '{t}': read "
                   f"{len(runs)} of {got['exported'].get(kind, 0)} exported runs: {tally}"
                   + (f". Its reasons: {said}" if said else "") + "." + "".join(f" ({w}.)" for w in own))
    return out


def paragraph(out_dir: Path, kind: str) -> str | None:
    """The brief's paragraph for a study's chapter, or None where the study wrote no verdicts.json."""
    said = lines(out_dir, kind)
    if not said:
        return None
    return ("**What MLPerf's own report generator made of these runs** (each run exported as mlpstorage writes it, "
            "read by MLPerf's code; docs/mlperf-tools.md says where its rules and ours differ). " + " ".join(said))
