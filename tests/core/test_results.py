"""core/results.py: atomic rows, the schema of runs.csv."""
import os
import time

import pandas as pd
import pytest

from storagebrief.core import cache, monitor, results, targets, config
from conftest import needs_drop_caches


def test_run_table_atomic_and_schema(tmp_path):
    table = results.RunTable(tmp_path / "runs.csv")
    row = {"study": "s", "run_id": "r1", "target": "t", "repeat": 1, "started_at": results.utc_now(),
           "cache_method": "drop_caches", "x_s": 1.5}
    table.append(row)
    table.append({**row, "run_id": "r2", "x_s": 2.5})
    frame = results.read_runs(tmp_path / "runs.csv", required=("x_s",))
    assert list(frame.run_id) == ["r1", "r2"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    with pytest.raises(results.SchemaError):
        table.append({"study": "s"})
    with pytest.raises(results.SchemaError):
        results.read_runs(tmp_path / "runs.csv", required=("missing_col",))


def test_a_run_table_from_a_newer_storagebrief_is_refused(tmp_path):
    from storagebrief.core import columns
    runs = tmp_path / "runs.csv"
    runs.write_text("study,run_id,target,repeat,started_at,cache_method\ns,r,t,0,now,none\n")
    assert results.check_schema_version(runs) == 1            # no sidecar: written before it existed
    (tmp_path / columns.SCHEMA_FILE).write_text('{"schema_version": %d}' % (columns.RUNS_SCHEMA_VERSION + 1))
    with pytest.raises(results.SchemaError, match="update storagebrief"):
        results.read_runs(runs)
    (tmp_path / columns.SCHEMA_FILE).write_text('{"schema_version": "two"}')
    with pytest.raises(results.SchemaError, match="not a positive whole number"):
        results.read_runs(runs)
