"""The GPU path, driver side: what this machine has (GPU, driver CUDA, kvikio/cupy, GDS or compat,
gdscheck, libcufile in fio), which GPU paths a sweep plans, and one point run in a fresh worker
process (gpu_worker.py) inside the run's cgroup.

Path names follow Micron's GDS brief and gdsio (`-x 0` GPU_DIRECT, `-x 2` CPU_GPU):
  gds            cuFile direct through kvikio (KVIKIO_COMPAT_MODE=OFF). Planned only where kvikio says GDS
                 is available; a run whose kvikio report says it went through POSIX fails instead of
                 being labelled gds.
  legacy         storage -> host bounce buffer -> GPU through kvikio's compat (POSIX) mode.
  legacy-pread   the same legacy path done by this package: O_DIRECT pread into a page-aligned pinned host
                 buffer per slot, then cudaMemcpyAsync on that slot's own stream (gdsio -x 2's shape).
  gds-fio / legacy-fio   fio's libcufile engine (cuda_io=cufile / posix) at the same points: the
                 reference tool, run when `fio --enghelp` lists libcufile.
The cpu path (fio into host memory) is run.py's. Every worker sets KVIKIO_NTHREADS to the point's queue
depth (kvikio's pool defaults to one thread, which made "QD 32" a QD 1 on the H200) and records it.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

OURS = ("gds", "legacy", "legacy-pread")
FIO_PATHS = {"gds-fio": "cufile", "legacy-fio": "posix"}
REFERENCE = {"gds": "gds-fio", "legacy": "legacy-fio", "legacy-pread": "legacy-fio"}
NO_GPU = "no CUDA GPU visible: GPU path not measured"
WORKER = "storagebrief.studies.transfer_sweep.gpu_worker"


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def driver_facts() -> dict:
    """GPUs and the driver's CUDA version from nvidia-smi ({} without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    res = _run([smi, "-L"])
    gpus = [ln.strip() for ln in (res.stdout if res else "").splitlines() if ln.startswith("GPU ")]
    banner = _run([smi])
    m = re.search(r"CUDA Version:\s*([0-9.]+)", banner.stdout if banner else "")
    drv = re.search(r"Driver Version:\s*([0-9.]+)", banner.stdout if banner else "")
    return {"gpus": gpus, "driver_cuda_version": m.group(1) if m else None,
            "driver_version": drv.group(1) if drv else None}


def cuda_major(facts: dict) -> int | None:
    v = facts.get("driver_cuda_version")
    return int(v.split(".")[0]) if v else None


def gpu_packages(major: int | None) -> list[str] | None:
    """The wheels of the `gpu` extra for a driver's CUDA major (None: no wheels for it)."""
    return {12: ["kvikio-cu12", "cupy-cuda12x"], 13: ["kvikio-cu13", "cupy-cuda13x"]}.get(major)


def gdscheck() -> dict:
    """`gdscheck -p`'s verdict where the tool exists (CUDA's gds/tools); {} where it does not."""
    tool = shutil.which("gdscheck") or next(iter(sorted(glob.glob("/usr/local/cuda*/gds/tools/gdscheck"))), None)
    if tool is None:
        return {}
    res = _run([tool, "-p"], timeout=120)
    if res is None:
        return {"gdscheck": tool, "gdscheck_verdict": "gdscheck -p did not finish"}
    lines = (res.stdout + res.stderr).splitlines()
    nvme = next((ln.split(":", 1)[1].strip() for ln in lines if re.match(r"\s*NVMe\s*:", ln)), None)
    fs = next((ln.strip() for ln in lines if "nvidia_fs" in ln.lower()), None)
    verdict = f"NVMe: {nvme or 'not listed'}" + (f"; {fs}" if fs else "")
    return {"gdscheck": tool, "gdscheck_verdict": verdict}


_PROBE = ("import json, kvikio, kvikio.defaults, cupy; "
          "from storagebrief.studies.transfer_sweep.gpu import kvikio_report; "
          "print(json.dumps({'kvikio': kvikio.__version__, 'cupy': cupy.__version__, "
          "'cupy_runtime': cupy.cuda.runtime.runtimeGetVersion(), **kvikio_report(1 << 30)}))")


def detect() -> dict:
    """{'available': bool, 'reason': str, ...}: a GPU, kvikio + cupy importable, what kvikio says of GDS."""
    facts = driver_facts()
    if not facts and not os.path.exists("/dev/nvidia0"):
        return {"available": False, "reason": f"{NO_GPU} (no nvidia-smi, no /dev/nvidia0)"}
    if not facts.get("gpus"):
        return {"available": False, **facts, "reason": f"{NO_GPU} (nvidia-smi lists no GPU)"}
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "KVIKIO_COMPAT_MODE": "AUTO"})
    if res.returncode != 0:
        want = gpu_packages(cuda_major(facts))
        return {"available": False, **facts,
                "reason": "CUDA GPU visible but kvikio/cupy cannot be imported (`make gpu` installs "
                          f"{' + '.join(want) if want else 'the wheels for this driver'}): GPU path not measured "
                          f"({(res.stderr.strip().splitlines() or ['?'])[-1]})"}
    probe = json.loads(res.stdout.strip().splitlines()[-1])
    return {"available": True, "reason": "", **facts, **probe, **gdscheck()}


def planned(info: dict, fio_libcufile: bool) -> list[str]:
    """The GPU paths a sweep runs: gds only where kvikio says GDS is available (else the brief says
    'GDS unavailable on this machine: legacy measured'); fio's libcufile paths where fio lists it."""
    if not info.get("available"):
        return []
    ours = [p for p in OURS if p != "gds" or info.get("kvikio_gds_available")]
    ref = ([k for k, v in FIO_PATHS.items() if v == "posix" or info.get("kvikio_gds_available")]
           if fio_libcufile else [])
    return ours + ref


def doctor_line() -> str:
    """One doctor line: GPUs, driver CUDA, kvikio/cupy, GDS or compat, libcufile in fio."""
    from . import fio
    facts = driver_facts()
    cufile_fio = "libcufile" in fio.engines(gpu_fio_binary())
    fio_txt = "fio lists libcufile" if cufile_fio else "fio has no libcufile engine (`make gpu` builds one)"
    if not facts.get("gpus"):
        return f"no CUDA GPU (no nvidia-smi GPU)  -> the transfer sweep's GPU paths are skipped; {fio_txt}"
    info = detect()
    head = f"{len(facts['gpus'])} GPU(s), driver CUDA {facts.get('driver_cuda_version') or '?'}"
    if not info.get("available"):
        return f"{head}; {info['reason']}; {fio_txt}"
    mode = ("GDS available" if info.get("kvikio_gds_available") and not info.get("kvikio_compat_mode_preferred")
            else "GDS unavailable: compat (legacy) mode")
    return (f"{head}; kvikio {info.get('kvikio')}, cupy {info.get('cupy')}; {mode}"
            + (f"; gdscheck -p: {info['gdscheck_verdict']}" if info.get("gdscheck_verdict") else "")
            + f"; {fio_txt}")


def gpu_fio_binary() -> str | None:
    """The fio to use for libcufile: the project's own build (`make gpu`: .tools/bin/fio) when present."""
    from pathlib import Path
    own = Path(__file__).resolve().parents[4] / ".tools" / "bin" / "fio"
    return str(own) if own.is_file() and os.access(own, os.X_OK) else shutil.which("fio")


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
    ran = "gds" if (not compat and gds and bs >= int(thr)) else "legacy"
    return {"kvikio_compat_mode_preferred": bool(compat), "kvikio_gds_available": gds,
            "kvikio_gds_threshold_bytes": int(thr), "gpu_path_ran": ran}


@dataclass(frozen=True)
class GpuPoint:
    """One GPU point as the worker process reads it (its JSON argument)."""
    path: str           # gds | legacy | legacy-pread | stand-in (CI: host memory in place of the device)
    file: str
    bs: int
    qd: int
    runtime_s: float
    ramp_s: float
    seed: int
    sequential: bool = False


def worker_env(point: GpuPoint, base: dict | None = None) -> dict:
    """kvikio reads its settings at start-up: compat mode per path, the thread pool sized to the QD."""
    mode = {"gds": "OFF", "legacy": "ON"}.get(point.path, "AUTO")
    env = {**(base if base is not None else os.environ), "KVIKIO_COMPAT_MODE": mode, "KVIKIO_NTHREADS": str(point.qd)}
    if point.path == "gds":
        env["KVIKIO_GDS_THRESHOLD"] = "0"      # gdsio measures GDS at 4K too: no size falls back to POSIX
    return env


def run_point(point: GpuPoint, timeout_s: float, preexec=None) -> dict:
    """One GPU point in a fresh process (joins the run's cgroup through preexec): the worker's JSON."""
    res = subprocess.run([sys.executable, "-m", WORKER, json.dumps(asdict(point))], capture_output=True,
                         text=True, env=worker_env(point), timeout=timeout_s, preexec_fn=preexec)
    if res.returncode != 0:
        raise RuntimeError(f"GPU point ({point.path}, {point.bs} B, QD {point.qd}) failed: "
                           f"{res.stderr.strip()[-800:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])
