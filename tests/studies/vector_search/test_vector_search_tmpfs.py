"""Issue 57 defect 3: a tmpfs target has no block layer; its missing block-layer count is carried as missing (null,
said in words), and the run completes and is kept."""
from __future__ import annotations

import json
import math
import os
from types import SimpleNamespace

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.studies.vector_search import mlperf_tree
from conftest import run_study, tmpfs_at

TINY = studies.get("vector_search").tiny


def _row(**over):
    r = dict(queries=20, qps=500.0, latency_ms_mean=1.0, latency_ms_p95=2.0, latency_ms_p99=3.0, latency_ms_p999=4.0,
             recall_at_k=0.9, bytes_per_query=0.0, reads_per_query_block=None, block_source="",
             reads_per_query_engine=17.0, beam_width=1, search_list=10, threads=1, data="clustered",
             device_iops_at_qd=1e5, qps_predicted=5e3, prediction_error=-0.9, regime="I/O-bound")
    return SimpleNamespace(**{**r, **over})


def test_a_missing_block_layer_count_is_null_and_said_in_words():
    for missing in (None, float("nan")):
        s = mlperf_tree.point(_row(reads_per_query_block=missing), 1)
        assert s["reads_per_query_block"] is None and "not measured" in s["block_source"]
        json.dumps(s, allow_nan=False)
    s = mlperf_tree.point(_row(reads_per_query_block=3.0, block_source="cgroup", prediction_error=float("nan")), 1)
    assert s["reads_per_query_block"] == 3.0 and s["block_source"] == "cgroup"
    assert s["prediction_error"] is None


@pytest.fixture
def tmpfs_target(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs_at(tmp_path / "mem", "256m", "storagebrief-test-vec") as mnt:
        yield mnt


@pytest.mark.slow
def test_a_tmpfs_target_runs_to_the_end_and_is_kept(tmp_path, tmpfs_target):
    data = {"targets": [{"name": "mem", "path": str(tmpfs_target / "t")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "vector_search": TINY}
    out = run_study("vector-search", tmp_path, data)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "a bug" not in out.stderr and "Traceback" not in out.stderr
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(runs.status) == {"ok"} and runs.reads_per_query_block.isna().all()
    assert runs.block_source.str.startswith("not measured: no block device").all()
    ours = list((tmp_path / "out" / "mlperf" / "results" / "mem").rglob("storagebrief.json"))
    assert len(ours) == len(runs)
    for f in ours:
        s = json.loads(f.read_text(), parse_constant=lambda c: pytest.fail(f"{f} holds {c}"))["point"]
        assert s["reads_per_query_block"] is None and "not measured" in s["block_source"]
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in s.values())
    # the brief says so in words rather than only "do not agree"
    import IPython.display
    shown, saved = [], IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.extend(str(getattr(o, "data", o)) for o in objs)
    try:
        studies.get("vector_search").brief_section(tmp_path / "out", runs, ["mem"])
    finally:
        IPython.display.display = saved
    assert "The block layer&#x27;s reads were not measured" in "".join(shown) or \
        "The block layer's reads were not measured" in "".join(shown)
