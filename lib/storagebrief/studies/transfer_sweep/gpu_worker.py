"""One GPU point in its own process: the thin device part around queue_engine.

`python -m storagebrief.studies.transfer_sweep.gpu_worker '<GpuPoint JSON>'` prints one JSON line.
CUDA (cupy, kvikio) is imported only inside the device readers, so the worker's import path and the
whole engine run without CUDA on the `stand-in` path (CI: host memory in place of the device buffer).
No request synchronizes the whole device: kvikio's future completes its own read; legacy-pread waits
on its slot's own stream.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

from . import fio
from .queue_engine import HostStaging, HostStandIn, run_queue


def _kvikio_reader(cfg: dict):
    """gds / legacy: kvikio reads into one device buffer per slot; its pool has KVIKIO_NTHREADS threads."""
    import cupy
    import kvikio
    from .gpu import kvikio_report

    report = kvikio_report(cfg["bs"])
    if cfg["path"] == "gds" and report["gpu_path_ran"] != "gds":
        raise RuntimeError(f"path gds asked, but kvikio reports {report}: not labelling a POSIX read as GDS")
    bufs = [cupy.empty(cfg["bs"], dtype=cupy.uint8) for _ in range(cfg["qd"])]
    fh = kvikio.CuFile(cfg["file"], "r")
    bs = cfg["bs"]

    def read_one(slot: int, off: int) -> None:
        got = fh.pread(bufs[slot], bs, off).get()       # waits on this request's own future only
        if got != bs:
            raise OSError(f"short read: {got} of {bs} bytes at offset {off}")
    return read_one, fh.close, {**report, "host_buffer_pinned": None, "engine": "kvikio"}


def _pin(buf) -> bool:
    """cudaHostRegister the slot's page-aligned mmap buffer (pinned: DMA-able, no pageable copy)."""
    import cupy
    ptr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    cupy.cuda.runtime.hostRegister(ptr, len(buf), 0)
    return True


def _pread_reader(cfg: dict):
    """legacy-pread: O_DIRECT pread into pinned host buffers, cudaMemcpyAsync on the slot's own stream."""
    import cupy

    bs, qd = cfg["bs"], cfg["qd"]
    staging = HostStaging(cfg["file"], bs, qd, copy=None, pin=_pin)
    dev = [cupy.empty(bs, dtype=cupy.uint8) for _ in range(qd)]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(qd)]
    ptrs = [ctypes.addressof(ctypes.c_char.from_buffer(b)) for b in staging.buffers]
    h2d = cupy.cuda.runtime.memcpyHostToDevice

    def copy(slot: int, nbytes: int) -> None:
        cupy.cuda.runtime.memcpyAsync(dev[slot].data.ptr, ptrs[slot], nbytes, h2d, streams[slot].ptr)
        streams[slot].synchronize()

    staging.copy = copy

    def close() -> None:
        for p in ptrs:
            cupy.cuda.runtime.hostUnregister(p)
        staging.close()
    return staging.read_one, close, {"gpu_path_ran": "legacy", "host_buffer_pinned": staging.pinned,
                                      "engine": "pread+cudaMemcpyAsync"}


def _stand_in_reader(cfg: dict):
    """CI: the legacy-pread shape with host memory for the device; O_DIRECT where the filesystem allows."""
    bs, qd = cfg["bs"], cfg["qd"]
    try:
        staging = HostStaging(cfg["file"], bs, qd, copy=None)
    except OSError:                       # tmpfs refuses O_DIRECT
        staging = HostStaging(cfg["file"], bs, qd, copy=None, direct=False)
    staging.copy = HostStandIn(staging.host_array, bs, qd).copy
    return staging.read_one, staging.close, {"gpu_path_ran": "stand-in", "host_buffer_pinned": False,
                                             "engine": "pread+host-copy"}


READERS = {"gds": _kvikio_reader, "legacy": _kvikio_reader, "legacy-pread": _pread_reader,
           "stand-in": _stand_in_reader}


def measure(cfg: dict) -> dict:
    if cfg["path"] not in READERS:
        raise ValueError(f"GPU worker path {cfg['path']!r}: allowed {sorted(READERS)}")
    read_one, close, facts = READERS[cfg["path"]](cfg)
    try:
        res = run_queue(read_one, cfg["qd"], cfg["bs"], os.path.getsize(cfg["file"]), cfg["ramp_s"],
                        cfg["runtime_s"], cfg["seed"], cfg.get("sequential", False))
    finally:
        close()
    pct = fio.percentiles_from_bins(res["bins_ns"]) if res["bins_ns"] else {}
    for p, v in pct.items():
        res[f"clat_us_p{fio.percentile_key(p)}"] = v / 1e3 if v is not None else None
    res["bins_ns"] = {str(k): v for k, v in res["bins_ns"].items()}
    return {**facts, **res, "kvikio_nthreads": int(os.environ.get("KVIKIO_NTHREADS", "0") or 0) or None,
            "kvikio_compat_mode_env": os.environ.get("KVIKIO_COMPAT_MODE")}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
