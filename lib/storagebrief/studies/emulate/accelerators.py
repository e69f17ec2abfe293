"""Emulated accelerators: one worker each (kit.ranks: forked, or MPI ranks), with its own loader, meeting at a
barrier every step.

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
accelerators are stopped, and the error names who failed and why (kit.ranks).
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np

from ...kit.client_bound import cpu_seconds
from ...kit.launch import open_launch
from ...kit.ranks import Worker
from .loader import ALIGN, Loader, batch_plan
from .objects import ObjectLoader


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

    The launcher's Worker (below) runs it in every accelerator, forked or an MPI rank."""
    batches = batch_plan(cfg["spans"], len(cfg["files"]), n, rank, cfg["epochs"], cfg["seed"],
                         cfg["batch"], cfg["steps_per_epoch"])
    warm_up(cfg["block"], cfg["odirect"])
    # the run's side (run.py): "files" reads the target's files (loader.py), "objects" GETs them through its store
    loader = (Loader if cfg["loader"] == "files" else ObjectLoader).from_config(cfg, batches)
    if cfg.get("fail_rank") == rank and cfg.get("fail_at_step") is None:
        raise RuntimeError("injected failure before the first step (test hook)")
    return batches, loader


def train(cfg: dict, rank: int, loader: Loader, steps: int, sync) -> dict:
    """The measured steps of one accelerator; `sync()` is the per-step all-reduce (a barrier).

    Times are this host's perf_counter seconds (CLOCK_MONOTONIC: one axis for every process
    on the host); `release_t` is the instant this accelerator was released at the start, which
    puts ranks of other hosts on the launcher's axis (kit.ranks' offset, in run_once)."""
    ckpt_every, ckpt_bytes = cfg["checkpoint_every_steps"], cfg["checkpoint_bytes"]
    ckpt_buf = os.urandom(min(ckpt_bytes, 4 << 20)) if (rank == 0 and ckpt_bytes) else b""
    clock = time.perf_counter
    t_start = clock()
    helper0 = loader.helper_cpu_s()                    # the compiled client's CPU, on S3 (objects.py)
    cpu0 = cpu_seconds() + helper0
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
    helper_s = loader.helper_cpu_s()  # read while it runs: close() stops it
    loader.close()
    cpu_s = cpu_seconds() + helper_s - cpu0      # this process, its loader threads and their client, over the run
    return {"times": times, "release_t": t_start, "bytes": int(sum(loader.bytes)), "cpu_s": cpu_s,
            "helper_cpu_s": helper_s - helper0,
            "cpus": sorted(os.sched_getaffinity(0)), "host": socket.gethostname(),
            "latencies": loader.read_latencies().astype(np.float32), "read_spans": loader.read_spans(),
            "checkpoint_s": ckpt_s, "checkpoints": ckpts}



def write_checkpoint(directory: Path, nbytes: int, chunk: bytes) -> None:
    """Write nbytes (repeating a random chunk) and fsync, as a synchronous checkpoint would."""
    from ...kit.checkpoint import write_file

    write_file(directory / "checkpoint-rank0.bin", nbytes, chunk)


def _setup(rank: int, n: int, cfg: dict) -> tuple:
    cfg = {**cfg, "spans": [[tuple(s) for s in f] for f in cfg["spans"]]}    # an MPI rank's copy came as JSON
    batches, loader = setup_rank(cfg, rank, n)
    return cfg, len(batches), loader


def _train(state: tuple, rank: int, msg, line) -> dict:
    cfg, steps, loader = state
    return train(cfg, rank, loader, steps, line.sync)


# set up before joining the cgroup: the warm-up's pages are not read through the throttle
WORKER = Worker("accelerator", _setup, _train, ref=f"{__name__}:WORKER", setup_in_cgroup=False)


def run_once(cfg: dict, accelerators: int, procs_files: list[str] | None, params, work_dir: Path,
             affinity: list[int] | None = None, on_start=None) -> dict:
    """N emulated accelerators once, forked or as MPI ranks (kit.ranks, `emulate.launcher`), every step ending at
    their barrier; returns {t_start, ranks: [results with host and in_cgroup], launch_host, launcher}, every rank's
    step times on the launcher's clock. A failed or killed accelerator stops the run with who and why."""
    with open_launch(WORKER, range(accelerators), cfg, params=params, work_dir=work_dir, section="emulate",
                     procs_files=procs_files, affinity=affinity, peers=True) as launch:
        release, done = launch.operate(on_start=on_start)
    ranks = []
    for d in done:
        r = {**d.result, "host": d.host, "in_cgroup": launch.joined_cgroup(d.rank)}
        if shift := launch.offset(d, release):
            r["times"] = r["times"] + shift
            r["read_spans"] = r["read_spans"] + np.array([shift, shift, 0.0])
        ranks.append(r)
    return {"t_start": release, "ranks": ranks, "launch_host": launch.launch_host, "launcher": launch.launcher,
            "host_facts": launch.host_facts}
