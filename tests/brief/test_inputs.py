"""brief/inputs.py, the brief's gate: what it refuses to read, and why (fast: no brief rendered)."""
from __future__ import annotations

import json

from test_brief_faults import preprocess_rows, write_study


def test_a_run_table_from_a_newer_storagebrief_could_not_be_read(tmp_path):
    from storagebrief.core import columns
    from storagebrief.brief import inputs
    d = write_study(tmp_path / "reports", "preprocess", preprocess_rows(), tmp_path)
    assert inputs.read_study("preprocess", d).ok
    (d / columns.SCHEMA_FILE).write_text(json.dumps({"schema_version": columns.RUNS_SCHEMA_VERSION + 1}))
    s = inputs.read_study("preprocess", d)
    assert not s.ok and "update storagebrief" in s.problem
