"""kit.runs: the runs that measured, and metrics.json's common part."""
from __future__ import annotations

import pandas as pd

from storagebrief.kit.runs import metrics, ok_runs


def _frame():
    return pd.DataFrame({"target": ["a", "a", "b", "b"], "workload": ["w", "v", "w", "w"],
                         "status": ["ok", "failed", "ok", None], "x": [1.0, 9.0, 3.0, 5.0]})


def test_ok_runs_keeps_ok_and_unmarked_rows_and_a_schema_1_table_whole():
    assert ok_runs(_frame()).x.tolist() == [1.0, 3.0, 5.0]
    old = _frame().drop(columns="status")
    assert len(ok_runs(old)) == 4


def test_metrics_counts_runs_groups_ok_runs_and_nests_by_a_list():
    def heads(frame, names):
        return [{"id": f"x:{names[0]}_vs_{names[1]}", "delta_percent": 10.0}]
    out = metrics(_frame(), ["a", "b"], heads, per_target=lambda g: {"x_mean": float(g.x.mean())})
    assert out["runs"] == 4 and out["failed_runs"] == 1
    assert out["a"] == {"x_mean": 1.0} and out["b"] == {"x_mean": 4.0}     # the failed run is left out
    nested = metrics(_frame(), ["a", "b"], heads, per_target=lambda g: {"n": len(g)}, by=["workload", "target"])
    assert nested["w"] == {"a": {"n": 1}, "b": {"n": 2}} and "v" not in nested
    assert out["headlines"] == {"x:a_vs_b": 10.0}
