"""Accelerators measured on the user's own hardware (`storagebrief calibrate-accelerator`), beside the
catalogue's MLPerf/DLIO ones: each entry is a workload's compute time per batch at a batch size, with its
source, date and machine, so the emulate study and the transfer-sweep forecast can use `accelerator_type:
<name>` (e.g. h200-measured) and answer how many of *these* accelerators a storage target can feed.

The store is `accelerators.yaml` at the project's root (beside params.yaml: a measurement the project keeps,
under git like the params), or the file named by $STORAGEBRIEF_ACCELERATORS:

    accelerators:
      h200-measured:
        resnet50: {compute_s: 0.0545, batch_size: 256, source: "...", measured_at: "...", machine: "...", ...}
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import yaml

from .config import ParamsError, project_root

ENV = "STORAGEBRIEF_ACCELERATORS"
FILE = "accelerators.yaml"


def store_path(start: str | Path | None = None) -> Path | None:
    """The store in use: $STORAGEBRIEF_ACCELERATORS, else accelerators.yaml of the project (None outside one)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    try:
        return project_root(start) / FILE
    except ParamsError:
        return None


def load(path: Path | None = None) -> dict[str, dict[str, dict]]:
    """{accelerator: {workload: entry}}; {} when there is no store. A malformed store is refused by name."""
    path = path if path is not None else store_path()
    if path is None or not path.is_file():
        return {}
    doc = yaml.safe_load(path.read_text()) or {}
    accs = doc.get("accelerators") if isinstance(doc, dict) else None
    if not isinstance(accs, dict):
        raise ParamsError(f"{path}: measured accelerators need a top-level 'accelerators:' mapping "
                          "(accelerator -> workload -> {compute_s, batch_size, ...})")
    for acc, wl in accs.items():
        for name, e in (wl or {}).items():
            ok = isinstance(e, dict) and isinstance(e.get("batch_size"), int) and e["batch_size"] >= 1 \
                and isinstance(e.get("compute_s"), (int, float)) and math.isfinite(e["compute_s"]) and e["compute_s"] > 0
            if not ok:
                raise ParamsError(f"{path}: accelerators.{acc}.{name} = {e!r}: needs compute_s > 0 (seconds per "
                                  "batch) and batch_size >= 1")
    return accs


def with_measured(name: str, base: dict, store: dict | None = None) -> dict:
    """A catalogue entry (WORKLOADS[name], or {}) with every measured accelerator of that workload added:
    compute_s[acc] and batch_size_by_accelerator[acc]. The catalogue's own accelerators are never replaced."""
    store = load() if store is None else store
    if not base:
        return base
    base = dict(base)
    compute, batches = dict(base.get("compute_s", {})), dict(base.get("batch_size_by_accelerator", {}))
    for acc, wl in store.items():
        e = (wl or {}).get(name)
        if e is None or acc in compute:
            continue
        compute[acc] = float(e["compute_s"])
        batches[acc] = int(e["batch_size"])
    base["compute_s"], base["batch_size_by_accelerator"] = compute, batches
    return base


def save(entry: dict, accelerator: str, workload: str, path: Path) -> None:
    """Add or replace one measurement (atomic rewrite; the file's other entries kept)."""
    from .results import atomic_write_text
    doc = {"accelerators": load(path) if path.is_file() else {}}
    doc["accelerators"].setdefault(accelerator, {})[workload] = entry
    head = ("# Accelerators measured on this project's hardware by `storagebrief calibrate-accelerator`.\n"
            "# Use one as emulate.accelerator_type or transfer_sweep.forecast.accelerator_type.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, head + yaml.safe_dump(doc, sort_keys=True, allow_unicode=True))
