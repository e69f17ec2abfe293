"""MLPerf Storage's own tools on the MLPerf-named studies' results: what MLPerf's code makes of each run.

    make mlpstorage            # mlpstorage_py at the pinned commit + its own Python 3.12 venv, in .mlpstorage/
    .venv/bin/python benchmarks/mlperf_reportgen.py [--reports reports] [--tiny --work DIR]

--reports: a results folder holding the studies' folders (emulate, checkpoint, kv_cache, vector_search), each with
its MLPerf results tree under mlperf/results/<target>/ (what the studies write; docs/mlperf-tools.md).
--tiny: first runs those four studies at their tiny settings (tests/conftest.py TINY) on one target under --work,
side by side, and reads their results instead (about 20 s here).

Per study and target it runs, in MLPerf's environment: (1) the command as a submitter types it,
`mlpstorage reports reportgen --results-dir DIR`, and prints how it ended; (2) the same report generator through
lib/storagebrief/kit/mlpstorage_driver.py, and prints each run's category (CLOSED / OPEN / INVALID) with MLPerf's
reasons and each workload's; (3) the checks: every exported run read, none skipped, no "Unsupported", a category for
each. Then it makes the submitter's folder (`storagebrief export --mlperf`) and runs MLPerf's submission checker on it
(`python -m mlpstorage_py.submission_checker.main --input DIR --version v3.0 --submitters storagebrief`), printing its
verdict and its error lines. Exit status 1 when a check of (3) fails. No network: PyPI was used by `make mlpstorage`.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

from storagebrief.kit import mlpstorage_export as export  # noqa: E402
from storagebrief.kit import mlpstorage_tree as tree  # noqa: E402
from storagebrief.kit import mlpstorage_verdict as verdict  # noqa: E402
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CLI_BUG = ("MLPerf's CLI bug, not ours: cli_parser.py:119 reads args.file, which the `reports` parser does not "
           "define; no argument avoids it (docs/mlperf-tools.md). The report generator below is the one main() calls")
# Whose each line of the submission checker's is, at the pinned commit; docs/mlperf-tools.md names MLPerf's lines of
# code. Pattern -> whose; the first match wins.
WHOSE = {
    r"/(kv_cache|vector_database)/": "MLPerf's limit: its checker knows training and checkpointing only "
                                     "(loader.py:125, main.py:87)",
    r"closed_checkpoint_parameters in Check": "MLPerf's bug: checkpointing_checks.py:273 comes before its mode check",
    r"Dataset parameters not found|Record length is 0": "MLPerf's bug: loader.py:120 reads another folder's metadata",
    r"num_files_eval|run_data_matches_datasize": "ours: no num_files_eval (the study does not evaluate); "
                                                 "MLPerf's check raises on it (training_checks.py:208)",
    r"No datagen files found|/datagen\b": "ours: the emulate study records no datagen run",
    r"training_run\\?\.std|dlio\\?\.log|output\\?\.json|per_epoch_stats|dlio_config|'end'":
        "ours: storagebrief does not run DLIO (its logs, hydra.yaml, its end time)",
    r"data_dir not set": "ours: the runs do not record the data set's folder",
}


def whose(line: str) -> str:
    return next((w for pat, w in WHOSE.items() if re.search(pat, line)), "")


def tiny(work: Path) -> Path:
    """The four studies at the suite's tiny settings, side by side, a target each under work; returns the results
    folder."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import run_mlperf_tiny  # the suite's tiny settings, one source
    try:
        return run_mlperf_tiny(work, timeout=600)
    except AssertionError as e:
        raise SystemExit(f"a tiny study failed: {str(e).strip().splitlines()[-1:]}") from None


def cli_attempt(results_dir: Path) -> str:
    """How `mlpstorage reports reportgen --results-dir DIR` ended: its exit status and last line."""
    h = verdict.home()
    p = subprocess.run([str(h / "venv" / "bin" / "python"), "-m", "mlpstorage_py.main", "reports", "reportgen",
                        "--results-dir", str(results_dir)], env={**os.environ, "PYTHONPATH": str(h)},
                       capture_output=True, text=True, timeout=120, cwd=str(results_dir))
    last = [ln for ln in (p.stdout + p.stderr).splitlines() if "ERROR" in ln][:1] or (p.stdout + p.stderr).splitlines()[-1:]
    return f"exit {p.returncode}: " + (ANSI.sub("", last[0]).strip() if last else "")


def report(study: str, target: Path) -> list[str]:
    """Print MLPerf's decisions on one results directory; returns the failed checks."""
    log = Path(tempfile.mkdtemp()) / "reportgen.txt"
    got = verdict.run(target, log=log)
    text = log.read_text()
    exported = verdict.exported_runs(target)
    print(f"\n== {study} / {target.name}: {exported} exported runs")
    ended = cli_attempt(target)
    print(f"   `mlpstorage reports reportgen`: {ended}")
    if "has no attribute 'file'" in ended:
        print(f"      ({CLI_BUG})")
    d = got["directory"]
    print(f"   directory validation: {'valid' if d['valid'] else 'INVALID'}, {d['found_runs']} runs, "
          f"{len(d['errors'])} errors, {len(d['warnings'])} warnings")
    for r in got["runs"]:
        reasons = [i["text"] for i in r["issues"] if i["category"] != "CLOSED"]
        print(f"   {r['category']:7s} {r['run_id']}  ({r['storagebrief_run_id']})")
        for text_ in reasons:
            print(f"           {text_}")
    for w in got["workloads"]:
        print(f"   workload {w['model']} / {w['accelerator']}: {w['category']} "
              + "; ".join(i["text"] for i in w["issues"] if i["category"] != "CLOSED"))
    failed = []
    if len(got["runs"]) != exported:
        failed.append(f"{study}/{target.name}: read {len(got['runs'])} of {exported} runs")
    if got["processing_errors"]:
        failed.append(f"{study}/{target.name}: processing errors {got['processing_errors']}")
    for word in ("Unsupported", "Skipping"):
        if word in text:
            failed.append(f"{study}/{target.name}: the generator's report says {word!r}")
    if d["errors"]:
        failed.append(f"{study}/{target.name}: directory errors {d['errors']}")
    if any(r["category"] not in ("CLOSED", "OPEN", "INVALID") for r in got["runs"]):
        failed.append(f"{study}/{target.name}: a run without a category")
    return failed


def submission_check(reports: Path, work: Path) -> None:
    dest = work / "submission"
    made = export.export(reports, dest)
    print("\n" + "\n".join(export.summary_lines(made)))
    h = verdict.home()
    p = subprocess.run([str(h / "venv" / "bin" / "python"), "-m", "mlpstorage_py.submission_checker.main",
                        "--input", str(dest), "--version", "v3.0", "--submitters", "storagebrief",
                        "--csv", str(work / "submission_summary.csv")], env={**os.environ, "PYTHONPATH": str(h)},
                       capture_output=True, text=True, timeout=120, cwd=str(work))
    lines = (p.stdout + p.stderr).splitlines()
    said = [ln.split("] ", 1)[-1] for ln in lines
            if any(w in ln for w in (" ERROR]", " WARNING]", "SUMMARY", "Error:", "checks passed for", "failed for"))]
    print(f"\n== MLPerf's submission checker on {dest}: exit {p.returncode}")
    for ln in dict.fromkeys(said):
        print(f"   {ln}")
    counted: dict = {}
    for ln in dict.fromkeys(said):
        if whose(ln):
            counted[whose(ln)] = counted.get(whose(ln), 0) + 1
    print("   whose these lines are:" if counted else "")
    for w, n in counted.items():
        print(f"   {n:4d} lines: {w}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", default=str(REPO / "reports"))
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--work", default=str(REPO / "data" / "benchmarks" / "mlperf_reportgen"))
    a = ap.parse_args()
    why = verdict.missing()
    if why:
        raise SystemExit(why)
    work = Path(a.work).resolve()
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"--work: {work} is not empty; allowed: a new or empty folder")
    work.mkdir(parents=True, exist_ok=True)
    reports = tiny(work) if a.tiny else Path(a.reports).resolve()
    print(f"MLPerf Storage mlpstorage_py at {verdict.commit()} (Python 3.12, {verdict.home()})")
    failed = []
    for study, kind in export.STUDY_KIND.items():
        base = reports / study / tree.TREE[0] / tree.TREE[1]
        for t in sorted(base.iterdir()) if base.is_dir() else []:
            if (t / kind).is_dir():
                failed += report(study, t)
    submission_check(reports, work)
    print("\nchecks: " + ("every exported run read, none skipped, no 'Unsupported', a category for each"
                          if not failed else "FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
