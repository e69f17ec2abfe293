"""Emulated accelerators as MPI ranks (`launcher: mpi`): one rank per accelerator on whatever hosts
mpirun is given, as DLIO and MLPerf Storage run them.

The launcher (`run_once_mpi`, in the study process) starts
`mpirun -np N python -m storagebrief.studies.emulate.mpi CONFIG RESULT` through kit.mpi (finding
mpirun, Open MPI's folders, the start line, collecting results, why mpirun failed); each rank
prepares its loader exactly as a forked accelerator does (accelerators.setup_rank), ranks on the
launching host join the run's cgroup (throttle / page-cache cap; other hosts cannot, and the run says
so), and rank 0 prints `ready` once every rank is. The launcher starts its clock and writes `go`;
rank 0 releases everyone with an MPI barrier, every step ends with an MPI barrier (the all-reduce),
and the ranks' results are gathered to rank 0, which writes them for the launcher. The arithmetic
after that is the forked mode's (metrics.summarize).
"""
from __future__ import annotations

import functools
import json
import socket
import sys
import traceback
from pathlib import Path

from ...core.procs import die_with_parent
from ...kit import mpi as kit_mpi
from ...kit.mpi import (MpiStartupError, MpiUnavailable, finish_line, launcher_args, mpi_cause,  # noqa: F401
                        polite_barrier, start_line)

SECTION = "emulate"     # the params section the messages name (emulate.mpi.hosts, emulate.launcher)
RANK_MODULE = "storagebrief.studies.emulate.mpi"

check_available = functools.partial(kit_mpi.check_available, section=SECTION)
check_hostfile = functools.partial(kit_mpi.check_hostfile, section=SECTION)
preflight = functools.partial(kit_mpi.preflight, section=SECTION, ranks_knob="the largest of emulate.accelerators (emulate.search_max with auto)")


def run_once_mpi(cfg: dict, accelerators: int, procs_files: list[str] | None, mpi, work_dir: Path,
                 on_start=None, start_timeout_s: float = 180.0) -> dict:
    """N accelerators as MPI ranks, once; returns what accelerators.run_once returns (plus each rank's host)."""
    return kit_mpi.run_ranks(RANK_MODULE, {"cfg": cfg, "procs_files": procs_files or []}, accelerators, mpi,
                             work_dir, SECTION, on_start=on_start, start_timeout_s=start_timeout_s)


def _rank_main(config_file: str, result_file: str) -> None:
    from mpi4py import MPI   # only ranks import MPI: the study process never initialises it

    from ...core import cgroups
    from .accelerators import setup_rank, train

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    die_with_parent()        # the rank's parent is Open MPI's daemon: never outlive it
    spec = json.loads(Path(config_file).read_text())
    cfg = spec["cfg"]
    cfg["spans"] = [[tuple(s) for s in f] for f in cfg["spans"]]
    try:
        batches, loader = setup_rank(cfg, rank, n)
        local = socket.gethostname() == spec["launch_host"]
        if local and spec["procs_files"]:
            cgroups.join(spec["procs_files"])
    except BaseException:
        sys.stderr.write(f"rank {rank} on {socket.gethostname()} failed before the first step:\n"
                         f"{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(2)
    barrier = polite_barrier(comm)
    start_line(comm, barrier)
    try:
        result = train(cfg, rank, loader, len(batches), barrier)
        result["in_cgroup"] = bool(local and spec["procs_files"])
    except BaseException:
        sys.stderr.write(f"rank {rank} on {socket.gethostname()} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(4)
    finish_line(comm, result, result_file)


if __name__ == "__main__":
    _rank_main(sys.argv[1], sys.argv[2])
