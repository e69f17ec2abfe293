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
