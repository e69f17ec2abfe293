"""The KV tool file of MLPerf's results tree (kvcache_results_<stamp>.json) speaks MLPerf's own output: every key
path under a run's `summary` is one MLPerf's KV-cache tool writes (the fixture lists them, derived from its code at upstream commit 284ce72: the `summary`
dict of kv_cache/benchmark.py:1422-1466 and `cache_stats` of kv_cache/cache.py:953-1024), computed with MLPerf's
arithmetic (bytes ÷ the measured wait); this study's own figures sit apart under names MLPerf does not use."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from storagebrief.studies.kv_cache import metrics

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "mlperf_kv_summary_keys.json").read_text())
GIB = 2 ** 30


def _paths(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        p = f"{prefix}{k}"
        out += _paths(v, p + ".") if isinstance(v, dict) else [p]
    return out


def _frame() -> pd.DataFrame:
    return pd.DataFrame([{
        "run_id": "kv_cache-w-t-r1", "target": "t", "workload": "w", "model": "llama3.1-8b", "status": "ok",
        "repeat": 1, "duration_s": 60.0, "elapsed_time_s": 61.5, "wall_s": 63.0, "requests": 1234,
        "users_per_client": 8, "clients": 2, "storage_read_bytes": 13 * GIB, "storage_write_bytes": 4 * GIB,
        "mlperf_read_bytes": 12 * GIB, "mlperf_write_bytes": 3 * GIB,
        "mlperf_read_gib_per_s": 12 / 61.5, "mlperf_write_gib_per_s": 3 / 61.5, "mlperf_device_read_p95_ms": 9.0,
        "mlperf_device_write_p95_ms": 20.0, "honest_read_gib_per_s": 0.3, "honest_write_gib_per_s": 0.07,
        "io_busy_s": 40.0, "overstatement_ratio": 40 / 61.5, "storage_tokens_per_elapsed_s": 500.0}])


def test_every_mlperf_key_path_is_one_mlperfs_tool_writes():
    run, = metrics.mlperf_summary(_frame())["runs"].values()
    ours = ["summary." + p for p in _paths(run["summary"])]
    assert ours and set(ours) <= set(FIXTURE["paths"]), set(ours) - set(FIXTURE["paths"])
    for must in ("summary.cache_stats.tier_storage_read_bandwidth_gbps",
                 "summary.cache_stats.tier_storage_write_bandwidth_gbps", "summary.elapsed_time", "summary.total_requests"):
        assert must in ours


def test_device_p95s_measured_another_way_stay_out_of_mlperfs_keys():
    """MLPerf's storage_*_device_p95_ms are one P95 of every request (its read span np.load); ours are the largest of
    the clients' P95s of the read() calls / the fsync: another meaning, so under our own names only."""
    run, = metrics.mlperf_summary(_frame())["runs"].values()
    assert not {"storage_read_device_p95_ms", "storage_write_device_p95_ms"} & set(run["summary"]["cache_stats"])
    assert run["storagebrief"]["read_device_p95_ms_max_of_clients"] == 9.0
    assert run["storagebrief"]["write_device_p95_ms_max_of_clients"] == 20.0


def test_mlperfs_arithmetic_bytes_over_the_measured_wait():
    s = next(iter(metrics.mlperf_summary(_frame())["runs"].values()))["summary"]
    assert s["elapsed_time"] == 61.5 and s["total_requests"] == 1234
    assert s["cache_stats"]["tier_storage_read_bandwidth_gbps"] == pytest.approx(12 / 61.5)
    assert s["cache_stats"]["tier_storage_kv_bytes_written_gb"] == pytest.approx(3.0)      # to the snapshot
    assert s["requests_per_second"] == pytest.approx(1234 / 61.5)


def test_no_key_of_ours_shares_a_name_with_an_mlperf_key():
    mlperf_names = {p.rsplit(".", 1)[-1] for p in FIXTURE["paths"]}
    out = metrics.mlperf_summary(_frame())
    run, = out["runs"].values()
    ours = {p.rsplit(".", 1)[-1] for p in _paths(run["storagebrief"])} | {k for k in run if k != "summary"}
    assert not ours & mlperf_names, ours & mlperf_names
    assert not {c.name for c in metrics.COLUMNS} & mlperf_names


def _call(op, start, end, user=0, nbytes=GIB):
    from storagebrief.studies.kv_cache.client import Call
    return Call(op, "storage", start, end, nbytes, 1, 0.0, 0, user)


def test_the_snapshot_comes_after_joining_each_busy_worker_for_up_to_2_s():
    # deadline 10: user 0 busy until 11 (joined: 11), user 1 until 20 (joined for 2 s more: 13), user 2 done
    recs = [_call("read", 0, 5, 2), _call("read", 9, 11, 0), _call("read", 9.5, 20, 1)]
    assert metrics.snapshot_time(recs, 10.0) == 13.0
    assert metrics.snapshot_time(recs[:1], 10.0) == 10.0


def test_mlperfs_bytes_stop_at_the_snapshot_reads_from_their_start_writes_once_done():
    recs = [_call("read", 0, 5, 2), _call("write", 9, 10.5, 0), _call("read", 10.8, 11, 0),
            _call("read", 9.5, 20, 1), _call("read", 14, 20, 1), _call("write", 12, 19, 1)]
    spec = {"duration_s": 10.0}
    row = metrics.run_row(spec, {"t_start": 0.0, "ranks": [{"rank": 0, "records": recs, "cpu_s": 0.1,
                                                              "elapsed_s": 10.0}]})
    assert row["snapshot_s"] == 13.0
    assert row["mlperf_read_bytes"] == 3 * GIB and row["storage_read_bytes"] == 4 * GIB
    assert row["mlperf_write_bytes"] == GIB and row["storage_write_bytes"] == 2 * GIB
    assert row["mlperf_read_gib_per_s"] == pytest.approx(0.3)
