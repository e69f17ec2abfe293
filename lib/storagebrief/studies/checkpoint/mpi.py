"""Checkpoint ranks as MPI ranks (`checkpoint.launcher: mpi`): one rank per writing rank on whatever hosts
mpirun is given, as MLPerf Storage runs them; the forked pool's interface (ranks.RankPool), so run.py's
protocol (manifests, retain, cold cache, rank shift) is the same under both launchers.

The pool (in the study process) starts `mpirun -np N python -m storagebrief.studies.checkpoint.mpi`
through kit.mpi_session (kit.mpi's mpirun arguments, Open MPI's folders, scope and causes). Each rank
dies with its Open MPI daemon, joins the run's cgroup when it is on the launching host (a cgroup lives
on one host), fills its buffer with incompressible bytes (kit.checkpoint), and then per operation: an MPI barrier (the start line,
sleeping while it waits), rank_io.operate (the forked ranks' save / load and latency histograms), the
results gathered to rank 0 and sent to the pool. A rank that fails aborts the job: the operation fails
with the rank's own message, and mpirun and its ranks are stopped.

Clocks: CLOCK_MONOTONIC is system-wide on Linux, so ranks on the launching host share one clock (the
operation's release is the earliest start). A rank on another host has its own: its start is taken as
the release of the MPI barrier (ranks leave a barrier within microseconds of each other on one fabric)
and its end as that plus its own duration; `clock` says which applied.
"""
from __future__ import annotations

import json
import socket
import sys
import traceback
from pathlib import Path

from ...core.causes import EnvironmentFailure
from ...core.procs import die_with_parent
from ...kit import mpi as kit_mpi
from ...kit.checkpoint import incompressible
from ...kit.mpi_session import open_session, serve
from .rank_io import ONE_CLOCK, RankResult
from .ranks import watched_sleep

SECTION = "checkpoint"
RANK_MODULE = "storagebrief.studies.checkpoint.mpi"
PER_RANK_CLOCK = "per rank: CLOCK_MONOTONIC from the MPI barrier's release (ranks on other hosts)"
FACTS = "host-facts"      # the request every rank answers with its host's name and facts (no barrier)


class MpiRankPool:
    """ranks.RankPool's interface over MPI ranks; use as a context manager."""

    launcher = "mpi"

    def __init__(self, ranks: list[int], buf_bytes: int, procs_files: list[str] | None, fault: dict | None,
                 mpi, work_dir: Path, start_timeout_s: float = 180.0):
        self.ranks = list(ranks)
        self.config = {"ranks": self.ranks, "buf_bytes": buf_bytes, "procs_files": procs_files or [],
                       "fault": fault}
        self.mpi, self.work_dir, self.start_timeout_s = mpi, work_dir, start_timeout_s
        self.clock = ONE_CLOCK
        self.hosts: set[str] = set()

    def __enter__(self) -> "MpiRankPool":
        self._cm = open_session(RANK_MODULE, self.config, len(self.ranks), self.mpi, self.work_dir, SECTION,
                                self.start_timeout_s)
        self.session = self._cm.__enter__()
        try:
            answers = self.session.request(FACTS)
        except BaseException:
            self._cm.__exit__(*sys.exc_info())
            raise
        self.rank_hosts = {a["rank"]: a["host"] for a in answers}
        self.host_facts = {a["host"]: a["facts"] for a in answers}
        return self

    def __exit__(self, *exc) -> None:
        self._cm.__exit__(*exc)

    def pause(self, seconds: float) -> None:
        """ranks.RankPool.pause: mpirun ends the job when a rank dies, so its exit ends the pause at once."""
        def check() -> None:
            proc = self.session.proc
            if proc.poll() is not None:
                raise EnvironmentFailure(f"MPI ranks failed between operations (mpirun exited with status "
                                         f"{proc.returncode}): {kit_mpi._cause(self.session.err_file)}")
        watched_sleep(seconds, check)

    def operate(self, op: str, folder: Path, files_by_rank: dict[int, tuple[int, list]], block: int,
                readers: int = 1) -> tuple[float, list[RankResult]]:
        """One save or load by every rank from one MPI barrier; returns (release instant, results by rank)."""
        msgs = {r: (op, str(folder), *files_by_rank[r], block, readers) for r in self.ranks}
        got = sorted(self.session.request(msgs), key=lambda r: r.rank)
        self.hosts |= {r.host for r in got}
        return self._one_clock(got)

    def _one_clock(self, got: list[RankResult]) -> tuple[float, list[RankResult]]:
        here = [r for r in got if r.host == self.session.launch_host] or got[:1]
        release = min(r.start for r in here)
        if all(r.host == got[0].host for r in got):
            return release, got
        self.clock = PER_RANK_CLOCK
        out = [r if r in here else RankResult(r.rank, r.source_rank, release, release + r.end - r.start, r.bytes,
                                               r.files, r.fsyncs, r.host, r.latency) for r in got]
        return release, out


def _rank_main(config_file: str) -> None:
    from mpi4py import MPI   # only ranks import MPI: the study process never initialises it

    from ...core import cgroups
    from ...core.inventory import host_facts
    from .rank_io import operate

    comm = MPI.COMM_WORLD
    die_with_parent()        # the rank's parent is Open MPI's daemon: never outlive it
    spec = json.loads(Path(config_file).read_text())
    rank, host = spec["ranks"][comm.Get_rank()], socket.gethostname()

    def fail(when: str, code: int) -> None:
        sys.stderr.write(f"rank {rank} on {host} failed{when}:\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(code)

    try:
        if host == spec["launch_host"] and spec["procs_files"]:
            cgroups.join(spec["procs_files"])
        buf = incompressible(spec["buf_bytes"])           # generated before any clock
    except BaseException:
        fail(" before the first operation", 2)
    barrier = kit_mpi.polite_barrier(comm)

    def handle(msgs):
        if msgs == FACTS:
            return {"rank": rank, "host": host, "facts": host_facts()}
        barrier()                                         # the start line: released together
        try:
            return operate(rank, msgs[rank], buf, spec["fault"], host)
        except BaseException:
            fail("", 4)

    serve(comm, barrier, handle)


if __name__ == "__main__":
    _rank_main(sys.argv[1])
