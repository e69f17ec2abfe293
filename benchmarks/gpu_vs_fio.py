"""Benchmark the transfer sweep's GPU path against fio at the same points (prints ratios side by side; not a test).

1. Host side, any machine: our queue engine on the stand-in path (O_DIRECT pread into page-aligned host
   buffers + a copy into host memory, a thread per slot) ÷ fio psync with numjobs = QD (one request per job,
   the same shape), same file, alternating the two sides every round. Shows whether the engine's own CPU work
   limits it where fio is not limited.
2. GPU, where fio lists libcufile and a CUDA GPU with kvikio/cupy is present: ours ÷ fio's libcufile engine per
   point: legacy (kvikio compat) and legacy-pread ÷ cuda_io=posix, gds ÷ cuda_io=cufile where kvikio reports
   GDS. Goal ≥ 0.90 at QD ≥ 8 for 128K and 1M. Otherwise it says what it needs.

Every round's figure is printed, then the median and range of the ratio. Run it on a quiet machine.
Usage: python benchmarks/gpu_vs_fio.py [--dir DIR] [--rounds 3] [--runtime 1.0] [--sizes 4k,128k,1m] [--qds 1,8,32]
       [--file-mib 512]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from storagebrief.studies.transfer_sweep import fio, gpu, gpu_fio
from storagebrief.studies.transfer_sweep.params import parse_size, size_label

FILE_MIB = 512


def _file(d: Path, mib: int = FILE_MIB) -> Path:
    f = d / "gpu_bench.bin"
    if not f.exists() or f.stat().st_size != mib << 20:
        rng = np.random.default_rng(0)
        with open(f, "wb") as out:
            for _ in range(mib):
                out.write(rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    return f


def ours(f: Path, path: str, bs: int, qd: int, runtime: float) -> float:
    res = gpu.run_point(gpu.GpuPoint(path, str(f), bs, qd, runtime, 0.2, 0), timeout_s=runtime + 300)
    return res["throughput_mb_per_s"]


def theirs(f: Path, out: Path, bs: int, qd: int, runtime: float, cuda_io: str | None) -> float:
    if cuda_io is None:
        job = fio.FioJob(f, "randread", bs, 1, qd, "psync", 0.2, runtime, f.stat().st_size, out)
        binary = None
    else:
        path = next(k for k, v in gpu.FIO_PATHS.items() if v == cuda_io)
        job = gpu_fio.job(f, "randread", bs, qd, 0.2, runtime, f.stat().st_size, out, path)
        binary = gpu.gpu_fio_binary()
    return fio.parse(fio.run_job(fio.job_args(job), runtime + 300, fio=binary), "randread")["throughput_mb_per_s"]


def compare(f: Path, d: Path, pairs: list[tuple[str, str | None]], sizes, qds, rounds: int, runtime: float) -> None:
    print(f"   {'ours ÷ fio':<28} {'point':<10} {'rounds: ours/fio MB/s':<48} {'ratio median (range)':>22}")
    for ours_path, cuda_io in pairs:
        for bs in sizes:
            for qd in qds:
                a, b = [], []
                for r in range(rounds):          # alternate which side goes first: drift bites both alike
                    first_ours = r % 2 == 0
                    if first_ours:
                        a.append(ours(f, ours_path, bs, qd, runtime))
                    b.append(theirs(f, d / "bench.json", bs, qd, runtime, cuda_io))
                    if not first_ours:
                        a.append(ours(f, ours_path, bs, qd, runtime))
                ratios = [x / y for x, y in zip(a, b)]
                goal = " (goal ≥ 0.90)" if cuda_io and qd >= 8 and bs >= 128 << 10 else ""
                rounds_txt = " ".join(f"{x:,.0f}/{y:,.0f}" for x, y in zip(a, b))
                print(f"   {ours_path + ' ÷ ' + (cuda_io or 'psync'):<28} {size_label(bs) + ' QD' + str(qd):<10} "
                      f"{rounds_txt:<48} {statistics.median(ratios):>6.2f} ({min(ratios):.2f}–{max(ratios):.2f}){goal}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help=f"folder for the {FILE_MIB} MiB test file (default: a temp folder)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=1.0, help="measured seconds per side per round")
    ap.add_argument("--sizes", default="4k,128k,1m")
    ap.add_argument("--qds", default="1,8,32")
    ap.add_argument("--file-mib", type=int, default=FILE_MIB, help="size of the test file (MiB)")
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    qds = [int(q) for q in a.qds.split(",")]
    with tempfile.TemporaryDirectory(dir=a.dir or "/var/tmp") as d:
        f = _file(Path(a.dir) if a.dir else Path(d), a.file_mib)
        print("1. host side: our queue engine (stand-in: pread + host copy) ÷ fio psync, numjobs = QD")
        compare(f, Path(d), [("stand-in", None)], sizes, qds, a.rounds, a.runtime)
        info = gpu.detect()
        cufile = "libcufile" in fio.engines(gpu.gpu_fio_binary())
        print("2. GPU: ours ÷ fio's libcufile engine")
        if not info["available"]:
            print(f"   not run: {info['reason']}")
            return
        if not cufile:
            print("   not run: needs a libcufile fio (`fio --enghelp` lists no libcufile; `make gpu` builds one "
                  "into .tools/bin/fio where CUDA's headers and libcufile are present)")
            return
        pairs = [("legacy", "posix"), ("legacy-pread", "posix")]
        pairs += [("gds", "cufile")] if info.get("kvikio_gds_available") else []
        if not info.get("kvikio_gds_available"):
            print("   GDS unavailable on this machine (kvikio's report): legacy measured, gds ÷ cufile not run")
        compare(f, Path(d), pairs, sizes, qds, a.rounds, a.runtime)


if __name__ == "__main__":
    main()
