"""Ranks under mpirun that serve requests one at a time: kit.ranks' MPI launcher (one request per operation,
so a study's parent can step between operations: checkpoint's manifest after every save, a cold cache before
every restore).

The launcher (`open_session`, in the study process) starts `mpirun -np N python -m <module> CONFIG
RESULT` through kit.mpi (the same mpirun arguments, Open MPI's folders in the work
folder, procs.Scope, death with the study); the rank program prepares and calls `serve(comm, barrier,
handle)`: rank 0 says `ready` once every rank is, then reads each request from its stdin (Open MPI
forwards the launcher's stdin to rank 0), every rank gets it (MPI broadcast) and runs `handle`, and
the replies are gathered to rank 0, which prints them as one line. Requests and replies are pickled
and base64-encoded on one line each. A rank that fails aborts the job; the pending request then fails
with the ranks' own message (kit.mpi.mpi_cause).
"""
from __future__ import annotations

import base64
import pickle
import queue
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from ..core import procs
from ..core.causes import EnvironmentFailure
from . import mpi as kit_mpi

STOP = "stop"


def _encode(obj) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode("ascii")


def _decode(text: str):
    return pickle.loads(base64.b64decode(text))


class RankSession:
    """The launcher's end: request(payload) -> every rank's reply, in rank order."""

    def __init__(self, proc, err_file: Path, launch_host: str, cmd: list[str]):
        self.proc, self.err_file, self.launch_host, self.cmd = proc, err_file, launch_host, cmd
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=kit_mpi._lines, args=(proc.stdout, self.lines), daemon=True).start()

    def wait_ready(self, timeout_s: float) -> None:
        kit_mpi._wait_for(self.lines, self.proc, kit_mpi.READY, timeout_s, self.err_file, "before the first request")

    def request(self, payload, timeout_s: float | None = None, when: str = "during a request") -> list:
        try:
            self.proc.stdin.write(f"{kit_mpi.REQUEST} {_encode(payload)}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass                        # mpirun is gone: _wait_for says why
        line = kit_mpi._wait_for(self.lines, self.proc, kit_mpi.REPLY, timeout_s, self.err_file, when)
        return _decode(line.split(" ", 1)[1])

    def stop(self, timeout_s: float = 60.0) -> None:
        """The ranks leave serve(); mpirun must exit 0."""
        self.proc.stdin.write(STOP + "\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout_s)
        if self.proc.returncode != 0:
            raise EnvironmentFailure(f"mpirun exited with status {self.proc.returncode}: "
                                     f"{kit_mpi._cause(self.err_file)}")


@contextmanager
def open_session(module: str, config: dict, ranks: int, mpi, work_dir: Path, section: str,
                 start_timeout_s: float = 180.0):
    """`ranks` ranks of `python -m module CONFIG RESULT` serving requests until the block ends (then told
    to stop; on an error stopped); nothing they started outlives the block."""
    mpirun = kit_mpi.check_available(mpi.mpirun, section)
    with kit_mpi.open_mpi_folders(work_dir, mpi) as (scratch, shm):
        cmd = kit_mpi.launcher_args(mpirun, ranks, mpi) + [sys.executable, "-m", module]
        scope = procs.Scope.tracked("mpi")
        try:
            proc, cmd, _, err_file, host = kit_mpi._start(scope, cmd, config, work_dir,
                                                          kit_mpi.mpi_env(scratch / "session", shm))
            session = RankSession(proc, err_file, host, cmd)
            ok = False
            try:
                session.wait_ready(start_timeout_s)
                yield session
                session.stop()
                ok = True
            finally:
                if not ok:
                    kit_mpi._stop(proc)
                for f in (proc.stdin, proc.stdout):
                    try:
                        f.close()
                    except OSError:
                        pass
        finally:
            scope.close()                            # no rank, daemon or helper outlives the session


def serve(comm, barrier, handle) -> None:
    """The ranks' end: every rank ready (rank 0 says so), then per request `handle(payload)` on every rank
    and the replies gathered to rank 0, which prints them; returns when the launcher says stop (or its
    stdin ends). The waits are `barrier` (kit.mpi.polite_barrier: sleeping, not spinning) before the
    broadcast, so ranks waiting for the next request do not burn a core."""
    root = comm.Get_rank() == 0
    barrier()
    if root:
        print(kit_mpi.READY, flush=True)
    while True:
        payload = None
        if root:
            line = sys.stdin.readline().rstrip("\n")
            payload = _decode(line.split(" ", 1)[1]) if line.startswith(kit_mpi.REQUEST + " ") else STOP
        barrier()
        payload = comm.bcast(payload, root=0)
        if isinstance(payload, str) and payload == STOP:
            return
        replies = comm.gather(handle(payload), root=0)
        if root:
            print(f"{kit_mpi.REPLY} {_encode(replies)}", flush=True)
