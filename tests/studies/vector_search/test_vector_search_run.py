"""One small real run of the vector search through the CLI (the real DiskANN index and fio): a row per point with
recall, QPS, per-query tails and reads three ways, the engine's count equal to the process's read bytes, the
index never in the page cache, the prediction beside each QPS, the MLPerf v3.0 files read by key, nothing
left running; a data set larger than the target's free space refused before any work."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief import studies
from conftest import REPO

TINY = studies.get("vector_search").tiny


def _cli(tmp: Path, section: dict, target: Path | None = None) -> subprocess.CompletedProcess:
    data = {"targets": [{"name": "dir", "path": str(target or tmp / "dir")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "vector_search": section}
    (tmp / "params.yaml").write_text(yaml.safe_dump(data))
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "vector-search", "--params",
                           str(tmp / "params.yaml"), "--out", str(tmp / "out"), "--progress", "off"], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")})


@pytest.mark.slow
def test_a_small_real_run_measures_every_point_and_writes_the_mlperf_layout(tmp_path):
    out = _cli(tmp_path, TINY)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    n_l = len(TINY["search_list"])
    assert sorted(runs.data) == ["clustered"] * n_l + ["uniform"] * n_l and set(runs.status) == {"ok"}
    assert (runs.recall_at_k.between(0, 1)).all() and (runs.qps > 0).all() and (runs.queries >= 5).all()
    assert (runs.latency_ms_p50 <= runs.latency_ms_p99).all() and (runs.latency_ms_p99 <= runs.latency_ms_p999).all()
    # the engine's reads and the process's read bytes are the same reads (O_DIRECT, 4 KiB sectors)
    assert ((runs.reads_per_query_engine - runs.reads_per_query_process).abs()
            <= 0.05 * runs.reads_per_query_engine).all()
    assert (runs.resident_index_pages == 0).all() and runs.page_cache_bypassed.all()
    assert (runs.cache_method == "fadvise_dontneed (the index files)").all()
    assert (runs.device_iops_at_qd > 0).all()
    assert (runs.qps_predicted - runs.device_iops_at_qd / runs.reads_per_query_engine).abs().max() < 1e-6
    c = runs[runs.data == "clustered"].sort_values("search_list")
    assert c.reads_per_query_engine.is_monotonic_increasing          # a longer list reads more
    pts = pd.read_csv(tmp_path / "out" / "points.csv")
    assert len(pts) == len(runs) and "below_recall_floor" in pts
    folders = {json.loads((d / "storagebrief.json").read_text())["run_id"]: d
               for d in (tmp_path / "out" / "mlperf" / "results" / "dir" / "vector_database" / "run").iterdir()}
    assert sorted(folders) == sorted(runs.run_id) and not (tmp_path / "out" / "mlperf" / "dir").exists()
    for r in runs.itertuples():
        s = json.loads((folders[r.run_id] / "statistics.json").read_text())
        assert s["throughput_qps"] == pytest.approx(r.qps) and s["recall"]["recall_at_k"] == pytest.approx(r.recall_at_k)
        ours = json.loads((folders[r.run_id] / "storagebrief.json").read_text())
        assert ours["point"]["reads_per_query_engine"] == pytest.approx(r.reads_per_query_engine)
        assert "diskannpy-rust" in ours["engine"] and "Milvus" in ours["not"]
    probes = pd.read_csv(tmp_path / "out" / "probes.csv")
    # one probe per run, in its pattern: one job (threads 1) of beams of 1
    assert len(probes) == len(runs) and set(probes.beam_width) == {1} and set(probes.jobs) == {1}
    assert (probes.iops > 0).all() and runs.inflight_source.notna().all() and (runs.queue_depth > 0).all()
    assert (runs.queries_in_flight > 0).all() and (runs.queries_in_flight <= 1 + 1e-9).all()
    off = runs[(runs.prediction_error.abs() > 0.10)]
    assert off.limited_by.fillna("").str.len().gt(0).all(), off[["prediction_error", "limited_by"]]
    # nothing of the run is left: no search client, no fio
    left = subprocess.run(["pgrep", "-f", f"fio.*{tmp_path}"], capture_output=True, text=True).stdout.split()
    assert not left
    # a second sweep reuses the sets (not rebuilt)
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["sets"]["dir"]["clustered"]["index_bytes"] > 0


def test_a_data_set_larger_than_the_target_is_refused_before_any_work(tmp_path, small_fs):
    out = _cli(tmp_path, {**TINY, "num_vectors": 2_000_000, "dimension": 64, "pq_chunks": 8}, target=small_fs / "t")
    assert out.returncode != 0
    assert "the vector sets and their DiskANN indexes" in out.stderr
    assert not list((small_fs / "t").rglob("*.npy"))
