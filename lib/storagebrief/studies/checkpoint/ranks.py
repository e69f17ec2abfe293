"""The writing ranks of one run (saves then restores), as kit.ranks workers: forked on this host, or MPI ranks
on mpirun's hosts (`checkpoint.launcher`), as MLPerf Storage runs them, so run.py's protocol (manifests, retain,
cold cache, rank shift) is the same under both.

Before any clock each rank fills its write buffer once with incompressible bytes (kit.checkpoint), reused for
every write as DLIO does; on an S3 target its own compiled client (core.s3mover) makes that body instead and holds
it, and the rank holds no Python copy. Per operation the pool sends every rank
(op, folder, source rank, files, block, readers); from the start line's release each saves or loads (rank_io.py:
writes, fsync of every file and the folder, preads by reader threads, per-call latency histograms) and reports
its start and end (CLOCK_MONOTONIC), bytes, files and fsync calls. The launcher does the rest: the run's cgroup,
a failed rank's message, a killed rank or a refused fork as one line (EnvironmentFailure), nothing left behind.

Clocks: ranks on the launching host share one clock (the operation's release is the earliest start). A rank on
another host has its own: kit.ranks' offset puts its start on the start line's release and its end that plus
its own duration; `clock` says which applied.
"""
from __future__ import annotations

import mmap
import os
import socket
from dataclasses import replace
from pathlib import Path

from ...kit import budget
# the room's readers by name here, so that a test can stand in for the machine (monkeypatch)
from ...kit.budget import MIB, files_left, memory_left, nproc_left, pids_left
from ...kit.checkpoint import incompressible
from ...kit.launch import open_launch
from ...kit.ranks import Worker
from ...core.store import StoreHandle, open_store
from .rank_io import ONE_CLOCK, RankResult, operate

PER_RANK_CLOCK = "per rank: CLOCK_MONOTONIC from the MPI barrier's release (ranks on other hosts)"


def _setup(rank: int, n: int, cfg: dict) -> tuple:
    # its own store, opened from the run's handle (core.store: an S3 client per rank), before any clock
    store = open_store(StoreHandle(**cfg["store"]), pool=cfg["readers"])
    store.connect(None, cfg["readers"])     # an S3 store's compiled client, which makes its uploads and GETs
    # what its saves write, generated before any clock (every run's differs, or a caller's seed: benchmarks/
    # checkpoint.py, each rank its own bytes): a directory's in this process; an S3 store's in its compiled client,
    # which uploads it (no Python copy: buf is None)
    seed = cfg.get("seed")
    own = int.from_bytes(os.urandom(7), "little") if seed is None else seed + rank
    buf = store.make_body(cfg["buf_bytes"], seed=own, make=lambda n: incompressible(n, None if seed is None else own))
    if cfg.get("direct"):                           # directory targets only (checkpoint.save_io: direct)
        aligned = mmap.mmap(-1, len(buf))              # page-aligned, as O_DIRECT needs
        aligned[:] = buf
        buf = memoryview(aligned)
    return buf, store, cfg["fault"], socket.gethostname(), bool(cfg.get("direct"))


def _operate(state: tuple, rank: int, msg: tuple, line) -> RankResult:
    buf, store, fault, host, direct = state
    return operate(rank, msg, buf, fault, host, store=store, direct=direct)


# own_session: each rank its own session, as each of fio's jobs (kit.ranks.Worker): like CPU shares beside other work
WORKER = Worker("checkpoint rank", _setup, _operate, ref=f"{__name__}:WORKER", own_session=True)


class RankPool:
    """The run's ranks; use as a context manager (they are always reaped). params: the study's launcher knobs
    (None: forked); work_dir: where Open MPI's files go under launcher: mpi; direct: saves with O_DIRECT
    (checkpoint.save_io: direct); store: the target's store handle (core.store.StoreHandle, as a dict) each rank
    opens its own store from, with `readers` connections (an S3 client's); seed: the write buffers' bytes (rank r:
    seed + r; None: fresh from os.urandom, as the study's)."""

    def __init__(self, ranks: list[int], buf_bytes: int, procs_files: list[str] | None = None,
                 fault: dict | None = None, start_timeout_s: float = 120.0, *, store: dict, readers: int = 1,
                 affinity: list[int] | None = None, params=None, work_dir: Path | None = None,
                 direct: bool = False, seed: int | None = None):
        self.ranks = list(ranks)
        self.launch = open_launch(WORKER, self.ranks, {"buf_bytes": buf_bytes, "fault": fault, "store": store,
                                                       "readers": readers,
                                                       "direct": direct, "seed": seed},
                                  params=params, work_dir=work_dir, section="checkpoint", procs_files=procs_files,
                                  affinity=affinity, start_timeout_s=start_timeout_s)
        self.launcher, self.clock = self.launch.launcher, ONE_CLOCK
        self.hosts: set[str] = set()

    def __enter__(self) -> "RankPool":
        self.launch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.launch.__exit__(*exc)

    @property
    def launch_host(self) -> str:
        return self.launch.launch_host

    @property
    def host_facts(self) -> dict:
        return self.launch.host_facts

    def pause(self, seconds: float) -> None:
        """MLPerf's pause before an operation, watched: a rank that dies in it ends the run at once (a kill -9
        in a 20 s pause was noticed only at the next barrier, 18 s later)."""
        self.launch.pause(seconds)

    def operate(self, op: str, folder: Path, files_by_rank: dict[int, tuple[int, list]], block: int,
                readers: int = 1) -> tuple[float, list[RankResult]]:
        """One save or load by every rank from one start line; returns (release instant, results by rank).
        files_by_rank: rank -> (source rank, [(file name, bytes)])."""
        msgs = {r: (op, str(folder), *files_by_rank[r], block, readers) for r in self.ranks}
        release, done = self.launch.operate(msgs)
        return self.on_one_clock(release, [(d.result, self.launch.offset(d, release)) for d in done])

    def on_one_clock(self, release: float, results: list[tuple[RankResult, float]]) -> tuple[float, list[RankResult]]:
        """Results with other hosts' clocks moved onto the launcher's by their offsets (kit.ranks)."""
        got = [replace(r, start=r.start + off, end=r.end + off) if off else r for r, off in results]
        if any(off for _, off in results):
            self.clock = PER_RANK_CLOCK
        self.hosts |= {r.host for r in got}
        here = [r.start for r, (_, off) in zip(got, results) if not off]
        return min([release, *here]), got


# --------------------------------------------------------------------------- the ranks' budget
# What the forked checkpoint ranks may take of this machine, checked before any work (validate too), through the
# one budget (kit.budget): every rank is a process of its own on this host (launcher: fork) holding a write
# buffer, and on restore `readers_per_rank` reader threads each with a read buffer; the parent keeps a few pipes
# per rank. Measured on the 2-core VM (a rank with a 1 MiB buffer, pandas imported in the parent): 3.0-4.5 open
# files in the parent and 4.0 MiB private dirty memory per rank; the budget takes 5 files and 8 MiB.
MEMORY_SHARE = budget.MEMORY_SHARE
RANK_OWN_BYTES = budget.PROCESS_OWN_BYTES
PARENT_FILES_PER_RANK = budget.FILES_PER_WORKER
TASKS_PER_RANK_BESIDE_READERS = budget.TASKS_PER_WORKER   # the rank's main thread and its queue's feeder thread
# On an S3 target a rank holds no Python buffers: its compiled client (core.s3mover) makes and holds the body it
# uploads and drops what its GETs receive (kit.budget.s3_client_bytes: that process, `readers_per_rank` connections).


def rank_buffers(p, model: str) -> tuple[int, int]:
    """(write buffer, one read buffer) bytes per rank, as the run sizes them: a block, at most the largest file."""
    from ...core.checkpoint_workloads import files_of_rank

    w = p.workload(model)
    largest = max(f.bytes for r in p.writers(model) for f in files_of_rank(w, r, p.scale))
    return min(p.write_block, largest), min(p.read_block, largest)


def check_budget(p, s3: bool = False, directories: bool = True) -> None:
    """Refuse (ValueError, one line with the numbers) a fork-launched model this machine cannot hold, its ranks on
    the targets that need most: `directories` (a directory target is measured): each rank's write buffer and read
    buffers; `s3` (an S3 target is measured): each rank's compiled client, which holds the body it uploads."""
    if p.launcher != "fork":
        return          # MPI ranks live on their hosts: mpirun and kit.mpi.preflight check them there
    room = budget.Room(pids_left(), nproc_left(), files_left(), memory_left())
    for model in p.models:
        n = len(p.writers(model))
        forks = f"checkpoint.models: {model} forks {n:,} ranks,"
        budget.check(forks, tasks=n * (TASKS_PER_RANK_BESIDE_READERS + p.readers_per_rank), room=room,
                     how=f"{n:,} × ({TASKS_PER_RANK_BESIDE_READERS} + readers_per_rank = {p.readers_per_rank})",
                     lower="use mode: subset (8 ranks), lower readers_per_rank, launcher: mpi across hosts, or "
                           "raise the limit")
        budget.check(forks, files=n * PARENT_FILES_PER_RANK, room=room, how="in the parent",
                     lower="use mode: subset, launcher: mpi, or raise the limit")
        write, read = rank_buffers(p, model)
        files = write + p.readers_per_rank * read if directories else 0
        client = budget.s3_client_bytes(p.readers_per_rank, body=write) if s3 else 0
        on_s3 = client > files
        how = (f"{client / MIB:,.0f} MiB for its compiled S3 client with the {write / MIB:,.0f} MiB body it uploads"
               if on_s3 else f"{write / MIB:,.0f} MiB write buffer + readers_per_rank {p.readers_per_rank} × "
                             f"read_block {read / MIB:,.0f} MiB")
        budget.check(f"checkpoint: {model}'s {n:,} ranks", memory=n * (max(files, client) + RANK_OWN_BYTES),
                     room=room, how=f"{n:,} × ({how} + {RANK_OWN_BYTES / MIB:.0f} MiB per process)",
                     lower="lower readers_per_rank or read_block_mib / write_block_mib, raise scale, or use mode: "
                           "subset")
