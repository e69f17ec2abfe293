"""Benchmark the checkpoint study's ranks against fio on the same target, at settings drawn at random (prints every
save of every round; not a test).

The reference is fio doing the ranks' work: the study's figure is only as good as its agreement with it.

1. Save: N ranks (the study's forked ranks, studies/checkpoint/ranks.py) each create one file of S
   bytes (O_CREAT|O_TRUNC: blocks allocated as written back), write it in B-byte write()s from one
   buffer filled before the clock, fsync it, then fsync the folder, from one barrier. fio does the same work:
   N jobs, one new file each created when the job opens it (create_on_open=1, fallocate=none: no blocks laid
   out before its clock), rw=write, bs=B, the same S, buffered, end_fsync=1 (inside fio's accounting since fio
   3.16), one buffer reused (fio's default; the ranks reuse theirs). One clock for both: all bytes ÷ the slowest
   job's (rank's) own start-to-end (the study's own figure, from the common barrier to the last rank's end, is
   printed beside it).
2. Restore: the same files read back after both sides' files were evicted from the page cache
   (fadvise DONTNEED of the side's files, not drop_caches: that frees the whole machine's cache, others'
   too, which the VM then hands to its host), one reader per rank in R-byte reads; fio: N jobs, rw=read,
   bs=R, invalidate=1.
3. The generator: kit.checkpoint.incompressible's own GB/s (one core, refilling a buffer already touched, per CPU
   second of its thread: the machine's other work takes wall time from it, not work) ÷ the ranks' save rate. Goal ≥ 3 (MLPerf Storage v3.0 submissions were invalidated for a generator slower
   than the storage). The study fills its buffers before the clock, so its save rate is not the generator's.

Drawn at random every round (an invocation's draws come from a fresh random source unless --draw-seed repeats
one, printed at the start), from these ranges:
  ranks            1-6 (both sides: N)
  save             128-768 MiB in all (S = save ÷ N, rounded down to whole write and read blocks: fio writes
                   and reads whole blocks only, so a 59 MiB file in 32 MiB blocks was 32 MiB to fio)
  write block      1, 2, 4, 8, 16, 32 or 64 MiB, at most S (B)
  read block       the same choices, at most S (R)
  target           one of the --dir folders (default: one temporary folder)
  seeds            each side its own, 1-2^31: the ranks' buffers (rank r: seed + r, kit.checkpoint) and fio's
                   --randseed
  order            which side goes first: drawn for round 1, then alternating every round; within a round the
                   saves alternate too (A B B A A B ...), so that both sides meet the machine's drift alike
--ranks, --save-mib, --write-block-mib and --read-block-mib pin a setting (the header says so).

A round is `--saves` saves (and restores) per side, the study's protocol (its `saves` knob: each figure is the mean
over its saves, MLPerf's too). The goal, per round: ranks ÷ fio within 0.8-1.25 (issue 59) on fio's clock.

Like machine state for like work (issues 45, 59): this VM hands free pages back to its host a moment after they
are freed (free-page reporting, docs/pitfalls.md), and a buffered write into such pages costs a host fault per
page. Before every save of either side a scratch file of the save's bytes plus the writers' buffers is written
and deleted in the side's own folder (core.memory_state.prefault; `--memory-prep none`: nothing), held until the
kernel's next reporting pass where it counts them (at most 2.5 s), with both sides' writers already started and
waiting (the ranks at their start line, fio's jobs at a gate before their clocks: exec_prerun), so that both begin
writing right after it. A pass between the preparation's end and the
save's end may have handed the prepared pages back: that save is run again (at most 3 tries; every try is
printed). Every save line gives what the device wrote during the save and after it until `sync` (/proc/diskstats,
device-wide: other processes' writes count too), the slowest rank's / job's write() and fsync seconds (fio: its
write latencies summed, the rest of its runtime being its end_fsync), the preparation's seconds, the passes, and the save's CPU seconds per GB (all ranks' / all
jobs' user + system): on this VM a write() into pages the host took back costs a host fault per page, which the
guest counts as the writer's system time, so a save with 2-4× a warm save's CPU per GB wrote into cold pages.

Usage: python benchmarks/checkpoint.py [--dir DIR ...] [--rounds 5] [--saves 4] [--draw-seed N] [--dry-run]
       [--ranks N] [--save-mib M] [--write-block-mib B] [--read-block-mib R] [--memory-prep scratch|none]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
SIDES = ("ranks", "fio")
RANKS = (1, 6)
SAVE_MIB = (128, 768)
BLOCKS_MIB = (1, 2, 4, 8, 16, 32, 64)
BAND = (0.8, 1.25)
TRIES = 3           # a save is run at most this often when a reporting pass spoils its memory state


def draw_round(rng, dirs: list[Path], pin: dict) -> dict:
    """One round's settings, drawn from the ranges the module's doc states (a pinned one as given)."""
    n = pin.get("ranks") or rng.randint(*RANKS)
    per = max(1, (pin.get("save_mib") or rng.randint(*SAVE_MIB)) // n)
    blocks = [b for b in BLOCKS_MIB if b <= per] or [per]
    write, read = pin.get("write_mib") or rng.choice(blocks), pin.get("read_mib") or rng.choice(blocks)
    whole = math.lcm(write, read)       # fio writes and reads whole blocks only: a 59 MiB file in 32 MiB blocks
    return {"ranks": n, "size_mib": max(whole, per // whole * whole), "write_mib": write, "read_mib": read,
            "dir": rng.choice(dirs), "seeds": dict(zip(SIDES, rng.sample(range(1, 2 ** 31), 2)))}


def draw_rounds(rng, dirs: list[Path], rounds: int, pin: dict | None = None) -> list[dict]:
    """Every round drawn afresh; which side goes first drawn once and alternated every round."""
    first = rng.randrange(2)
    return [{"round": i + 1, **draw_round(rng, dirs, pin or {}),
             "order": [SIDES[(first + i) % 2], SIDES[(first + i + 1) % 2]]} for i in range(rounds)]


def save_order(order: list[str], saves: int) -> list[str]:
    """The sides' saves in run order within a round: A B, B A, A B, ..."""
    return [side for j in range(saves) for side in (order if j % 2 == 0 else order[::-1])]


def describe(r: dict) -> str:
    return (f"round {r['round']}: {r['ranks']} ranks × {r['size_mib']} MiB = {r['ranks'] * r['size_mib'] * MIB / 1e6:,.0f}"
            f" MB a save, write {r['write_mib']} MiB, read {r['read_mib']} MiB, target {r['dir']}; seeds ranks "
            f"{r['seeds']['ranks']}, fio {r['seeds']['fio']}; first: {r['order'][0]}")


# --------------------------------------------------------------------------- the device and the memory state
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
    """What the device wrote during a side's save and after it, until `sync` returned (MB, 10^6 B)."""

    def __init__(self, device: str | None):
        self.device, self.during_mb, self.after_mb = device, None, None

    def __enter__(self):
        os.sync()                                   # earlier saves' dirty pages are not counted here
        self.b0 = written_bytes(self.device)
        return self

    def __exit__(self, *exc) -> None:
        b1 = written_bytes(self.device)
        os.sync()
        b2 = written_bytes(self.device)
        if None not in (self.b0, b1, b2):
            self.during_mb, self.after_mb = (b1 - self.b0) / 1e6, (b2 - b1) / 1e6


def _fresh(folder: Path) -> None:
    """Every save writes new files, as every checkpoint does (overwriting allocated blocks is faster)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


class Side:
    """One side's save then restore, from like memory state: prepare, save (timed by the side), evict, restore."""

    def __init__(self, r: dict, folder: Path, device: str | None, prep: str):
        self.r, self.folder, self.device, self.prep = r, folder, device, prep
        self.n, self.size = r["ranks"], r["size_mib"] * MIB
        self.wb, self.rb = min(r["write_mib"] * MIB, self.size), min(r["read_mib"] * MIB, self.size)
        # both sides' saves start from the same memory state: the save's bytes backed by the host, and as much again
        # as the writers' buffers (both sides' writers hold theirs before the preparation: a margin)
        self.prep_bytes = self.n * self.size + self.n * self.wb

    def start(self) -> None:
        """The side's writers started and waiting, before the preparation (the ranks wait at their start line)."""

    def run(self) -> dict:
        from storagebrief.core.cache import cold_cache
        from storagebrief.core.memory_state import NONE, prefault, reporting_passes

        _fresh(self.folder)
        with DeviceWrites(self.device) as dev:
            self.start()
            memory = prefault(self.folder, self.prep_bytes) if self.prep == "scratch" else NONE
            passes = reporting_passes()
            got = self.save()
            now = reporting_passes()
        cold_cache([self.folder], "files")
        return {**got, "bytes": self.n * self.size, "restore": self.restore(), "device_mb_during": dev.during_mb,
                "device_mb_after": dev.after_mb, "prep_s": memory.seconds, "passes": None if None in (passes, now) else now - passes}


class Ranks(Side):
    def __init__(self, pool, *args):
        super().__init__(*args)
        self.pool, self.files = pool, {r: (r, [(f"rank{r}.bin", self.size)]) for r in range(self.n)}

    def save(self) -> dict:
        start, got = self.pool.operate("save", self.folder, self.files, self.wb)
        slowest = max(got, key=lambda x: x.end - x.start)
        total = self.n * self.size
        return {"save": total / (slowest.end - slowest.start) / 1e9,
                "study_clock": total / (max(x.end for x in got) - start) / 1e9,
                "write_s": slowest.write_s, "fsync_s": slowest.fsync_s, "cpu_s": sum(x.cpu_s for x in got)}

    def restore(self) -> float:
        start, got = self.pool.operate("load", self.folder, self.files, self.rb, 1)
        return self.n * self.size / (max(x.end for x in got) - start) / 1e9


FIO_SAVE = ["--end_fsync=1", "--fallocate=none", "--create_on_open=1"]   # the ranks' work (docstring, part 1)


class Fio(Side):
    """fio's jobs, held at a gate before their clocks while the preparation runs (exec_prerun, which fio's runtime
    leaves out): without it fio's 0.3-1 s of start-up fell between the preparation and its writes, where a reporting
    pass found the prepared pages in 8 of 10 fio tries of one round and 1 of 5 of the ranks' (issue 59)."""

    def _cmd(self, rw: str, block: int) -> list[str]:
        return ["fio", "--name=ckpt", f"--directory={self.folder}", "--filename_format=fio$jobnum.bin", f"--rw={rw}",
                f"--bs={block}", f"--size={self.size}", f"--numjobs={self.n}", "--ioengine=psync", "--direct=0",
                f"--randseed={self.r['seeds']['fio']}", "--output-format=json"] + (
                    FIO_SAVE if rw == "write" else ["--invalidate=1"])

    @staticmethod
    def _figures(out: dict, side: str) -> dict:
        slowest = max(out["jobs"], key=lambda j: j["job_runtime"])
        seconds = slowest["job_runtime"] / 1e3
        # fio's own timer per write() call (lat: submission to completion; psync: the call itself)
        in_calls = slowest[side]["lat_ns"]["mean"] * slowest[side]["lat_ns"]["N"] / 1e9
        rate = sum(j[side]["io_bytes"] for j in out["jobs"]) / seconds / 1e9
        cpu = sum((j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1e3 for j in out["jobs"])
        return {"save": rate, "study_clock": rate, "write_s": in_calls, "fsync_s": max(0.0, seconds - in_calls),
                "cpu_s": cpu}

    def start(self) -> None:
        self.gate = Path(tempfile.mkdtemp(prefix="fio-gate-", dir=self.folder.parent))
        os.mkfifo(self.gate / "go")
        self.go = os.open(self.gate / "go", os.O_RDWR)    # held open: each job's read waits for its own line
        prerun = f"touch {self.gate}/ready.$$; read line < {self.gate}/go"
        self.proc = subprocess.Popen(self._cmd("write", self.wb) + [f"--exec_prerun={prerun}",
                                                                   f"--output={self.gate}/out.json"],
                                     cwd=self.gate, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while len(list(self.gate.glob("ready.*"))) < self.n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"fio's {self.n} jobs did not reach their gate: {self.proc.communicate()[1][-500:]}")
            time.sleep(0.005)

    def save(self) -> dict:
        try:
            os.write(self.go, b"\n" * self.n)           # a line for every job: all of them start now
            err = self.proc.communicate()[1]
        finally:
            os.close(self.go)
        if self.proc.returncode:
            raise RuntimeError(f"fio failed ({self.proc.returncode}): {err[-500:]}")
        out = json.loads((self.gate / "out.json").read_text())
        shutil.rmtree(self.gate, ignore_errors=True)
        return self._figures(out, "write")

    def restore(self) -> float:
        out = json.loads(subprocess.run(self._cmd("read", self.rb), capture_output=True, text=True, check=True).stdout)
        return self._figures(out, "read")["save"]


# --------------------------------------------------------------------------- a round, the printout
def run_round(r: dict, saves: int, prep: str) -> list[dict]:
    """Every save (and restore) of both sides in run order, the repeated tries too ("kept": False)."""
    from storagebrief.studies.checkpoint.ranks import RankPool

    base = r["dir"]
    device = device_of(base)
    out: list[dict] = []
    wb = min(r["write_mib"], r["size_mib"]) * MIB
    with RankPool(list(range(r["ranks"])), wb, store={"folder": str(base)}, seed=r["seeds"]["ranks"]) as pool:
        sides = {"ranks": Ranks(pool, r, base / "ranks", device, prep), "fio": Fio(r, base / "fio", device, prep)}
        for k, side in enumerate(save_order(r["order"], saves)):
            for attempt in range(TRIES):
                got = {"round": r["round"], "save_no": k // 2 + 1, "side": side, "try": attempt,
                       **sides[side].run()}
                got["kept"] = not got["passes"] or attempt == TRIES - 1
                out.append(got)
                print_save(got)
                if got["kept"]:
                    break
        shutil.rmtree(base / "ranks", ignore_errors=True)
        shutil.rmtree(base / "fio", ignore_errors=True)
    return out


def _mb(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


HEADER = (f"{'round':<6}{'save':>5} {'side':<6}{'GB/s':>8}{'study clock':>12}{'write() s':>10}{'fsync s':>9}"
          f"{'restore GB/s':>13}{'device MB in save':>18}{'after (sync)':>13}{'prep s':>8}{'passes':>7}{'CPU s/GB':>9}")


def print_save(s: dict) -> None:
    """One save of one side: save GB/s on fio's clock, the study's clock, its phases, its restore and memory state."""
    label = f"{s['save_no']}" + (f".{s['try']}" if s["try"] else "")
    passes = "n/a" if s["passes"] is None else str(s["passes"])
    note = "" if s["kept"] else "  (run again: a reporting pass inside the save)"
    if s["kept"] and s["passes"]:
        note = "  (kept: passes in every try)"
    print(f"{s['round']:<6}{label:>5} {s['side']:<6}{s['save']:>8.3f}{s['study_clock']:>12.3f}{s['write_s']:>10.3f}"
          f"{s['fsync_s']:>9.3f}{s['restore']:>13.3f}{_mb(s['device_mb_during']):>18}{_mb(s['device_mb_after']):>13}"
          f"{s['prep_s']:>8.2f}{passes:>7}{s['cpu_s'] / s['bytes'] * 1e9:>9.2f}{note}", flush=True)


def round_figures(saves: list[dict]) -> dict:
    """Per side, the mean over its kept saves (the study's figure is such a mean); the ratios ranks ÷ fio."""
    kept = [s for s in saves if s["kept"]]
    mean = {side: {k: statistics.fmean(s[k] for s in kept if s["side"] == side)
                   for k in ("save", "restore", "write_s", "fsync_s")} for side in SIDES}
    return {**mean, "save_ratio": mean["ranks"]["save"] / mean["fio"]["save"],
            "restore_ratio": mean["ranks"]["restore"] / mean["fio"]["restore"]}


def print_round(r: dict, f: dict) -> None:
    a, b = f["ranks"], f["fio"]
    inside = BAND[0] <= f["save_ratio"] <= BAND[1]
    print(f"round {r['round']} means: save ranks {a['save']:.3f} / fio {b['save']:.3f} GB/s = {f['save_ratio']:.2f}"
          f" ({'within' if inside else 'OUTSIDE'} {BAND[0]}-{BAND[1]}); write() s {a['write_s']:.3f} / "
          f"{b['write_s']:.3f}; fsync s {a['fsync_s']:.3f} / {b['fsync_s']:.3f}; restore {a['restore']:.3f} / "
          f"{b['restore']:.3f} GB/s = {f['restore_ratio']:.2f}", flush=True)


def _summary(label: str, values: list[float], goal: str) -> None:
    print(f"{label:<16}{statistics.median(values):>8.2f} ({min(values):.2f}–{max(values):.2f})  "
          f"{' '.join(f'{v:.2f}' for v in values)}  {goal}")


# --------------------------------------------------------------------------- arguments, main
def arguments(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, action="append", help="a folder on a target (repeat it: each round draws "
                                                               "one; default: a temporary folder)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--saves", type=int, default=4, help="saves (and restores) per side per round")
    ap.add_argument("--draw-seed", type=int, help="repeat an invocation's draws (printed at its start)")
    ap.add_argument("--dry-run", action="store_true", help="print the drawn rounds; run nothing")
    ap.add_argument("--ranks", type=int, help=f"pin the ranks (drawn from {RANKS[0]}-{RANKS[1]})")
    ap.add_argument("--save-mib", type=int, help=f"pin the whole save (drawn from {SAVE_MIB[0]}-{SAVE_MIB[1]} MiB)")
    ap.add_argument("--write-block-mib", type=int, help="pin the write block (drawn: 1-64 MiB, powers of 2)")
    ap.add_argument("--read-block-mib", type=int, help="pin the read block (drawn: 1-64 MiB, powers of 2)")
    ap.add_argument("--memory-prep", choices=("scratch", "none"), default="scratch",
                    help="before each save: scratch (a scratch file of the save's bytes plus the write buffers "
                         "written and deleted in the side's folder) or none")
    a = ap.parse_args(argv)
    for k in ("rounds", "saves", "ranks", "save_mib", "write_block_mib", "read_block_mib"):
        v = getattr(a, k)
        if v is not None and v < 1:
            raise SystemExit(f"--{k.replace('_', '-')} {v}: not allowed: at least 1")
    for d in a.dir or []:
        if not d.is_dir():
            raise SystemExit(f"--dir {d}: not allowed: an existing directory on the target to measure")
    if not a.dry_run and shutil.which("fio") is None:
        raise SystemExit("fio: not found on PATH; the reference side of this benchmark is fio (apt install fio)")
    return a


def main(argv=None) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # a killed benchmark removes its folders too
    a = arguments(argv)
    draw_seed = a.draw_seed if a.draw_seed is not None else random.SystemRandom().randrange(2 ** 32)
    pin = {k: v for k, v in (("ranks", a.ranks), ("save_mib", a.save_mib), ("write_mib", a.write_block_mib),
                             ("read_mib", a.read_block_mib)) if v}
    dirs = [Path(d) for d in a.dir or [Path(tempfile.gettempdir())]]
    plan = draw_rounds(random.Random(draw_seed), dirs, a.rounds, pin)
    print(f"{a.rounds} rounds of {a.saves} saves per side drawn with --draw-seed {draw_seed}"
          + (f"; pinned: {', '.join(f'{k} {v}' for k, v in pin.items())}" if pin else "")
          + f"; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if a.dry_run:
        for r in plan:
            print(describe(r))
        return
    from storagebrief.studies.checkpoint.run import _generator_gb_per_s

    made = {d: Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=d)).resolve() for d in dict.fromkeys(dirs)}
    figures = []
    try:
        print(HEADER)
        for r in plan:
            r = {**r, "dir": made[r["dir"]]}
            print(describe(r))
            f = round_figures(run_round(r, a.saves, a.memory_prep))
            print_round(r, f)
            figures.append(f)
        generator = _generator_gb_per_s()
    finally:
        for d in made.values():
            shutil.rmtree(d, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          "GB/s = 10^9 B/s")
    print(f"{'part':<16}{'median (range)':>22}  every round")
    ratios = [f["save_ratio"] for f in figures]
    inside = sum(BAND[0] <= x <= BAND[1] for x in ratios)
    _summary("save ranks÷fio", ratios, f"goal: every round within {BAND[0]}-{BAND[1]} ({inside} of {len(ratios)})")
    _summary("write() s r÷f", [f["ranks"]["write_s"] / f["fio"]["write_s"] for f in figures], "seconds, ranks ÷ fio")
    _summary("fsync s r÷f", [f["ranks"]["fsync_s"] / f["fio"]["fsync_s"] for f in figures], "seconds, ranks ÷ fio")
    _summary("restore r÷f", [f["restore_ratio"] for f in figures], "goal >= 0.90")
    _summary("generator÷save", [generator / f["ranks"]["save"] for f in figures],
             f"goal >= 3 (generator {generator:.2f} GB/s per CPU second, one core)")


if __name__ == "__main__":
    main()
