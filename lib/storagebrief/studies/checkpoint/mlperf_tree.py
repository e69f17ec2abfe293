"""Each protocol run as mlpstorage writes a checkpointing run (kit/mlpstorage_tree.py): per target
`checkpointing/<model>/<YYYYmmdd_HHMMSS>/` with `checkpointing_<stamp>_metadata.json` and DLIO's `summary.json`
(its checkpoint keys under "metric": rank 0's clock, "GB" = GiB, over the run's own checkpoints).

Parameters are DLIO's checkpoint workload keys as the run had them; overrides are the ones that differ from MLPerf's
workload file (10 checkpoints written, 10 read, 5 s between them). The study's `scale` (checkpoint bytes ÷ scale) has
no MLPerf parameter: it is in storagebrief.json with the honest figures (the last rank's end) and the rank skew.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ...kit import client_check
from ...kit import mlpstorage_tree as tree
from . import metrics

MLPERF_DEFAULTS = {"checkpoint.num_checkpoints_write": 10, "checkpoint.num_checkpoints_read": 10,
                   "checkpoint.time_between_checkpoints": 5}


def _dlio(key: str) -> bool:
    return key == "checkpoint_size_GB" or (key.startswith(("save_checkpoint_", "load_checkpoint_")))


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def export(out_dir: Path, frame, ckpts, pause_s: float) -> list[Path]:
    """The protocol sweep's runs (the client check's re-runs and failed runs left out); returns the run folders."""
    tree.reset(out_dir, "checkpointing")
    if frame is None or frame.empty or ckpts is None or ckpts.empty:
        return []
    inv = _read(Path(out_dir) / "inventory.json")
    rows = client_check.unchecked(frame)
    rows = rows[rows.sweep == "protocol"] if "sweep" in rows else rows
    rows = rows[rows.status.astype(str) == "ok"] if "status" in rows else rows
    made = []
    for _, r in rows.iterrows():
        mine = ckpts[ckpts.run_id == r.run_id]
        if mine.empty:
            continue
        full = metrics.mlperf_summary(mine)[r.target][r.model]
        params = {"model": {"name": str(r.model)}, "framework": "pytorch",
                  "workflow": {"generate_data": False, "train": False, "checkpoint": True},
                  "checkpoint": {"num_checkpoints_write": int(r.saves), "num_checkpoints_read": int(r.restores),
                                 "time_between_checkpoints": float(pause_s), "fsync": True}}
        over = {k: params["checkpoint"][k.split(".")[1]] for k, v in MLPERF_DEFAULTS.items()
                if not math.isclose(float(params["checkpoint"][k.split(".")[1]]), float(v))}
        d = tree.run_folder(tree.root(out_dir, r.target), "checkpointing", str(r.model), r.started_at)
        summary = {"start": str(r.started_at), "num_accelerators": int(r.ranks), **tree.dlio_hosts(inv),
                   "metric": {k: v for k, v in full.items() if _dlio(k)}}
        ours = {"study": "checkpoint", "run_id": str(r.run_id), "target": str(r.target), "scale": float(r.scale),
                "checkpoint_bytes": int(r.checkpoint_bytes), "mode": str(r["mode"]),
                "figures": {k: v for k, v in full.items() if not _dlio(k)},
                "note": "honest_* = bytes ÷ the time until the last rank's fsync returned; MLPerf's keys in "
                        "summary.json use rank 0's own duration"}
        folder = next((t.get("path") for t in inv.get("targets") or [] if t.get("name") == r.target), None)
        tree.write_run(d, "checkpointing", model=str(r.model), command="run", num_processes=int(r.ranks),
                       accelerator=None, parameters=params, overrides=over, inv=inv,
                       tool_files={"summary.json": summary}, ours=ours,
                       args={"checkpoint_folder": f"{folder}/storagebrief/checkpoint" if folder else None})
        made.append(d)
    return made
