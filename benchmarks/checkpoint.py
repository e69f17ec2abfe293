"""Benchmark the checkpoint study's ranks against fio on the same target (prints ratios; not a test).

1. Save: N ranks (the study's forked ranks, studies/checkpoint/ranks.py) each write one file of S
   bytes in B-byte write()s of incompressible bytes, fsync it, then fsync the folder, from one
   barrier; the rate is all bytes ÷ the last rank's end (the study's honest figure). fio: N jobs,
   one file each, rw=write, bs=B, the same S, end_fsync=1, buffered (as the ranks write); its rate
   is all bytes ÷ the slowest job's runtime. Goal: ranks ÷ fio ≥ 0.90.
2. Restore: the same files read back with caches dropped first (drop_caches as root, else
   fadvise), one reader per rank in R-byte reads; fio: N jobs, rw=read, bs=R, invalidate=1 after
   the same cache drop. Goal: ranks ÷ fio ≥ 0.90.
3. The generator: kit.checkpoint.incompressible's own GB/s (one core) (what fills the ranks' buffers) ÷ the save rate of part 1.
   Goal ≥ 3 (MLPerf Storage v3.0 submissions were invalidated for a generator slower than the
   storage; the study fills its buffers before the clock, so this says what an inline generator
   would have cost).

Each part runs --repeats times alternating ranks and fio; the medians are compared.

Usage: python benchmarks/checkpoint.py [--dir DIR] [--ranks 4] [--size-mib 128] [--write-block-mib 32]
       [--read-block-mib 32] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from storagebrief.core.cache import cold_cache
from storagebrief.studies.checkpoint.ranks import RankPool
from storagebrief.studies.checkpoint.run import _generator_gb_per_s

MIB = 1 << 20


def _files(n: int, size: int) -> dict[int, tuple[int, list]]:
    return {r: (r, [(f"rank{r}.bin", size)]) for r in range(n)}


def _fresh(folder: Path) -> None:
    """Every save writes new files, as every checkpoint does (overwriting allocated blocks is faster)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()


def ranks_round(pool: RankPool, folder: Path, n: int, size: int, wblock: int, rblock: int) -> tuple[float, float]:
    """(save GB/s, restore GB/s) of the study's ranks: bytes over the last rank's end, from the barrier."""
    files = _files(n, size)
    _fresh(folder)
    start, got = pool.operate("save", folder, files, wblock)
    save = n * size / (max(r.end for r in got) - start) / 1e9
    cold_cache([folder])
    start, got = pool.operate("load", folder, files, rblock, 1)
    return save, n * size / (max(r.end for r in got) - start) / 1e9


def _fio(folder: Path, n: int, size: int, block: int, rw: str) -> float:
    cmd = ["fio", "--name=ckpt", f"--directory={folder}", "--filename_format=fio$jobnum.bin", f"--rw={rw}",
           f"--bs={block}", f"--size={size}", f"--numjobs={n}", "--ioengine=psync", "--direct=0",
           "--output-format=json"] + (["--end_fsync=1", "--refill_buffers=1"] if rw == "write" else ["--invalidate=1"])
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    side = "write" if rw == "write" else "read"
    slowest_s = max(j["job_runtime"] for j in out["jobs"]) / 1e3
    return sum(j[side]["io_bytes"] for j in out["jobs"]) / slowest_s / 1e9


def fio_round(folder: Path, n: int, size: int, wblock: int, rblock: int) -> tuple[float, float]:
    _fresh(folder)
    save = _fio(folder, n, size, wblock, "write")
    cold_cache([folder])
    return save, _fio(folder, n, size, rblock, "read")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="a folder on the target (default: a temporary one)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=128, help="one rank's file")
    ap.add_argument("--write-block-mib", type=int, default=32)
    ap.add_argument("--read-block-mib", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=a.dir))
    n, size, wb, rb = a.ranks, a.size_mib * MIB, a.write_block_mib * MIB, a.read_block_mib * MIB
    ours, theirs = [], []
    try:
        with RankPool(list(range(n)), min(wb, size)) as pool:
            for _ in range(a.repeats):
                ours.append(ranks_round(pool, base / "ranks", n, size, wb, rb))
                theirs.append(fio_round(base / "fio", n, size, wb, rb))
        generator = _generator_gb_per_s()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = lambda rows, i: statistics.median(r[i] for r in rows)   # noqa: E731
    print(f"target folder {a.dir or tempfile.gettempdir()}: {n} ranks × {a.size_mib} MiB, write {a.write_block_mib} MiB, "
          f"read {a.read_block_mib} MiB, {a.repeats} repeats (medians, GB/s = 10^9 B/s)")
    print(f"{'part':<10}{'ranks GB/s':>12}{'fio GB/s':>10}{'ratio':>8}  goal")
    for i, part in enumerate(("save", "restore")):
        print(f"{part:<10}{med(ours, i):>12.3f}{med(theirs, i):>10.3f}{med(ours, i) / med(theirs, i):>8.2f}  >= 0.90")
    print(f"{'generator':<10}{generator:>12.3f}{med(ours, 0):>10.3f}{generator / med(ours, 0):>8.2f}  >= 3 "
          "(generator ÷ the save rate)")


if __name__ == "__main__":
    main()
