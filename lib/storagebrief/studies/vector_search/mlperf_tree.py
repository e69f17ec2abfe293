"""Each search run as mlpstorage writes a vector-database run (kit/mlpstorage_tree.py): per target
`vector_database/run/<stamp>/` with `vector_database_<stamp>_metadata.json` and the VDB harness's own output file,
`statistics.json`, holding only the keys vdbbench's simple_bench writes that this study measures with the same
meaning (query count, time, latency mean / median / P95 / P99 / P99.9, QPS, recall@k). Its `disk_io` (device bytes
from /proc/diskstats) is left out: this study counts the search process's own reads, which is in storagebrief.json
with the reads per query and the prediction.

Parameters are vdbbench's run arguments as the point ran: `runtime` is the point's time bound (max_point_s), the
queries, the search threads as query processes, batch size 1 (one query per call).
"""
from __future__ import annotations

import json
from pathlib import Path

from ...kit import mlpstorage_tree as tree
from ...kit import runs as kit_runs
from .mlperf import summary as point_summary


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def statistics(r, k: int) -> dict:
    n = int(r.queries)
    return {"total_queries": n, "total_time_seconds": n / float(r.qps) if r.qps else None,
            "mean_latency_ms": float(r.latency_ms_mean), "median_latency_ms": float(r.latency_ms_p50),
            "p95_latency_ms": float(r.latency_ms_p95), "p99_latency_ms": float(r.latency_ms_p99),
            "p999_latency_ms": float(r.latency_ms_p999), "throughput_qps": float(r.qps),
            "recall": {"recall_at_k": float(r.recall_at_k), "mean_recall": float(r.recall_at_k), "k": int(k),
                       "num_queries_evaluated": n}}


def export(out_dir: Path, frame, p, study: dict) -> list[Path]:
    tree.reset(out_dir, "vector_database")
    inv = _read(Path(out_dir) / "inventory.json")
    made = []
    for r in kit_runs.ok_runs(frame).itertuples():
        config = f"diskann-{p.num_vectors}x{p.dimension}-{r.data}"
        params = {"runtime": float(p.max_point_s), "queries": int(r.queries), "num_query_processes": int(r.threads),
                  "batch_size": 1, "mode": "query_count", "index_type": "DISKANN", "num_vectors": p.num_vectors,
                  "dimension": p.dimension, "search_list": int(r.search_list), "beam_width": int(r.beam_width)}
        d = tree.run_folder(tree.root(out_dir, r.target), "vector_database", config, r.started_at)
        ours = {"study": "vector_search", "run_id": str(r.run_id), "target": str(r.target),
                "engine": study.get("engine"), "point": point_summary(r, p, study),
                "not": "Milvus: the index is DiskANN's disk index searched in-process (diskannpy-rust)"}
        tree.write_run(d, "vector_database", model=config, command="run", num_processes=int(r.threads),
                       accelerator=None, parameters=params, overrides={}, inv=inv,
                       tool_files={"statistics.json": statistics(r, p.k)}, ours=ours,
                       extra={"vectordb_config": config, **{k: params[k] for k in
                                                           ("num_query_processes", "batch_size", "runtime",
                                                            "queries", "mode")}})
        made.append(d)
    return made
