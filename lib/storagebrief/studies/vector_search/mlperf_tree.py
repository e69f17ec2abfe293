"""Each search run as mlpstorage writes a vector-database run (kit/mlpstorage_tree.py): per target
`vector_database/run/<stamp>/` with `vector_database_<stamp>_metadata.json` and the VDB harness's own output file,
`statistics.json`, holding only the keys vdbbench's simple_bench writes that this study measures with the same
meaning (query count, time, latency mean / median / P95 / P99 / P99.9, QPS, recall@k). Its `disk_io` (device bytes
from /proc/diskstats) is left out: this study counts the search process's own reads. Those, the reads per query, the
prediction and the point's run count (MLPerf v3.0 wants five runs per point; fewer are said, never padded) are this
study's own figures, under its own names, in storagebrief.json.

Parameters are vdbbench's run arguments as the point ran: `runtime` is the point's time bound (max_point_s), the
queries, the search threads as query processes, batch size 1 (one query per call).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ...kit import mlpstorage_tree as tree
from ...kit import runs as kit_runs

RUNS_REQUIRED = 5          # MLPerf Storage v3.0's runs per vector-database point
POINT = ["target", "data", "search_list", "beam_width", "threads"]
NO_BLOCK = ("not measured: no block-layer count for this target (no block device behind it, as on tmpfs); "
            "reads_per_query_block is null")


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _num(x) -> float | None:
    """A figure, or None where it was not measured (None, NaN, inf: a tmpfs target has no block layer)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def statistics(r, k: int) -> dict:
    n = int(r.queries)
    return {"total_queries": n, "total_time_seconds": n / float(r.qps) if r.qps else None,
            "mean_latency_ms": float(r.latency_ms_mean), "median_latency_ms": float(r.latency_ms_p50),
            "p95_latency_ms": float(r.latency_ms_p95), "p99_latency_ms": float(r.latency_ms_p99),
            "p999_latency_ms": float(r.latency_ms_p999), "throughput_qps": float(r.qps),
            "recall": {"recall_at_k": float(r.recall_at_k), "mean_recall": float(r.recall_at_k), "k": int(k),
                       "num_queries_evaluated": n}}


def point(r, runs_of_point: int) -> dict:
    """This study's own figures for one run, by this study's names (runs.csv's): none under a vdbbench key."""
    block = _num(r.reads_per_query_block)
    return {"point": f"{r.data}-L{int(r.search_list)}-w{int(r.beam_width)}-t{int(r.threads)}", "data": r.data,
            "search_list": int(r.search_list), "beam_width": int(r.beam_width), "threads": int(r.threads),
            "reads_per_query_engine": float(r.reads_per_query_engine), "bytes_per_query": float(r.bytes_per_query),
            "process_read_bytes": float(r.bytes_per_query) * int(r.queries),
            "process_read_source": "/proc/self/io of the search process",
            "reads_per_query_block": block, "block_source": r.block_source if block is not None else NO_BLOCK,
            "device_iops_at_qd": _num(r.device_iops_at_qd), "qps_predicted": _num(r.qps_predicted),
            "prediction_error": _num(r.prediction_error), "regime": r.regime,
            "runs_of_point": runs_of_point, "runs_required": RUNS_REQUIRED,
            "complete": runs_of_point >= RUNS_REQUIRED}


def export(out_dir: Path, frame, p, study: dict) -> list[Path]:
    tree.reset(out_dir, "vector_database")
    inv = _read(Path(out_dir) / "inventory.json")
    ok = kit_runs.ok_runs(frame)
    per_point = ok.groupby(POINT)["run_id"].transform("size") if len(ok) else []
    made = []
    for r, n in zip(ok.itertuples(), per_point):
        config = f"diskann-{p.num_vectors}x{p.dimension}-{r.data}"
        params = {"runtime": float(p.max_point_s), "queries": int(r.queries), "num_query_processes": int(r.threads),
                  "batch_size": 1, "mode": "query_count", "index_type": "DISKANN", "num_vectors": p.num_vectors,
                  "dimension": p.dimension, "search_list": int(r.search_list), "beam_width": int(r.beam_width)}
        d = tree.run_folder(tree.root(out_dir, r.target), "vector_database", config, r.started_at)
        ours = {"study": "vector_search", "run_id": str(r.run_id), "target": str(r.target),
                "engine": study.get("engine"), "index": "DISKANN (Vamana graph + product quantization, disk index)",
                "point": point(r, int(n)),
                "not": "Milvus: the index is DiskANN's disk index searched in-process (diskannpy-rust)"}
        tree.write_run(d, "vector_database", model=config, command="run", num_processes=int(r.threads),
                       accelerator=None, parameters=params, overrides={}, inv=inv,
                       tool_files={"statistics.json": statistics(r, p.k)}, ours=ours,
                       extra={"vectordb_config": config, **{k: params[k] for k in
                                                           ("num_query_processes", "batch_size", "runtime",
                                                            "queries", "mode")}})
        made.append(d)
    return made
