"""Issue 57 (minor): results JSON never holds NaN or Infinity (summary.json, metrics.json, … must be strict JSON);
a figure that is not a finite number is written as null."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from storagebrief.core import results


def _strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


def test_results_json_writes_nan_and_infinities_as_null(tmp_path):
    obj = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": {"d": np.float32("nan"), "e": np.float64(2)},
           "f": pd.NA, "g": np.int64(3), "h": "nan"}
    results.write_json(tmp_path / "summary.json", obj)
    got = _strict((tmp_path / "summary.json").read_text())
    assert got == {"a": None, "b": [None, None, 1.5], "c": {"d": None, "e": 2.0}, "f": None, "g": 3, "h": "nan"}


def test_a_vector_search_summary_with_unmeasured_figures_is_strict_json(tmp_path):
    from types import SimpleNamespace
    from storagebrief.studies.vector_search import mlperf_tree
    frame = pd.DataFrame([dict(target="t", status="ok", repeat=1, queries=20, qps=float("nan"), latency_ms_mean=1.0,
                               latency_ms_p50=1.0, latency_ms_p95=2.0, latency_ms_p99=3.0, latency_ms_p999=4.0,
                               recall_at_k=0.9, run_id="r", started_at="2026-12-07T06:00:00Z",
                               bytes_per_query=0.0, reads_per_query_block=float("nan"), block_source="",
                               reads_per_query_engine=0.0, beam_width=1, search_list=10, threads=1, data="clustered",
                               device_iops_at_qd=1e5, qps_predicted=float("inf"), prediction_error=float("nan"),
                               regime="I/O-bound")])
    mlperf_tree.export(tmp_path, frame, SimpleNamespace(num_vectors=2000, dimension=16, max_point_s=1.0, k=10),
                       {"engine": "e"})
    assert len(list(tmp_path.rglob("storagebrief.json"))) == 1
    for f in tmp_path.rglob("*.json"):
        _strict(f.read_text())
