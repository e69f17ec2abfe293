"""Issue 57 (minor): an answers-history.csv row whose value is not a finite positive number (anyone may edit the
file) is ignored, so page 1 never shows "-5,000,000,000.0–inf"."""
from __future__ import annotations

import json

import pandas as pd

from storagebrief.kit import history
from storagebrief.studies.preprocess import brief as pre

INVENTORY = {"params_hash": "abc123", "package_git_commit": "6813f25", "hostname": "vm", "cpu_model": "AMD EPYC",
             "cpu_threads": 2, "memory_total_bytes": 1, "kernel": "6.1"}


def _study(reports, rates: list[float]) -> tuple:
    """reports/preprocess as one study leaves it: runs.csv (ingest at P = 1) and inventory.json."""
    d = reports / "preprocess"
    d.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{"target": "local", "sweep": "processes", "processes": 1, "repeat": i + 1,
                           "input_mb_per_s": v, "status": "ok"} for i, v in enumerate(rates)])
    frame.to_csv(d / "runs.csv", index=False)
    (d / "inventory.json").write_text(json.dumps(INVENTORY))
    return d, frame


def _render(reports, d, frame) -> dict:
    (a,) = pre.answers(d, frame, ["local"])
    history.record(reports, [{**a, "study": "preprocess"}], {"preprocess": d})
    return a


def test_a_history_row_that_is_not_a_finite_positive_number_is_ignored(tmp_path):
    reports = tmp_path / "reports"
    _render(reports, *_study(reports, [500.4, 524.8]))
    rows = pd.read_csv(history.location(reports), dtype=str)
    bad = []
    for i, v in enumerate(["-5000000000", "inf", "-inf", "nan", "0", "1e400", "x"]):
        bad.append({**rows.iloc[0].to_dict(), "run_id": f"forged{i:06d}", "value": v})
    pd.concat([rows, pd.DataFrame(bad)]).to_csv(history.location(reports), index=False)
    d, frame = _study(reports, [489.0, 499.6])
    assert history.earlier(d, pre.MEASURE, "local") == [[500.4, 524.8]]
    a = pre.answers(d, frame, ["local"])[0]
    assert a["short"] == "494.3 MB/s at P = 1 (489.0–524.8 over 4 runs)", a
    assert "inf" not in a["answer"] and "-5,000,000,000" not in a["answer"]


def test_only_finite_positive_values_are_recorded(tmp_path):
    reports = tmp_path / "reports"
    d, _ = _study(reports, [500.4])
    n = history.record(reports, [{"study": "preprocess", "target": "local",
                                  "measures": {pre.MEASURE: [500.4, float("inf"), float("nan"), -1.0, None]}}],
                       {"preprocess": d})
    assert n == 1 and pd.read_csv(history.location(reports)).value.tolist() == [500.4]
