"""The clients of one run as forked processes on this host (`kv_cache.launcher: fork`).

Each client, before any clock: dies with its parent (PR_SET_PDEATHSIG), joins the run's cgroup (the
target's throttle; a client-check run's cpuset too, or pins itself to its half of the CPUs), fills its write buffer with incompressible bytes (kit.checkpoint) and says ready.
All clients and the parent then meet at a barrier; from its release each runs client.Client for the
nominal duration and sends its records back. A client that fails or dies stops the run: the others are
terminated and RuntimeError says who (an ENOSPC keeps its errno, so the run can say the target filled).
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import time
import traceback

from ...core import cgroups
from ...core.procs import die_with_parent, reap
from ...kit.checkpoint import incompressible
from ...kit.client_check import apply_affinity
from .client import Client

START_TIMEOUT_S = 120.0


def _client(rank: int, spec: dict, procs_files: list[str], barrier, out_q) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C and stops us
    die_with_parent()
    c = None
    try:
        if procs_files:
            cgroups.join(procs_files)
        apply_affinity(spec.get("cpu_affinity") or [])     # client check without a cgroup: pinned instead
        c = Client(spec, rank, incompressible(min(spec["write_block"], spec["largest_entry_bytes"])))
        out_q.put(("ready", rank, None))
        barrier.wait(START_TIMEOUT_S)
        out_q.put(("done", rank, c.run(time.monotonic())))
    except OSError as exc:
        out_q.put(("oserror", rank, (exc.errno, str(exc), traceback.format_exc())))
    except BaseException:
        out_q.put(("error", rank, traceback.format_exc()))


def run_forked(spec: dict, clients: int, procs_files: list[str] | None, on_start=None) -> dict:
    """`clients` processes, once; returns {t_start, ranks: [client results]}."""
    ctx = mp.get_context("fork")
    barrier, out_q = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(r, spec, procs_files or [], barrier, out_q), daemon=True,
                         name=f"kv-client-{r}") for r in range(clients)]
    ok = False
    try:
        for pr in procs:
            pr.start()
        _collect(procs, out_q, "ready", START_TIMEOUT_S)
        if on_start:
            on_start()
        barrier.wait(START_TIMEOUT_S)
        t_start = time.monotonic()
        # a nominal duration, then the requests in flight finish: allow generously for a slow target
        got = _collect(procs, out_q, "done", spec["duration_s"] * 20 + 600)
        ok = True
        return {"t_start": t_start, "ranks": [got[r] for r in range(clients)]}
    finally:
        if not ok:
            barrier.abort()
            for pr in procs:
                if pr.is_alive():
                    pr.terminate()
        reap(procs, 10)
        out_q.close()
        out_q.cancel_join_thread()


def _collect(procs, out_q, want: str, timeout_s: float) -> dict:
    got: dict = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            kind, rank, payload = out_q.get(timeout=0.5)
        except queue.Empty:
            dead = [(r, pr.exitcode) for r, pr in enumerate(procs) if r not in got and pr.exitcode is not None]
            if dead:
                r, code = dead[0]
                how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
                raise RuntimeError(f"kv_cache client {r} died: {how}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"kv_cache clients not {want} after {timeout_s:.0f} s")
            continue
        if kind == "oserror":
            errno, msg, tb = payload
            raise OSError(errno, f"kv_cache client {rank}: {msg}")
        if kind != want:
            raise RuntimeError(f"kv_cache client {rank} failed:\n{payload}")
        got[rank] = payload
    return got
