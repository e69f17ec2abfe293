"""The results in MLPerf Storage v3.0's vector-database layout: per target and point a folder of run directories,
each with a `summary.json` carrying v3.0's keys and the keys v3.0 lacks (reads per query, the prediction), and
one `provenance.json` saying what produced them: an open-division-style engine (DiskANN's disk index through
diskannpy-rust), not Milvus. v3.0 requires exactly five runs per point; a point with fewer repeats says so
(`runs_present` / `runs_required` in provenance.json), never padded.
"""
from __future__ import annotations

import math
from pathlib import Path

from ...core import results
from ...kit import runs as kit_runs

RUNS_REQUIRED = 5
V30_KEYS = ("throughput_qps", "mean_latency_ms", "p95_latency_ms", "p99_latency_ms", "p999_latency_ms", "recall",
            "num_vectors", "dimension", "index_type", "database", "total_time_seconds", "query_count", "disk_io")
ADDED_KEYS = ("ios_per_query", "bytes_per_query", "beam_width", "search_list", "device_iops_at_qd", "qps_predicted",
              "prediction_error")

NO_BLOCK = ("not measured: no block-layer count for this target (no block device behind it, as on tmpfs); "
            "block_reads_per_query is null")


def _num(x) -> float | None:
    """A figure, or None where it was not measured (None, NaN, inf: a tmpfs target has no block layer)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def summary(r, p, study: dict) -> dict:
    n = int(r.queries)
    block = _num(r.reads_per_query_block)
    return {"throughput_qps": float(r.qps), "mean_latency_ms": float(r.latency_ms_mean),
            "p95_latency_ms": float(r.latency_ms_p95), "p99_latency_ms": float(r.latency_ms_p99),
            "p999_latency_ms": float(r.latency_ms_p999), "recall": float(r.recall_at_k),
            "num_vectors": p.num_vectors, "dimension": p.dimension, "index_type": "DISKANN",
            "database": study["engine"], "total_time_seconds": n / float(r.qps) if r.qps else None,
            "query_count": n,
            "disk_io": {"read_bytes": float(r.bytes_per_query) * n, "source": "/proc/self/io of the search process",
                        "block_reads_per_query": block,
                        "block_source": r.block_source if block is not None else NO_BLOCK},
            "ios_per_query": float(r.reads_per_query_engine), "bytes_per_query": float(r.bytes_per_query),
            "beam_width": int(r.beam_width), "search_list": int(r.search_list), "threads": int(r.threads),
            "data": r.data, "device_iops_at_qd": _num(r.device_iops_at_qd), "qps_predicted": _num(r.qps_predicted),
            "prediction_error": _num(r.prediction_error), "regime": r.regime}


def write(root: Path, frame, p, study: dict) -> None:
    ok = kit_runs.ok_runs(frame)
    root.mkdir(parents=True, exist_ok=True)
    points = []
    for key, g in ok.groupby(["target", "data", "search_list", "beam_width", "threads"]):
        target, data, L, w, t = key
        name = f"{data}-L{int(L)}-w{int(w)}-t{int(t)}"
        for i, r in enumerate(g.sort_values("repeat").itertuples(), start=1):
            run_dir = root / target / name / f"run-{i}"
            run_dir.mkdir(parents=True, exist_ok=True)
            results.write_json(run_dir / "summary.json", summary(r, p, study))
        points.append({"target": target, "point": name, "runs_present": len(g), "runs_required": RUNS_REQUIRED,
                       "complete": len(g) >= RUNS_REQUIRED})
    prov = {"benchmark": "MLPerf Storage v3.0 vector database (vdb_benchmark) layout",
            "division": "open-division style: not a v3.0 CLOSED submission",
            "engine": study["engine"], "index_type": "DISKANN (Vamana graph + product quantization, disk index)",
            "not": "Milvus: no Milvus, MinIO or etcd ran; the index is searched in-process with direct I/O",
            "data": "generated clustered vectors with planted queries (v3.0 query_mode: planted); the uniform "
                    "control is v3.0's random data", "v30_keys": list(V30_KEYS), "added_keys": list(ADDED_KEYS),
            "points": points}
    results.write_json(root / "provenance.json", prov)
