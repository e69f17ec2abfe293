"""Benchmark the checkpoint study's ranks against fio on the same target (prints ratios; not a test).

1. Save: N ranks (the study's forked ranks, studies/checkpoint/ranks.py) each create one file of S
   bytes (O_CREAT|O_TRUNC: blocks allocated as written back), write it in B-byte write()s from one
   buffer filled before the clock, fsync it, then fsync the folder, from one barrier; the rate is all
   bytes ÷ the last rank's end (the study's honest figure). fio does the same work: N jobs, one new
   file each created when the job opens it (create_on_open=1, fallocate=none: no blocks laid out before
   its clock, as the ranks have none), rw=write, bs=B, the same S, buffered, end_fsync=1 (inside fio's
   accounting since fio 3.16), one buffer reused (fio's default; the ranks reuse theirs); its rate is all
   bytes ÷ the slowest job's runtime. Goal: ranks ÷ fio ≥ 0.90.
   Before this, fio ran with its default fallocate (blocks laid out as unwritten extents before its
   clock, converted as written) and refill_buffers, while the ranks allocated inside theirs: the two
   did not do the same work (docs/testing.md).
2. Restore: the same files read back with caches dropped first (drop_caches as root, else
   fadvise), one reader per rank in R-byte reads; fio: N jobs, rw=read, bs=R, invalidate=1 after
   the same cache drop. Goal: ranks ÷ fio ≥ 0.90.
3. The generator: kit.checkpoint.incompressible's own GB/s (one core) (what fills the ranks' buffers) ÷ the
   save rate of part 1. Goal ≥ 3 (MLPerf Storage v3.0 submissions were invalidated for a generator slower
   than the storage). The study fills its buffers before the clock, so its save rate is not the
   generator's; below 3 it means a loader that generated its bytes inline on one core would be limited
   by the generator, not the storage, on this machine.

Every round is printed for both sides, with what the device itself wrote (/proc/diskstats of the
folder's block device, sectors written × 512; device-wide, so other processes' writes count too):
during the side's run and after it (until `sync`), so a rate whose bytes reached the device after its
clock stopped shows. The side that goes first alternates from round to round (ranks, then fio, then fio, then
ranks, ...): the device's rate swings from one side's run to the next. Two clocks for the ranks: the study's (all bytes ÷ the last rank's end, from the
common barrier) and fio's (all bytes ÷ the slowest rank's own start-to-end); the save ratio compares
fio with the ranks on fio's clock. The summary gives medians and ranges over rounds (ranks and fio
alternate).

Like memory state for like work (issue 45): this VM hands free pages back to its host a moment after they
are freed (free-page reporting, docs/pitfalls.md), and a buffered write into such pages costs a host fault
per page, so the side that happened to reuse just-freed pages won (ratio 0.39 ↔ 3.6 with run order). Each
side's save now starts right after a scratch file of the save's bytes plus the writers' buffers was written
and deleted in its own folder (core.memory_state.prefault; `--memory-prep none`: as before); where the
kernel counts its reporting passes the scratch file is held open until the next pass (at most 2.5 s), so
that the save has the ~2 s reporting delay to itself (fio needs 0.3-0.5 s to start its jobs: without the
hold, 10 of 22 fio saves met a pass, mostly writing into cold pages; with it, 1 of 31). Each round prints the slowest rank's /
job's own write() and fsync seconds (the ranks' timers; fio's write latencies summed, the rest of its
runtime being its end_fsync), the preparation's seconds (the hold included), and the reporting passes the
kernel made from the preparation's end to the save's end: a pass there may have handed the prepared pages
back, and the round is run again (at most 3 tries; every try is printed).

Usage: python benchmarks/checkpoint.py [--dir DIR] [--ranks 4] [--size-mib 128] [--write-block-mib 32]
       [--read-block-mib 32] [--repeats 5] [--memory-prep scratch|none]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from storagebrief.core.cache import cold_cache
from storagebrief.core.memory_state import NONE, Prepared, prefault, reporting_passes
from storagebrief.studies.checkpoint.ranks import RankPool
from storagebrief.studies.checkpoint.run import _generator_gb_per_s

MIB = 1 << 20
TRIES = 3           # a round is run at most this often when reporting passes spoil its memory state


def _files(n: int, size: int) -> dict[int, tuple[int, list]]:
    return {r: (r, [(f"rank{r}.bin", size)]) for r in range(n)}


def _fresh(folder: Path) -> None:
    """Every save writes new files, as every checkpoint does (overwriting allocated blocks is faster)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()


def device_of(folder: Path) -> str | None:
    """The /proc/diskstats name of the block device holding `folder` (None: not a block device)."""
    st = os.stat(folder)
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    return link.resolve().name if link.exists() else None


def written_bytes(device: str | None) -> int | None:
    """Bytes the device has written since boot (diskstats: sectors written × 512)."""
    if device is None:
        return None
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) > 9 and f[2] == device:
            return int(f[9]) * 512
    return None


class DeviceWrites:
    """What the device wrote during a side's run and after it, until `sync` returned (MB, 10^6 B)."""

    def __init__(self, device: str | None):
        self.device, self.during_mb, self.after_mb = device, None, None

    def __enter__(self):
        os.sync()                                   # earlier rounds' dirty pages are not counted here
        self.b0 = written_bytes(self.device)
        return self

    def __exit__(self, *exc) -> None:
        b1 = written_bytes(self.device)
        os.sync()
        b2 = written_bytes(self.device)
        if None not in (self.b0, b1, b2):
            self.during_mb, self.after_mb = (b1 - self.b0) / 1e6, (b2 - b1) / 1e6


def _since(passes: int | None) -> int | None:
    now = reporting_passes()
    return None if None in (passes, now) else now - passes


def prepare_memory(folder: Path, nbytes: int, how: str) -> Prepared:
    """The side's memory state just before its save (core.memory_state): the same for both sides."""
    return prefault(folder, nbytes) if how == "scratch" else NONE


def ranks_round(pool: RankPool, folder: Path, n: int, size: int, wblock: int, rblock: int,
                device: str | None, prep: str, prep_bytes: int) -> dict:
    """Save and restore GB/s of the study's ranks: bytes over the last rank's end, from the barrier."""
    files = _files(n, size)
    _fresh(folder)
    with DeviceWrites(device) as dev:
        memory = prepare_memory(folder, prep_bytes, prep)
        launched, passes = time.monotonic(), reporting_passes()
        start, got = pool.operate("save", folder, files, wblock)
        passes = _since(passes)
    save = n * size / (max(r.end for r in got) - start) / 1e9
    # fio's clock: bytes ÷ the slowest job's own runtime (its start to its end, not from a common start)
    slowest = max(got, key=lambda r: r.end - r.start)
    own = n * size / (slowest.end - slowest.start) / 1e9
    cold_cache([folder])
    start, got = pool.operate("load", folder, files, rblock, 1)
    return {"save": save, "save_own_clock": own, "restore": n * size / (max(r.end for r in got) - start) / 1e9,
            "device_mb_during": dev.during_mb, "device_mb_after": dev.after_mb,
            "write_s": slowest.write_s, "fsync_s": slowest.fsync_s, "memory": memory,
            "prep_gap_s": launched - memory.ended if memory.ended else None, "passes": passes}


FIO_SAVE = ["--end_fsync=1", "--fallocate=none", "--create_on_open=1"]   # the ranks' work (docstring, part 1)


def _fio(folder: Path, n: int, size: int, block: int, rw: str) -> tuple[float, float, float]:
    """(GB/s on fio's clock, the slowest job's seconds in write() calls, the rest of its runtime: the fsync)."""
    cmd = ["fio", "--name=ckpt", f"--directory={folder}", "--filename_format=fio$jobnum.bin", f"--rw={rw}",
           f"--bs={block}", f"--size={size}", f"--numjobs={n}", "--ioengine=psync", "--direct=0",
           "--output-format=json"] + (FIO_SAVE if rw == "write" else ["--invalidate=1"])
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    side = "write" if rw == "write" else "read"
    slowest = max(out["jobs"], key=lambda j: j["job_runtime"])
    slowest_s = slowest["job_runtime"] / 1e3
    # fio's own timer per write() call (lat: submission to completion; psync: the call itself)
    in_calls = slowest[side]["lat_ns"]["mean"] * slowest[side]["lat_ns"]["N"] / 1e9
    return (sum(j[side]["io_bytes"] for j in out["jobs"]) / slowest_s / 1e9, in_calls,
            max(0.0, slowest_s - in_calls))


def fio_round(folder: Path, n: int, size: int, wblock: int, rblock: int, device: str | None, prep: str,
              prep_bytes: int) -> dict:
    _fresh(folder)
    with DeviceWrites(device) as dev:
        memory = prepare_memory(folder, prep_bytes, prep)
        launched, passes = time.monotonic(), reporting_passes()
        save, write_s, fsync_s = _fio(folder, n, size, wblock, "write")
        passes = _since(passes)
    cold_cache([folder])
    return {"save": save, "save_own_clock": save, "restore": _fio(folder, n, size, rblock, "read")[0],
            "device_mb_during": dev.during_mb, "device_mb_after": dev.after_mb, "write_s": write_s,
            "fsync_s": fsync_s, "memory": memory, "prep_gap_s": launched - memory.ended if memory.ended else None,
            "passes": passes}


def _mb(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def _spoiled(pair: tuple[dict, dict]) -> bool:
    """A reporting pass between a side's preparation and its save's end: its memory state is not known."""
    return any(r["passes"] for r in pair)


def print_rounds(rounds: list[dict]) -> None:
    """Every round in run order, both sides, repeated ones too; write() s / fsync s: the slowest rank's (job's)
    own timers."""
    print(f"{'round':<8}{'side':<7}{'save GB/s':>10}{'fio clock':>10}{'write() s':>10}{'fsync s':>9}"
          f"{'restore GB/s':>13}{'device MB in run':>17}{'after (sync)':>13}{'prep s':>8}{'passes':>7}  ratio")
    for rd in rounds:
        a, b = rd["ranks"], rd["fio"]
        label = f"{rd['round']}" + (f".{rd['try']}" if rd["try"] else "")
        for side in rd["order"]:
            r = rd[side]
            passes = "n/a" if r["passes"] is None else str(r["passes"])
            last = side == rd["order"][-1]
            ratio = f"  {a['save_own_clock'] / b['save']:.2f}" if last else ""
            if last and not rd["kept"]:
                ratio += "  (repeated: a reporting pass inside a save)"
            elif last and _spoiled((a, b)):
                ratio += "  (kept: passes in every try)"
            print(f"{label:<8}{side:<7}{r['save']:>10.3f}{r['save_own_clock']:>10.3f}{r['write_s']:>10.3f}"
                  f"{r['fsync_s']:>9.3f}{r['restore']:>13.3f}{_mb(r['device_mb_during']):>17}"
                  f"{_mb(r['device_mb_after']):>13}{r['memory'].seconds:>8.2f}{passes:>7}{ratio}", flush=True)


def _summary(label: str, a: list[float], b: list[float], goal: str) -> None:
    ratios = [x / y for x, y in zip(a, b)]
    print(f"{label:<10}{statistics.median(a):>10.3f} ({min(a):.3f}–{max(a):.3f}){statistics.median(b):>9.3f} "
          f"({min(b):.3f}–{max(b):.3f}){statistics.median(ratios):>7.2f} ({min(ratios):.2f}–{max(ratios):.2f})  {goal}")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # a killed benchmark removes its folder too
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None, help="a folder on the target (default: a temporary one)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=128, help="one rank's file")
    ap.add_argument("--write-block-mib", type=int, default=32)
    ap.add_argument("--read-block-mib", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--memory-prep", choices=("scratch", "none"), default="scratch",
                    help="before each side's save: scratch (a scratch file of the save's bytes plus the write "
                         "buffers written and deleted in the side's folder) or none (as before issue 45)")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=a.dir))
    n, size, wb, rb = a.ranks, a.size_mib * MIB, a.write_block_mib * MIB, a.read_block_mib * MIB
    rounds: list[dict] = []
    device = device_of(base)
    # both sides' saves start from the same memory state: the save's bytes and the writers' buffers (fio
    # allocates its n buffers after the preparation; the ranks made theirs before) backed by the host
    prep_bytes = n * size + n * min(wb, size)
    try:
        with RankPool(list(range(n)), min(wb, size), store={"folder": str(base)}) as pool:   # a directory store
            runs = {"ranks": lambda: ranks_round(pool, base / "ranks", n, size, wb, rb, device, a.memory_prep,
                                                 prep_bytes),
                    "fio": lambda: fio_round(base / "fio", n, size, wb, rb, device, a.memory_prep, prep_bytes)}
            for i in range(1, a.repeats + 1):
                # which side goes first alternates: this virtio disk's buffered-write rate swings 0.9-3.3 GB/s
                # from one side's run to the next, and with a fixed order the side that went first was the
                # slower one in most rounds (ranks first: 0.58x fio; fio first: 1.4-2.2x), whichever it was
                order = ("ranks", "fio") if i % 2 else ("fio", "ranks")
                for attempt in range(TRIES):
                    rd = {"round": i, "try": attempt, "order": order, **{side: runs[side]() for side in order}}
                    # a round whose memory state a reporting pass may have changed is run again (at most TRIES)
                    rd["kept"] = not _spoiled((rd["ranks"], rd["fio"])) or attempt == TRIES - 1
                    rounds.append(rd)
                    if rd["kept"]:
                        break
        generator = _generator_gb_per_s()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"target folder {a.dir or tempfile.gettempdir()} (device {device or 'n/a'}): {n} ranks × {a.size_mib} MiB "
          f"= {n * size / 1e6:,.0f} MB a save, write {a.write_block_mib} MiB, read {a.read_block_mib} MiB, "
          f"{a.repeats} rounds (GB/s = 10^9 B/s); memory before each save: "
          f"{rounds[0]['ranks']['memory'].describe() if rounds else 'n/a'}")
    print_rounds(rounds)
    kept = [rd for rd in rounds if rd["kept"]]
    ours, theirs = [rd["ranks"] for rd in kept], [rd["fio"] for rd in kept]
    if len(kept) < len(rounds):
        print(f"{len(rounds) - len(kept)} round(s) repeated: a free-page reporting pass fell between a side's "
              "preparation and its save's end; the summary is over the kept rounds")
    print(f"{'part':<10}{'ranks GB/s median (range)':>26}{'fio':>18}{'ratio':>14}  goal")
    # save on one clock: the slowest job's (rank's) own runtime, as fio counts (the study's figure, from the
    # common barrier to the last end, is the 'save GB/s' column of the rounds)
    _summary("save", [r["save_own_clock"] for r in ours], [r["save"] for r in theirs], ">= 0.90 (fio's clock); issue 45: 0.8–1.25")
    # where the save ratio comes from: each phase's seconds, ranks ÷ fio (> 1: the ranks took longer)
    _summary("write() s", [r["write_s"] for r in ours], [r["write_s"] for r in theirs], "seconds, ranks ÷ fio")
    _summary("fsync s", [r["fsync_s"] for r in ours], [r["fsync_s"] for r in theirs], "seconds, ranks ÷ fio")
    _summary("restore", [r["restore"] for r in ours], [r["restore"] for r in theirs], ">= 0.90")
    saves = [r["save"] for r in ours]
    _summary("generator", [generator] * len(saves), saves, ">= 3 (generator ÷ the ranks' save rate)")


if __name__ == "__main__":
    main()
