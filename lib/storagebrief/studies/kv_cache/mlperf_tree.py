"""Each run as mlpstorage writes a KV-cache run (kit/mlpstorage_tree.py): per target `kv_cache/run/<stamp>/` with
`kv_cache_<stamp>_metadata.json` and the KV tool's own output file `kvcache_results_<stamp>.json` (its `summary`
key paths with MLPerf's arithmetic on this study's I/O, metrics.mlperf_summary); this study's own figures
(honest rates, the family) are in storagebrief.json.

The tool's arguments as mlpstorage's kvcache benchmark passes them (--model, --num-users, --duration, --gpu-mem-gb,
--cpu-mem-gb, --generation-mode, --performance-profile, --seed) are in the metadata twice: at its top level, where
mlpstorage's kvcache.py writes them, and under `parameters`, where MLPerf's KV run checker reads them (kvcache.py
writes no `parameters`, so the checker would find none: docs/mlperf-tools.md).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ...kit import client_check, runs
from ...kit import mlpstorage_tree as tree
from . import metrics
from .workload import GIB

# our model name -> the KV tool's (kv_cache/models.py at 284ce72): the same shape under the tool's name
TOOL_MODEL = {"llama3.1-70b": "llama3.1-70b-instruct"}


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _num(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def export(out_dir: Path, frame, seed: int) -> list[Path]:
    tree.reset(out_dir, "kv_cache")
    if frame is None or frame.empty:
        return []
    inv = _read(Path(out_dir) / "inventory.json")
    summaries = metrics.mlperf_summary(frame)["runs"]
    made = []
    for _, r in runs.ok_runs(client_check.unchecked(frame)).iterrows():
        model = TOOL_MODEL.get(str(r.model), str(r.model))
        args = {"model": model, "num_users": int(r.users_per_client) * int(r.clients),
                "duration": float(r.duration_s), "gpu_mem_gb": 0.0, "cpu_mem_gb": _num(r.cpu_tier_bytes) / GIB,
                "generation_mode": "none", "performance_profile": "latency", "seed": int(seed)}
        d = tree.run_folder(tree.root(out_dir, r.target), "kv_cache", model, r.started_at)
        out_name = f"kvcache_results_{d.name}.json"
        ours = {"study": "kv_cache", "run_id": str(r.run_id), "target": str(r.target), "workload": str(r.workload),
                "family": str(r.family), "model": str(r.model), **summaries[r.run_id]["storagebrief"],
                "note": "the study's clients, not MLPerf's kv-cache.py; family 'mlperf' follows the tool's user "
                        "model at 284ce72, other families are this study's own"}
        tree.write_run(d, "kv_cache", model=model, command="run", num_processes=int(r.clients), accelerator=None,
                       parameters=args, overrides={}, inv=inv,
                       tool_files={out_name: {"summary": summaries[r.run_id]["summary"]}}, ours=ours,
                       extra={"kvcache_model": model, "cache_dir": None, **{k: v for k, v in args.items()
                                                                             if k not in ("model", "seed")}})
        made.append(d)
    return made
