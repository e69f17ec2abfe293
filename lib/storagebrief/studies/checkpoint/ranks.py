"""The writing ranks: one forked process each on this host, living for one run (saves then restores).

Each rank, before any clock: dies with its parent (PR_SET_PDEATHSIG), joins the run's cgroup (the
target's throttle) and fills its write buffer once (kit.checkpoint.incompressible) (incompressible bytes, reused
for every write, as DLIO does). Then per operation the parent sends it (op, folder, files) and all
ranks and the parent meet at a barrier; from its release each rank

  save  writes each of its files in `write_block` os.write()s, fsyncs and closes it, then fsyncs
        the checkpoint folder (directory fd) so its entries are durable;
  load  reads each file in `read_block` preads with `readers` threads;

and reports its start and end (CLOCK_MONOTONIC, system-wide on Linux, so the parent puts every
rank on one clock from the earliest release), its bytes, files and fsync calls. A failed or killed
rank stops the run: the barrier is broken, the others are terminated, RuntimeError says who.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...core import cgroups
from ...core.procs import die_with_parent, reap
from ...kit.checkpoint import incompressible

BARRIER_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RankResult:
    rank: int
    source_rank: int        # whose files it wrote (itself) or read (rank + shift)
    start: float            # CLOCK_MONOTONIC at its barrier release
    end: float              # CLOCK_MONOTONIC after its last fsync (save) or read (load)
    bytes: int
    files: int
    fsyncs: int


def _save(folder: Path, files: list[tuple[str, int]], buf: memoryview, block: int) -> tuple[int, int]:
    """Write and fsync every file, then the folder; returns (bytes, fsync calls)."""
    total = calls = 0
    for name, nbytes in files:
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            left = nbytes
            while left > 0:
                n = os.write(fd, buf[:min(block, left, len(buf))])
                left -= n
                total += n
            os.fsync(fd)
            calls += 1
        finally:
            os.close(fd)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
        calls += 1
    finally:
        os.close(fd)
    return total, calls


def _load(folder: Path, files: list[tuple[str, int]], block: int, readers: int) -> int:
    """Read every file whole in `block` preads, `readers` threads at once; returns the bytes read."""
    chunks = [(name, off, min(block, size - off)) for name, size in files for off in range(0, size, block)]
    local = threading.local()
    fds = {name: os.open(folder / name, os.O_RDONLY) for name, _ in files}

    def one(chunk) -> int:
        name, off, n = chunk
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(min(block, max(size for _, size in files)))
        got, view = 0, memoryview(buf)
        while got < n:
            r = os.preadv(fds[name], [view[got:n]], off + got)
            if r == 0:
                raise OSError(f"{folder / name}: short file at {off + got} (expected {n} more bytes)")
            got += r
        return got

    try:
        with ThreadPoolExecutor(max_workers=readers) as pool:
            return sum(pool.map(one, chunks))
    finally:
        for fd in fds.values():
            os.close(fd)


def _rank(rank: int, buf_bytes: int, procs_files: list[str], fault: dict | None, barrier, inbox, out_q) -> None:
    """One rank (a forked process): buffer once, then an operation per message until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C and stops us
    die_with_parent()
    try:
        if procs_files:
            cgroups.join(procs_files)
        buf = incompressible(buf_bytes)                # generated before any clock
        out_q.put(("ready", rank, None))
        while (msg := inbox.get()) is not None:
            op, folder, source, files, block, readers = msg
            barrier.wait(BARRIER_TIMEOUT_S)
            start = time.monotonic()
            if fault and fault.get("slow_rank") == rank:
                time.sleep(fault.get("delay_s", 0.5))    # test hook only (FAULT in run.py): a late rank
            if op == "save":
                nbytes, fsyncs = _save(Path(folder), files, buf, block)
            else:
                nbytes, fsyncs = _load(Path(folder), files, block, readers), 0
            out_q.put(("done", rank, RankResult(rank, source, start, time.monotonic(), nbytes, len(files), fsyncs)))
    except threading.BrokenBarrierError:
        out_q.put(("aborted", rank, "barrier broken (another rank failed)"))
    except BaseException:
        out_q.put(("error", rank, traceback.format_exc()))


class RankPool:
    """The run's rank processes; use as a context manager (they are always reaped)."""

    def __init__(self, ranks: list[int], buf_bytes: int, procs_files: list[str] | None = None,
                 fault: dict | None = None, start_timeout_s: float = 120.0):
        ctx = mp.get_context("fork")
        self.ranks = list(ranks)
        self.barrier = ctx.Barrier(len(self.ranks) + 1)       # the ranks and this process
        self.out_q = ctx.Queue()
        self.inboxes = {r: ctx.SimpleQueue() for r in self.ranks}
        self.procs = [ctx.Process(target=_rank, args=(r, buf_bytes, procs_files or [], fault, self.barrier,
                                                      self.inboxes[r], self.out_q),
                                  daemon=True, name=f"checkpoint-rank-{r}") for r in self.ranks]
        self.start_timeout_s = start_timeout_s
        self.ok = False

    def __enter__(self) -> "RankPool":
        for pr in self.procs:
            pr.start()
        self._collect("ready", self.start_timeout_s)
        return self

    def _dead(self, have) -> str | None:
        for r, pr in zip(self.ranks, self.procs):
            if r not in have and pr.exitcode is not None:
                code = pr.exitcode
                how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
                return f"checkpoint rank {r} died: {how}"
        return None

    def _collect(self, want: str, timeout_s: float) -> dict:
        got: dict = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < len(self.ranks):
            try:
                kind, rank, payload = self.out_q.get(timeout=0.5)
            except queue.Empty:
                why = self._dead(got) or (f"ranks not {want} after {timeout_s:.0f} s"
                                          if time.monotonic() > deadline else None)
                if why:
                    raise RuntimeError(why)
                continue
            if kind != want:
                raise RuntimeError(f"checkpoint rank {rank} failed:\n{payload}")
            got[rank] = payload
        return got

    def operate(self, op: str, folder: Path, files_by_rank: dict[int, tuple[int, list]], block: int,
                readers: int = 1) -> tuple[float, list[RankResult]]:
        """One save or load by every rank from one barrier; returns (release instant, results by rank).
        files_by_rank: rank -> (source rank, [(file name, bytes)])."""
        for r in self.ranks:
            source, files = files_by_rank[r]
            self.inboxes[r].put((op, str(folder), source, files, block, readers))
        self.barrier.wait(BARRIER_TIMEOUT_S)
        release = time.monotonic()
        got = self._collect("done", BARRIER_TIMEOUT_S)
        out = [got[r] for r in self.ranks]
        return min([release, *(r.start for r in out)]), out

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            for r in self.ranks:
                self.inboxes[r].put(None)
        else:
            self.barrier.abort()
            for pr in self.procs:
                if pr.is_alive():
                    pr.terminate()
        reap(self.procs, 10)
        self.out_q.close()
        self.out_q.cancel_join_thread()
