"""The kv_cache brief section reads every result the study can leave (issue 44): prefill off (an empty side table),
every run failed, a side file missing, a partial study.json. Each failed on the code before the fix (fdbeda7)."""
from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest

from storagebrief.brief import inputs
from storagebrief.studies.kv_cache import metrics
from kv_tiny import STUDY, _section, result  # noqa: F401  (result: the tiny run, a fixture)


@pytest.fixture
def copy(result, tmp_path):
    dest = tmp_path / "kv_cache"
    shutil.copytree(result, dest)
    return dest


@pytest.mark.slow
def test_prefill_off_shows_the_section_and_says_prefill_was_not_measured(copy):
    assert (copy / "prefill.csv").read_text().strip() == ""           # the study's own empty table
    shown = _section(copy)
    assert "What ran" in shown and "Reload or recompute" in shown
    assert "This machine's prefill" in shown and "prefill.measure = false" in shown


def test_a_result_whose_runs_all_failed_shows_each_failure_and_its_cause(copy):
    runs = pd.read_csv(copy / "runs.csv")
    keep = {"workload", "model", "kv_bytes_per_token", "launcher", "clients", "users_per_client", "concurrency",
            "cpu_tier_bytes", "duration_s"}       # what a failed run's row holds (run._columns)
    study_cols = {c.name for c in metrics.COLUMNS} - keep
    runs = runs[[c for c in runs.columns if c not in study_cols]].assign(
        status="failed", failure_reason="kv client 1 died: killed by signal 9 (from outside the run)")
    runs.to_csv(copy / "runs.csv", index=False)
    (copy / "breakeven.csv").write_text((copy / "breakeven.csv").read_text().splitlines()[0] + "\n")
    shown = _section(copy)
    assert "What failed" in shown and "2 of 2 runs failed" in shown
    assert "killed by signal 9" in shown and "No KV-cache run measured" in shown
    assert "no break-even" not in shown                 # nothing measured: no claim about reload rates
    assert STUDY.headlines(inputs.read_study("kv_cache", copy).frame, ["a", "b"]) == []


@pytest.mark.parametrize("missing", ["breakeven.csv", "study.json", "latency.csv"])
def test_a_missing_side_file_is_named_not_read_as_nothing_measured(copy, missing):
    (copy / missing).unlink()
    shown = _section(copy)
    assert f"missing: {missing}" in shown, shown[:3000]
    assert "no break-even" not in shown and "?" not in re.sub(r"<[^>]+>", "", shown).replace("?)", "")


def test_a_partial_study_json_says_what_is_not_recorded_instead_of_question_marks(copy):
    study = json.loads((copy / "study.json").read_text())
    for key in ("clients", "duration_s", "turn_tokens", "write_block_mib", "contexts"):
        study.pop(key)
    (copy / "study.json").write_text(json.dumps(study))
    what_ran = next(x for x in _section(copy).split("\n") if "What ran" in x)
    assert "?" not in what_ran and "(not recorded)" in what_ran, what_ran


def test_an_answer_where_no_read_rate_would_do_is_said_not_raised(tmp_path):
    """The quick study at 9a57d23: on hdd-emulated the reload's latency alone exceeded the prefill for H200 and
    H100 SXM, so breakeven.csv left their needed rate empty, and page 1's KV-cache row raised (idxmax of all NA)."""
    from storagebrief.studies.kv_cache import brief
    row = {"target": "slow", "model": "llama3.1-8b", "how": "measured", "tflops": 600.0, "reload_read_gib_per_s": 0.107,
           "reload_latency_s": 0.276, "break_even_tokens": None, "within_tokens": 131072, "need_at_tokens": 8192,
           "read_gib_per_s_needed": None, "runs": 2, "stable": True, "answer": "not within 128K tokens"}
    pd.DataFrame([{**row, "accelerator": "h200"}, {**row, "accelerator": "h100-sxm"}]).to_csv(
        tmp_path / "breakeven.csv", index=False)
    frame = pd.DataFrame([{"run_id": "a", "target": "slow", "workload": "w", "model": "llama3.1-8b", "status": "ok"}])
    answer, = brief.answers(tmp_path, frame, ["slow"])
    assert answer["short"] == "H200, H100 SXM: not within 128K tokens"
    assert answer["note"] == ("reload measured at 0.107 GiB/s; H200 needs more than any rate (the latency alone "
                              "exceeds the prefill) at 8K tokens")
