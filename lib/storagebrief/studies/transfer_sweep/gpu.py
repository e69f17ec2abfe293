"""The GPU path (optional extra `storagebrief[gpu]`: kvikio-cu12): read the same file into GPU memory.

Paths per point, each in a fresh Python process (kvikio reads its mode at start-up):
  kvikio   KVIKIO_COMPAT_MODE=AUTO: cuFile/GDS where the driver allows it, else kvikio's POSIX
           bounce-buffer path;
  compat   KVIKIO_COMPAT_MODE=ON: kvikio's POSIX path (the legacy bounce buffer through host memory);
  host     plain O_DIRECT pread into a page-aligned host buffer, then cupy copies it to the GPU.
Which path actually ran comes from kvikio's own report, never from the request: with compat mode
preferred, or GDS unavailable in the driver, or a request below kvikio's gds_threshold, kvikio
reads through POSIX, and the row says `kvikio-compat`, never `gds`. All three facts are recorded.

UNTESTED ON HARDWARE: no CUDA GPU was available while this was written (docs/studies/transfer_sweep.md says so).
Without a GPU (the usual case here) the study records why the path was not measured.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

PATHS = ("kvikio", "compat", "host")
NO_GPU = "no CUDA GPU visible: GPU path not measured"


def detect() -> dict:
    """{'available': bool, 'reason': str, ...}: a GPU (nvidia-smi) and kvikio + cupy importable."""
    smi = shutil.which("nvidia-smi")
    if smi is None and not os.path.exists("/dev/nvidia0"):
        return {"available": False, "reason": f"{NO_GPU} (no nvidia-smi, no /dev/nvidia0)"}
    gpus = []
    if smi:
        try:
            res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            gpus = [ln for ln in res.stdout.splitlines() if ln.startswith("GPU ")]
        except (OSError, subprocess.TimeoutExpired):
            gpus = []
    if not gpus:
        return {"available": False, "reason": f"{NO_GPU} (nvidia-smi lists no GPU)"}
    probe = ("import json, kvikio, kvikio.defaults, cupy; "
             "print(json.dumps({'kvikio': kvikio.__version__, 'cupy': cupy.__version__}))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        return {"available": False, "gpus": gpus,
                "reason": "CUDA GPU visible but kvikio/cupy cannot be imported (pip install 'storagebrief[gpu]'): "
                          f"GPU path not measured ({res.stderr.strip().splitlines()[-1:] or ['?']})"}
    return {"available": True, "gpus": gpus, "reason": "", **json.loads(res.stdout.strip().splitlines()[-1])}


@dataclass(frozen=True)
class GpuPoint:
    """One GPU point as the worker process reads it (its JSON argument)."""
    path: str           # kvikio | compat | host
    file: str
    bs: int
    qd: int
    runtime_s: float
    ramp_s: float
    seed: int


def run_point(point: GpuPoint, timeout_s: float, preexec=None) -> dict:
    """One GPU point in a fresh process (joins fio's cgroup the same way through preexec)."""
    env = {**os.environ, "KVIKIO_COMPAT_MODE": "ON" if point.path == "compat" else "AUTO"}
    res = subprocess.run([sys.executable, "-m", __name__, json.dumps(asdict(point))], capture_output=True,
                         text=True, env=env, timeout=timeout_s, preexec_fn=preexec)
    if res.returncode != 0:
        raise RuntimeError(f"GPU point ({point.path}, {point.bs} B, QD {point.qd}) failed: "
                           f"{res.stderr.strip()[-800:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def kvikio_report(bs: int) -> dict:
    """What kvikio says about the path a read of `bs` bytes takes (in the worker)."""
    import kvikio.defaults

    compat = kvikio.defaults.is_compat_mode_preferred() if hasattr(kvikio.defaults, "is_compat_mode_preferred") \
        else bool(kvikio.defaults.compat_mode())
    try:
        import kvikio.cufile_driver
        gds = bool(kvikio.cufile_driver.properties.is_gds_available)
    except Exception:      # no driver at all: not available
        gds = False
    thr = kvikio.defaults.gds_threshold() if hasattr(kvikio.defaults, "gds_threshold") \
        else kvikio.defaults.get("gds_threshold")
    ran = "gds" if (not compat and gds and bs >= int(thr)) else "kvikio-compat"
    return {"kvikio_compat_mode_preferred": bool(compat), "kvikio_gds_available": gds,
            "kvikio_gds_threshold_bytes": int(thr), "gpu_path_ran": ran}


def _worker(cfg: dict) -> dict:
    import numpy as np
    import cupy

    bs, qd, path = cfg["bs"], cfg["qd"], cfg["path"]
    size = os.path.getsize(cfg["file"])
    blocks = size // bs
    rng = np.random.default_rng(cfg["seed"])
    bufs = [cupy.empty(bs, dtype=cupy.uint8) for _ in range(qd)]
    lat: list[float] = []
    done = 0
    if path == "host":
        import mmap
        from concurrent.futures import ThreadPoolExecutor
        host = [mmap.mmap(-1, bs) for _ in range(qd)]
        fd = os.open(cfg["file"], os.O_RDONLY | getattr(os, "O_DIRECT", 0))

        def one(i: int) -> float:
            t = time.perf_counter()
            os.preadv(fd, [host[i]], int(rng.integers(blocks)) * bs)
            bufs[i].set(np.frombuffer(host[i], dtype=np.uint8))
            cupy.cuda.runtime.deviceSynchronize()
            return time.perf_counter() - t
        report = {"kvikio_compat_mode_preferred": None, "kvikio_gds_available": None,
                  "kvikio_gds_threshold_bytes": None, "gpu_path_ran": "host-copy"}
        with ThreadPoolExecutor(qd) as pool:
            t_end = time.perf_counter() + cfg["ramp_s"] + cfg["runtime_s"]
            t_meas = time.perf_counter() + cfg["ramp_s"]
            start = None
            while time.perf_counter() < t_end:
                got = list(pool.map(one, range(qd)))
                if time.perf_counter() >= t_meas:
                    start = start or time.perf_counter() - max(got)
                    lat += got
                    done += qd
        os.close(fd)
    else:
        import kvikio
        report = kvikio_report(bs)
        f = kvikio.CuFile(cfg["file"], "r")
        t_end = time.perf_counter() + cfg["ramp_s"] + cfg["runtime_s"]
        t_meas = time.perf_counter() + cfg["ramp_s"]
        start = None
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            futs = [f.pread(bufs[i], bs, int(rng.integers(blocks)) * bs) for i in range(qd)]
            for fu in futs:
                fu.get()
            el = time.perf_counter() - t
            if time.perf_counter() >= t_meas:
                start = start or t
                lat += [el] * qd
                done += qd
        f.close()
    elapsed = time.perf_counter() - start if start else float("nan")
    us = np.array(lat) * 1e6
    return {**report, "io_bytes": done * bs, "throughput_mb_per_s": done * bs / elapsed / 1e6,
            "iops": done / elapsed, "lat_us_mean": float(us.mean()) if len(us) else None,
            "clat_us_p99": float(np.percentile(us, 99)) if len(us) else None, "elapsed_s": elapsed}


if __name__ == "__main__":
    print(json.dumps(_worker(json.loads(sys.argv[1]))))
