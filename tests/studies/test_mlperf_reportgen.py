"""Issue 60: MLPerf Storage's own report generator (mlpstorage_py at the commit `make mlpstorage` pins, run in its
own Python 3.12 environment) reads every run the four MLPerf-named studies export at their tiny settings: none
skipped, no "Unsupported", no directory error, a category for each; and `storagebrief export --mlperf` hands the
four kinds to it in one submitter's folder. Skipped, with the reason, only where `make mlpstorage` has not run."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import MLPERF_STUDIES, run_mlperf_tiny
from storagebrief.core import reruns
from storagebrief.kit import mlpstorage_export
from storagebrief.kit import mlpstorage_verdict as verdict

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
CATEGORIES = ("CLOSED", "OPEN", "INVALID")


def crashed(got: dict) -> list[str]:
    """MLPerf's issues that say one of its checks raised ("Check X failed with error: ..."), not a verdict."""
    return [i["text"] for r in got["runs"] + got.get("workloads", []) for i in r["issues"]
            if "failed with error" in i["text"]]


def test_mlperf_report_generator_reads_every_tiny_run(tmp_path):
    why = verdict.missing()
    if why:
        pytest.skip(why)
    reports = run_mlperf_tiny(tmp_path)          # side by side, a target each: seconds, mostly waiting
    for s, (_, kind) in MLPERF_STUDIES.items():
        out = reports / s
        doc = verdict.load(out)
        assert doc and not doc.get("not_run"), s
        got = doc["targets"][s]
        frame = pd.read_csv(out / "runs.csv")
        ok = reruns.kept(frame[frame.status == "ok"])     # a run a disturbed run was re-run for is not exported
        assert got["directory"]["valid"] and not got["directory"]["errors"], (s, got["directory"])
        assert len(got["runs"]) == got["exported_runs"] == len(ok) > 0, s          # every run read
        assert not got["processing_errors"], (s, got["processing_errors"])        # none skipped
        assert {r["benchmark_type"] for r in got["runs"]} == {kind}
        assert all(r["category"] in CATEGORIES for r in got["runs"]), s
        assert not crashed(got), (s, crashed(got))     # a check of MLPerf's that stopped on our files: no verdict
        assert sorted(r["storagebrief_run_id"] for r in got["runs"]) == sorted(ok.run_id), s
        said = (out / "mlperf" / f"reportgen-{s}.txt").read_text()
        assert "Unsupported" not in said and "Skipping" not in said, s
        assert all(r["run_id"] in said for r in got["runs"])       # the generator printed each run (its category)
    made = mlpstorage_export.export(reports, tmp_path / "submission")      # what `storagebrief export --mlperf` does
    sub = json.loads((tmp_path / "submission" / "verdicts.json").read_text())["targets"]
    assert {s: {r["benchmark_type"] for r in sub[s]["runs"]} for s in MLPERF_STUDIES} == \
        {s: {k} for s, (_, k) in MLPERF_STUDIES.items()}
    assert all(len(got["runs"]) == got["exported_runs"] and not got["processing_errors"] for got in sub.values())
    assert not [crashed(got) for got in sub.values() if crashed(got)]
    assert any("MLPerf's report generator on 'emulate': read" in line for line in mlpstorage_export.summary_lines(made))
