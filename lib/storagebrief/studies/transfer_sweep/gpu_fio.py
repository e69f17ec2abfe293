"""The reference tool beside the GPU path: fio's libcufile engine at the same points, and ours ÷ fio.

fio's libcufile engine is synchronous (one request per job), so a point's queue depth is fio's
numjobs, as in the H200 measurement (128K × 32 jobs); `cuda_io=cufile` is GDS through cuFile,
`cuda_io=posix` the legacy bounce buffer (read into host memory, then cudaMemcpy to the GPU).
The ratio per point is our path's mean throughput ÷ its fio reference's (gds vs gds-fio, legacy and
legacy-pread vs legacy-fio), written into points.csv beside our rows.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import fio, gpu

GOAL_RATIO = 0.90          # ours ÷ fio at QD ≥ 8 for 128K and 1M (benchmarks/gpu_vs_fio.py)


def job(file: Path, rw: str, bs: int, qd: int, ramp_s: float, runtime_s: float, size_bytes: int,
        output: Path, path: str, gpu_id: int = 0) -> fio.FioJob:
    return fio.FioJob(file, rw, bs, 1, qd, "libcufile", ramp_s, runtime_s, size_bytes, output,
                      extra=(f"--cuda_io={gpu.FIO_PATHS[path]}", f"--gpu_dev_ids={gpu_id}"))


def add_ratios(pts: pd.DataFrame) -> pd.DataFrame:
    """points.csv with `reference_path` and `throughput_ratio_to_fio` on our GPU rows (empty elsewhere)."""
    if pts.empty or "path" not in pts:
        return pts
    keys = ["target", "load", "rw", "block_size_bytes", "queue_depth"]
    ref = pts[pts.path.isin(list(gpu.FIO_PATHS))].set_index(keys + ["path"]).throughput_mb_per_s_mean
    refs, ratios = [], []
    for r in pts.itertuples():
        want = gpu.REFERENCE.get(r.path)
        key = tuple(getattr(r, k) for k in keys) + (want,)
        val = ref.get(key) if want is not None else None
        refs.append(want if val is not None else None)
        ratios.append(r.throughput_mb_per_s_mean / val if val else None)
    return pts.assign(reference_path=refs, throughput_ratio_to_fio=ratios)
