"""brief/inputs.py, the brief's gate: what it refuses to read, and why (fast: no brief rendered)."""
from __future__ import annotations

import json

import pytest

from storagebrief.studies import REGISTRY
from test_brief_faults import GOOD, preprocess_rows, study_rows, write_study


def test_a_run_table_from_a_newer_storagebrief_could_not_be_read(tmp_path):
    from storagebrief.core import columns
    from storagebrief.brief import inputs
    d = write_study(tmp_path / "reports", "preprocess", preprocess_rows(), tmp_path)
    assert inputs.read_study("preprocess", d).ok
    (d / columns.SCHEMA_FILE).write_text(json.dumps({"schema_version": columns.RUNS_SCHEMA_VERSION + 1}))
    s = inputs.read_study("preprocess", d)
    assert not s.ok and "update storagebrief" in s.problem


@pytest.mark.parametrize("study", [k for k in REGISTRY if k not in GOOD])
def test_the_rows_a_fault_is_planted_in_pass_the_gate(tmp_path, study):
    """test_brief_faults plants each fault in study_rows(study): the fault must be the only reason."""
    from storagebrief.brief import inputs
    s = inputs.read_study(study, write_study(tmp_path / "reports", study, study_rows(study), tmp_path))
    assert s.ok, s.problem
