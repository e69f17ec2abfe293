"""kit.ranks' workers as MPI ranks: the launcher's end (`Mpi`, one mpirun session for the launch, one request per
operation through kit.mpi_session) and the rank program (`python -m storagebrief.kit.ranks_mpi CONFIG`), which
imports the study's Worker by name, sets it up (joining the run's cgroup on the launching host only: a cgroup
lives on one host), and serves each operation from an MPI barrier (the start line) with the Worker's function.
A rank that fails aborts the job; the operation then fails with the rank's own message (kit.mpi.mpi_cause).
"""
from __future__ import annotations

import importlib
import json
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ..core import cgroups
from ..core.causes import EnvironmentFailure
from ..core.procs import die_with_parent
from . import mpi as kit_mpi
from .client_check import apply_affinity
from .mpi_session import open_session, serve
from .ranks import Done, Launch, Line, Worker

FACTS = "storagebrief-host-facts"     # the request every rank answers with its host's name and facts


class Mpi(Launch):
    """The workers as MPI ranks (`python -m storagebrief.kit.ranks_mpi`), serving one operation per request."""
    launcher = "mpi"

    def __init__(self, worker: Worker, ranks, config: Any = None, procs_files: list[str] | None = None,
                 affinity: list[int] | None = None, peers: bool = False, start_timeout_s: float = 180.0, *,
                 mpi, work_dir: Path, section: str):
        super().__init__(worker, ranks, config, procs_files, affinity, peers, start_timeout_s)
        if not worker.ref:
            raise ValueError(f"{worker.label}: a Worker launched under MPI needs ref='module:NAME'")
        self.mpi, self.work_dir, self.section = mpi, work_dir, section

    def __enter__(self) -> "Mpi":
        spec = {"worker": self.worker.ref, "ranks": self.ranks, "config": self.config,
                "procs_files": self.procs_files, "affinity": self.affinity}
        self._cm = open_session(__name__, spec, len(self.ranks), self.mpi, self.work_dir, self.section,
                                self.start_timeout_s)
        self.session = self._cm.__enter__()
        try:
            answers = self.session.request(FACTS)
        except BaseException:
            self._cm.__exit__(*sys.exc_info())
            raise
        self.host_facts = {a["host"]: a["facts"] for a in answers}
        self.joined = {a["rank"]: a["in_cgroup"] for a in answers}
        return self

    def joined_cgroup(self, rank: int) -> bool:
        return self.joined.get(rank, False)

    def __exit__(self, *exc) -> None:
        self._cm.__exit__(*exc)

    def check_alive(self) -> None:
        proc = self.session.proc
        if proc.poll() is not None:
            raise EnvironmentFailure(f"MPI ranks failed between operations (mpirun exited with status "
                                     f"{proc.returncode}): {kit_mpi._cause(self.session.err_file)}")

    def operate(self, msgs: Any = None, on_start: Callable[[], None] | None = None,
                timeout_s: float | None = None, on_emit: Callable[[int, Any], None] | None = None
                ) -> tuple[float, list[Done]]:
        if on_start:
            on_start()
        sent = time.monotonic()
        got = sorted(self.session.request({r: self._msg(msgs, r) for r in self.ranks}, timeout_s, "during the run"),
                     key=lambda d: d.rank)
        here = [d.release for d in got if d.host == self.launch_host]
        return (min(here) if here else sent), got


def _rank_main(config_file: str) -> None:
    """An MPI rank: the Worker named in the config, served one operation per request (kit.mpi_session)."""
    from mpi4py import MPI   # only ranks import MPI: the study process never initialises it

    from ..core.inventory import host_facts

    comm = MPI.COMM_WORLD
    die_with_parent()        # the rank's parent is Open MPI's daemon: never outlive it
    spec = json.loads(Path(config_file).read_text())
    module, name = spec["worker"].split(":")
    w: Worker = getattr(importlib.import_module(module), name)
    rank, n, host = spec["ranks"][comm.Get_rank()], len(spec["ranks"]), socket.gethostname()
    local = host == spec["launch_host"] and bool(spec["procs_files"])

    def fail(when: str, code: int) -> None:
        sys.stderr.write(f"rank {rank} on {host} failed{when}:\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(code)

    state = None
    try:
        if w.warm_up:
            w.warm_up(spec["config"])
        if not w.setup_in_cgroup:
            state = w.setup(rank, n, spec["config"])
        if local:
            cgroups.join(spec["procs_files"])
        apply_affinity(spec["affinity"] if host == spec["launch_host"] else [])
        if w.setup_in_cgroup:
            state = w.setup(rank, n, spec["config"])
    except BaseException:
        fail(" before the first step", 2)
    barrier = kit_mpi.polite_barrier(comm)

    def handle(msgs):
        if msgs == FACTS:
            return {"rank": rank, "host": host, "facts": host_facts(), "in_cgroup": local}
        barrier()                                         # the start line: released together
        release = time.monotonic()
        try:
            return Done(rank, host, release, w.work(state, rank, msgs[rank], Line(barrier)))
        except BaseException:
            if w.on_failure and state is not None:
                w.on_failure(state)
            fail("", 4)

    serve(comm, barrier, handle)



if __name__ == "__main__":
    _rank_main(sys.argv[1])
