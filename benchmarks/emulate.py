"""Benchmark the emulator against fio and against itself (prints ratios; not a test).

1. Read path: the emulator's loader (one emulated accelerator, T read threads,
   O_DIRECT, block B) vs fio on the same file with the same block size, the same
   number of concurrent streams and the same access pattern (stream k reads
   blocks k, k+T, k+2T, ...: fio `rw=read:<(T-1)B>` with `offset_increment=B`).
   Goal: emulator MB/s / fio MB/s >= 0.90.
2. Overhead: AU on a fast target (data in page cache) with a small compute time.
   AU is compute / wall with nothing subtracted; the AU with the emulator's own
   measured delays removed (sleep overshoot, barrier release) is printed beside it.
   Goal: AU without the emulator's delays >= 99 % (the emulator's fidelity).
3. The client's capacity: accelerators N = 1, 2, 4, 8, 16 (until AU < 90 %) on the
   same fast warm-cache target, small records (64 KiB), 0.01 s compute per batch:
   the largest N with AU >= 90 % is what this machine can drive as a client, with
   what limited the first failing N and the client's CPU seconds per GB read.
4. Launchers: part 3 again with every accelerator an MPI rank (`launcher: mpi`, one
   host), side by side with the forked accelerators: capacity and CPU s per GB,
   MPI / fork (skipped with the reason when Open MPI or mpi4py is missing).

Usage: python benchmarks/emulate.py [--dir DIR] [--size-mib 1024] [--threads 4] [--block-kib 1024]
       [--only-client]   (parts 2 and 3 only)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from storagebrief.core import config
from storagebrief.kit import mpi
from storagebrief.studies.emulate import STUDY
from storagebrief.studies.emulate.accelerators import run_once
from storagebrief.studies.emulate.metrics import summarize


def make_file(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(path, "wb") as fh:
        left = size
        while left:
            n = min(left, 64 << 20)
            fh.write(rng.bytes(n))
            left -= n
        fh.flush()
        os.fsync(fh.fileno())


def emulator_read(path: Path, size: int, threads: int, block: int, direct: bool = True, loops: int = 1) -> float:
    """MB/s of one emulated accelerator reading the whole file, one block per sample, no compute."""
    samples = size // block
    cfg = {"files": [str(path)], "spans": [[(i * block, block) for i in range(samples)]], "epochs": loops, "seed": 0,
           "batch": 1, "steps_per_epoch": samples, "compute_s": 1e-6, "read_threads": threads, "prefetch": 4,
           "block": block, "odirect": direct, "evict": False, "readahead": True,
           "checkpoint_every_steps": 0, "checkpoint_bytes": 0, "checkpoint_dir": str(path.parent)}
    raw = run_once(cfg, 1, None, None, path.parent)
    row, _, _ = summarize(raw, cfg, 1)
    return row["loader_bytes"] / row["total_time_s"] / 1e6


def fio_read(path: Path, size: int, threads: int, block: int, direct: bool = True, loops: int = 1) -> float:
    cmd = ["fio", "--name=emu", f"--filename={path}", f"--direct={int(direct)}", "--ioengine=psync", f"--bs={block}",
           f"--rw=read:{(threads - 1) * block}", f"--numjobs={threads}", f"--offset_increment={block}",
           f"--size={size - (threads - 1) * block}", f"--io_size={size // threads}", "--invalidate=0", f"--loops={loops}", "--group_reporting", "--output-format=json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return out["jobs"][0]["read"]["bw_bytes"] / 1e6


def warm(directory: Path) -> None:
    """Read every file already under `directory` (a dataset kept from an earlier run) into the page cache."""
    for f in directory.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(8 << 20):
                    pass


def _fast_study(directory: Path, section: dict):
    """The emulate study on one unthrottled target with its dataset in page cache (a new one is, once written)."""
    warm(directory)
    params = config.validate({"targets": [{"name": "fast", "path": str(directory)}],
                              "run": {"cold_cache": False, "monitor_interval_s": 0.5}, "emulate": section})
    out = Path(tempfile.mkdtemp(prefix="emu-bench-"))
    try:
        return STUDY.run(params, out, log=lambda *_: None, progress="off")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def small_records(compute_s: float, accelerators: list[int], num_files: int, epochs: int, repeats: int) -> dict:
    """64 KiB records in page cache (fixed sizing, no cold cache): storage is never the limit."""
    return {"workloads": ["unet3d"], "accelerator_type": "v100",
            "workload_overrides": {"unet3d": {"record_bytes": 65536, "record_bytes_stdev": 0,
                                              "compute_s": {"v100": compute_s}}},
            "num_files": num_files, "dataset_sizing": "fixed", "epochs": epochs, "repeats": repeats,
            "accelerators": accelerators, "prefetch": 2}


def au_fast(directory: Path, compute_s: float, accelerators: int) -> dict:
    frame = _fast_study(directory, small_records(compute_s, [accelerators], 1024, 2, 3))
    return {"au": float(frame.au_percent.mean()), "au_removed": float(frame.au_percent_overhead_removed.mean()),
            "overshoot_us": float(frame.compute_overshoot_us_mean.mean()), "steps": int(frame.steps.iloc[0])}


def client_capacity(directory: Path, compute_s: float, counts: list[int], launcher: str = "fork"):
    """Largest N with AU >= 90 % on a fast warm-cache target (the sweep stops after the first failing N)."""
    section = {**small_records(compute_s, counts, 4096, 2, 1), "stop_below_threshold": True, "launcher": launcher}
    return _fast_study(directory, section).sort_values("accelerators")


def print_capacity(frame, compute_s: float, seconds: float) -> None:
    thr = float(frame.au_threshold_percent.iloc[0])
    print(f"client capacity: fast warm-cache target, 64 KiB records, batch {int(frame.batch_size.iloc[0])}, "
          f"compute {compute_s * 1000:.0f} ms per batch, {int(frame.epochs.iloc[0])} epochs, N until AU < {thr:.0f} % "
          f"({seconds:.0f} s); client CPU = the accelerator processes' user + system seconds:")
    print(f"  {'N':>3} {'AU %':>7} {'AU % w/o emu delays':>20} {'samples/s':>10} {'demand':>8} {'client CPU %':>13} "
          f"{'machine busy %':>15} {'CPU s per GB':>13}  limited by")
    for _, r in frame.iterrows():
        print(f"  {int(r.accelerators):>3} {r.au_percent:7.1f} {r.au_percent_overhead_removed:20.1f} {r.samples_per_s:10.0f} "
              f"{r.demand_samples_per_s:8.0f} {r.client_cpu_percent_of_cores:13.1f} {r.cpu_busy_percent:15.1f} "
              f"{r.client_cpu_s_per_gb:13.3f}  {r.limited_by} ({r.limited_by_reason})")
    ok = frame[frame.au_percent >= thr]
    fail = frame[frame.au_percent < thr]
    best = int(ok.accelerators.max()) if not ok.empty else 0
    tail = (f"; first failing N = {int(fail.accelerators.iloc[0])}, limited by {fail.limited_by.iloc[0]}"
            if not fail.empty else f"; every N tried passed (capacity >= {best})")
    print(f"  largest N with AU >= {thr:.0f} % (the client's capacity): {best}{tail}")
    print(f"  client CPU seconds per GB read: median {frame.client_cpu_s_per_gb.median():.3f} "
          f"(range {frame.client_cpu_s_per_gb.min():.3f}-{frame.client_cpu_s_per_gb.max():.3f}; GB = 10^9 B)")


def read_path(a, d: Path) -> None:
    size, block = a.size_mib << 20, a.block_kib << 10
    f = d / "bench.bin"
    make_file(f, size)
    print(f"read path: {a.block_kib} KiB reads, {a.threads} concurrent streams (stream k reads blocks k, k+T, ...), "
          f"{a.size_mib} MiB file {f}; rounds alternate emulator and fio; ratio = median of per-round ratios")
    print(f"  {'mode':<38} {'emulator MB/s':>14} {'fio MB/s':>10} {'ratio':>7}  (goal >= 0.90)")
    # Several passes per round: short runs would mostly time process start-up.
    for direct, label, loops in ((True, "O_DIRECT (device)", 2), (False, "buffered, file in page cache", 8)):
        if not direct:
            subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)   # warm the cache
        emu, fio = [], []
        for _ in range(a.rounds):   # alternate so drift hits both alike
            emu.append(emulator_read(f, size, a.threads, block, direct, loops))
            fio.append(fio_read(f, size, a.threads, block, direct, loops))
        ratio = statistics.median(e / g for e, g in zip(emu, fio))
        label = f"{label}, {loops} passes"
        print(f"  {label:<38} {statistics.median(emu):14.1f} {statistics.median(fio):10.1f} {ratio:7.3f}"
              f"   rounds emu={[round(x) for x in emu]} fio={[round(x) for x in fio]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="data/targets/local/storagebrief/bench")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--block-kib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compute-s", type=float, default=0.01)
    ap.add_argument("--accelerators", type=int, default=2)
    ap.add_argument("--capacity-counts", default="1,2,4,8,16")
    ap.add_argument("--only-client", action="store_true", help="skip the fio comparison (parts 2 and 3 only)")
    a = ap.parse_args()
    d = Path(a.dir).resolve()
    if not a.only_client:
        if not shutil.which("fio"):
            print("fio is not installed: the read-path comparison needs it (apt-get install fio)")
            return 1
        read_path(a, d)
    t = time.perf_counter()
    r = au_fast(d / "au", a.compute_s, a.accelerators)
    print(f"AU on a fast target (page cache), compute {a.compute_s * 1000:.0f} ms per batch, {a.accelerators} "
          f"accelerators, {r['steps']} steps, 3 repeats ({time.perf_counter() - t:.0f} s):")
    print(f"  {'AU %':>8} {'AU % without the emulator delays':>33} {'sleep overshoot us':>19}  (goal: AU without "
          "the emulator's delays >= 99 %)")
    print(f"  {r['au']:8.2f} {r['au_removed']:33.2f} {r['overshoot_us']:19.0f}")
    t = time.perf_counter()
    cap = client_capacity(d / "capacity", a.compute_s, [int(x) for x in a.capacity_counts.split(",")])
    print_capacity(cap, a.compute_s, time.perf_counter() - t)
    try:
        mpi.check_available("mpirun", "emulate")
    except mpi.MpiUnavailable as exc:
        print(f"launchers: MPI part skipped: {exc}")
        return 0
    t = time.perf_counter()
    ranks = client_capacity(d / "capacity", a.compute_s, [int(x) for x in a.capacity_counts.split(",")], "mpi")
    print("the same with every accelerator an MPI rank (launcher: mpi, this host):")
    print_capacity(ranks, a.compute_s, time.perf_counter() - t)
    both = cap.merge(ranks, on="accelerators", suffixes=("_fork", "_mpi"))
    print(f"  {'N':>3} {'AU % fork':>10} {'AU % mpi':>9} {'CPU s/GB fork':>14} {'CPU s/GB mpi':>13} {'mpi/fork CPU':>13}")
    for _, r in both.iterrows():
        print(f"  {int(r.accelerators):>3} {r.au_percent_fork:10.1f} {r.au_percent_mpi:9.1f} "
              f"{r.client_cpu_s_per_gb_fork:14.3f} {r.client_cpu_s_per_gb_mpi:13.3f} "
              f"{r.client_cpu_s_per_gb_mpi / r.client_cpu_s_per_gb_fork:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
