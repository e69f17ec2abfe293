"""The KV tool's own output file, as this study writes it per run (mlperf_tree: `kvcache_results_<stamp>.json`),
read by a reader written for the tool's output: it indexes the JSON as MLPerf Storage's kv-cache.py writes it
(upstream 284ce72: cli.py:499-500 dumps `results`; benchmark.py:1466 puts the summary under `summary`, cache.py's
get_stats under `summary.cache_stats`; the key paths its readers index are utils/json_to_xlsx.py's and
benchmark.py's _print_summary's). MLPerf's keys carry MLPerf's accounting: a CPU-tier demotion to storage counts
in no storage write figure (cache.py:380-425 adds no bytes; only allocate_cache, cache.py:723, does); ours,
demotions included, sits in storagebrief.json."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from storagebrief.studies.kv_cache import metrics, mlperf_tree
from storagebrief.studies.kv_cache.client import Call

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "mlperf_kv_summary_keys.json").read_text())
GIB = 2 ** 30


def tool_reader(path: Path) -> dict:
    """What a reader of the tool's file takes from it, indexed as the tool writes it (no fallbacks for these)."""
    results = json.loads(path.read_text())
    summary = results["summary"]
    cache_stats = summary["cache_stats"]
    return {"requests": summary["total_requests"], "elapsed": summary["elapsed_time"],
            "rps": summary["requests_per_second"],
            "read_gbps": cache_stats["tier_storage_read_bandwidth_gbps"],
            "write_gbps": cache_stats["tier_storage_write_bandwidth_gbps"],
            "read_gb": cache_stats["tier_storage_kv_bytes_read_gb"],
            "written_gb": cache_stats["tier_storage_kv_bytes_written_gb"]}
# Not read: the tool's storage_*_device_p95_ms (one P95 of every request, its read span np.load) have no figure of that
# meaning here (ours: the largest of the clients' P95s, in storagebrief.json), so our file leaves them out.


def _paths(d: dict, prefix: str = "") -> list[str]:
    return [q for k, v in d.items() for q in (_paths(v, f"{prefix}{k}.") if isinstance(v, dict) else [prefix + k])]


def _row() -> dict:
    """A run measured from call records: user 0's writes and reads, and one CPU-tier demotion (user -1)."""
    recs = [Call("write", "storage", 0.0, 1.0, 2 * GIB, 10, 0.5, 0, 0),
            Call("read", "storage", 1.0, 2.0, 2 * GIB, 10, 0.2, 0, 0),
            Call("write", "storage", 2.0, 3.0, 3 * GIB, 10, 0.9, 0, -1),         # a demotion: its fsync 0.9 s
            Call("write", "cpu", 3.0, 3.1, GIB, 5, 0.0, 0, 0)]
    row = metrics.run_row({"duration_s": 10.0}, {"t_start": 0.0, "ranks": [{"rank": 0, "records": recs,
                                                                          "cpu_s": 0.1, "elapsed_s": 10.0}]})
    return {**row, "run_id": "kv_cache-w-t-r1", "target": "t", "workload": "w", "family": "mlperf",
            "model": "llama3.1-8b", "status": "ok", "repeat": 1, "started_at": "2026-12-07T06:00:00+00:00",
            "users_per_client": 2, "clients": 1, "cpu_tier_bytes": GIB}


def test_demotions_count_in_no_mlperf_write_figure_but_in_ours():
    row = _row()
    assert row["mlperf_write_bytes"] == 2 * GIB and row["demotion_write_bytes_to_snapshot"] == 3 * GIB
    assert row["mlperf_write_gib_per_s"] == pytest.approx(0.2)
    assert row["storage_write_gib_per_elapsed_s"] == pytest.approx(0.5)
    assert row["mlperf_device_write_p95_ms"] == pytest.approx(500.0)        # the demotion's 900 ms is not MLPerf's
    assert row["storage_write_bytes"] == 5 * GIB                             # the honest figure counts every write


def test_a_reader_written_for_the_tools_output_reads_our_file(tmp_path):
    (d,) = mlperf_tree.export(tmp_path, pd.DataFrame([_row()]), seed=7)
    (f,) = d.glob("kvcache_results_*.json")
    assert f.name == f"kvcache_results_{d.name}.json"
    got = tool_reader(f)
    assert got["written_gb"] == pytest.approx(2.0) and got["write_gbps"] == pytest.approx(0.2)
    assert got["read_gb"] == pytest.approx(2.0) and got["read_gbps"] == pytest.approx(0.2)
    assert got["elapsed"] == 10.0 and got["requests"] == 2
    absolute = _paths(json.loads(f.read_text()))
    assert absolute and set(absolute) <= set(FIXTURE["paths"]), set(absolute) - set(FIXTURE["paths"])
    ours = json.loads((d / "storagebrief.json").read_text())
    assert ours["storage_write_gib_per_elapsed_s"] == pytest.approx(0.5)
    assert ours["demotion_write_gib_to_snapshot"] == pytest.approx(3.0)
    assert ours["write_device_p95_ms_max_of_clients"] == pytest.approx(500.0)     # no demotion in it, by our name
