"""Emulated accelerators: one forked process each, with its own loader, meeting at a barrier every step.

Each step an accelerator

  1. takes the next batch from its loader (waits if the data is not read yet),
  2. "computes": sleeps for the workload's compute time per batch (the only
     stand-in for work; the sleep's overshoot is measured),
  3. optionally writes a checkpoint (rank 0, every N steps),
  4. meets the other accelerators at a barrier (the all-reduce), so the
     slowest sets the pace.

At the end each reports its CPU seconds over the run (user + system, its loader
threads included) and the CPUs it may run on: the client's own CPU (limits.py).

The loader keeps running across epoch boundaries (like persistent PyTorch
workers that prefetch the next epoch): with the scaled-down quick datasets a
per-epoch restart would otherwise dominate the few steps an epoch has.

A failed or killed accelerator stops the run: the barrier is broken, the other
accelerators are terminated, and RuntimeError names who failed and why.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import resource
import signal
import socket
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from ...core import cgroups
from ...core.procs import die_with_parent, reap
from ...kit.client_check import apply_affinity
from .loader import ALIGN, Loader, batch_plan

BARRIER_TIMEOUT_S = 600.0


def warm_up(block: int, odirect: bool) -> None:
    """Run the read path once on an in-memory file, before joining the cgroup.

    drop_caches evicts code pages too; without this the first real read would
    page in interpreter and numpy code through the throttle.
    """
    fd = os.memfd_create("storagebrief-warmup")
    try:
        os.write(fd, os.urandom(3 * ALIGN))
        loader = Loader([f"/proc/self/fd/{fd}"], [[(0, 0, 3 * ALIGN)]], 1, 1, block, odirect=False)
        loader.start()
        loader.next()
        loader.close()
        loader.read_latencies()
    finally:
        os.close(fd)
    np.percentile(np.arange(10.0), [50, 99])


def setup_rank(cfg: dict, rank: int, n: int):
    """Everything an accelerator prepares before the clock starts: its batches and its loader.

    Shared by the forked accelerators (below) and the MPI ranks (mpi_rank.py)."""
    batches = batch_plan(cfg["spans"], len(cfg["files"]), n, rank, cfg["epochs"], cfg["seed"],
                         cfg["batch"], cfg["steps_per_epoch"])
    warm_up(cfg["block"], cfg["odirect"])
    if cfg.get("s3"):           # an S3 target: GETs (objects.py)
        from .objects import ObjectLoader
        loader = ObjectLoader(cfg["files"], batches, cfg["read_threads"], cfg["prefetch"], cfg["block"], cfg["s3"])
    else:
        loader = Loader(cfg["files"], batches, cfg["read_threads"], cfg["prefetch"], cfg["block"],
                        odirect=cfg["odirect"], evict=cfg["evict"], readahead=cfg["readahead"])
    if cfg.get("fail_rank") == rank and cfg.get("fail_at_step") is None:
        raise RuntimeError("injected failure before the first step (test hook)")
    return batches, loader


def train(cfg: dict, rank: int, loader: Loader, steps: int, sync) -> dict:
    """The measured steps of one accelerator; `sync()` is the per-step all-reduce (a barrier).

    Times are this host's perf_counter seconds (CLOCK_MONOTONIC: one axis for every process
    on the host); `release_t` is the instant this accelerator was released at the start, which
    puts ranks of other hosts on the launcher's axis (rebase_remote)."""
    ckpt_every, ckpt_bytes = cfg["checkpoint_every_steps"], cfg["checkpoint_bytes"]
    ckpt_buf = os.urandom(min(ckpt_bytes, 4 << 20)) if (rank == 0 and ckpt_bytes) else b""
    clock = time.perf_counter
    t_start = clock()
    cpu0 = cpu_seconds()
    loader.start()
    compute = cfg["compute_s"]
    times = np.zeros((steps, 5))
    ckpt_s, ckpts = 0.0, 0
    for s in range(steps):
        t0 = clock()
        loader.next()
        t1 = clock()
        time.sleep(compute)          # the only stand-in for work
        t2 = clock()
        if cfg.get("fail_rank") == rank and cfg.get("fail_at_step") == s:
            os._exit(3)              # test hook: die mid-run without a word
        if ckpt_buf and ckpt_every and (s + 1) % ckpt_every == 0:
            write_checkpoint(Path(cfg["checkpoint_dir"]), ckpt_bytes, ckpt_buf)
            ckpts += 1
            ckpt_s += clock() - t2
        t3 = clock()
        sync()                       # the all-reduce: the slowest sets the pace
        times[s] = (t0, t1, t2, t3, clock())
    loader.close()
    cpu_s = cpu_seconds() - cpu0      # this process and its loader threads, over the run
    return {"times": times, "release_t": t_start, "bytes": int(sum(loader.bytes)), "cpu_s": cpu_s,
            "cpus": sorted(os.sched_getaffinity(0)), "host": socket.gethostname(),
            "latencies": loader.read_latencies().astype(np.float32),
            "checkpoint_s": ckpt_s, "checkpoints": ckpts}


def _accelerator(rank: int, n: int, cfg: dict, procs_files: list[str], barrier, start, out_q) -> None:
    """One emulated accelerator (a forked process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent handles Ctrl-C and stops us
    die_with_parent()                              # no orphaned readers on the throttled disk
    try:
        batches, loader = setup_rank(cfg, rank, n)
        if procs_files:
            cgroups.join(procs_files)
        apply_affinity(cfg.get("cpu_affinity") or [])   # client check without a cgroup: pinned instead
        out_q.put(("ready", rank, None))
        start.wait()
        result = train(cfg, rank, loader, len(batches), lambda: barrier.wait(BARRIER_TIMEOUT_S))
        out_q.put(("done", rank, result))
    except threading.BrokenBarrierError:
        out_q.put(("aborted", rank, "barrier broken (another accelerator failed)"))
    except BaseException:
        out_q.put(("error", rank, traceback.format_exc()))


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far, all its threads (ended ones included)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def write_checkpoint(directory: Path, nbytes: int, chunk: bytes) -> None:
    """Write nbytes (repeating a random chunk) and fsync, as a synchronous checkpoint would."""
    from ...kit.checkpoint import write_file

    write_file(directory / "checkpoint-rank0.bin", nbytes, chunk)


def run_once(cfg: dict, accelerators: int, procs_files: list[str] | None, on_start=None,
             start_timeout_s: float = 120.0) -> dict:
    """Run N emulated accelerators once; returns raw results or raises with the reason.

    A failed or killed accelerator stops the run: the barrier is broken, the other
    accelerators are terminated, and RuntimeError names who failed and why.
    """
    ctx = mp.get_context("fork")
    barrier, start, out_q = ctx.Barrier(accelerators), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_accelerator, args=(r, accelerators, cfg, procs_files or [], barrier, start, out_q),
                         daemon=True, name=f"accelerator-{r}") for r in range(accelerators)]
    for pr in procs:
        pr.start()
    done: dict[int, dict] = {}
    failure = None
    try:
        ready, deadline = 0, time.monotonic() + start_timeout_s
        while ready < accelerators and failure is None:
            try:
                kind, rank, payload = out_q.get(timeout=0.5)
            except queue.Empty:
                failure = _dead(procs, done) or (f"accelerators not ready after {start_timeout_s:.0f} s"
                                                 if time.monotonic() > deadline else None)
                continue
            if kind == "ready":
                ready += 1
            else:
                failure = f"accelerator {rank} failed before the first step:\n{payload}"
        if failure is None:
            if on_start:
                on_start()
            t_start = time.perf_counter()
            start.set()
            while len(done) < accelerators and failure is None:
                try:
                    kind, rank, payload = out_q.get(timeout=0.5)
                except queue.Empty:
                    failure = _dead(procs, done)
                    continue
                if kind == "done":
                    done[rank] = payload
                elif kind == "error":
                    failure = f"accelerator {rank} failed:\n{payload}"
                elif kind == "aborted":
                    failure = failure or _dead(procs, done) or f"accelerator {rank}: {payload}"
        if failure is not None:
            raise RuntimeError(failure)
    finally:
        if failure is not None or len(done) < accelerators:
            barrier.abort()
            for pr in procs:
                if pr.is_alive():
                    pr.terminate()
        reap(procs, 5)
        out_q.close()
        out_q.cancel_join_thread()
    return {"t_start": t_start, "ranks": [done[r] for r in range(accelerators)]}


def rebase_remote(raw: dict, local_host: str) -> dict:
    """Ranks of other hosts onto the launcher's clock: their release instant is the launcher's
    start (`t_start`), to within the start barrier's latency."""
    for r in raw["ranks"]:
        if r.get("host") != local_host:
            r["times"] = r["times"] - r["release_t"] + raw["t_start"]
    return raw


def _dead(procs, done) -> str | None:
    """A reason when an accelerator exited without reporting its results."""
    for r, pr in enumerate(procs):
        if r not in done and pr.exitcode is not None:
            code = pr.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            hint = " (SIGKILL: out of memory in the memory-capped cgroup?)" if code == -signal.SIGKILL else ""
            return f"accelerator {r} died: {how}{hint} before reporting its results"
    return None
