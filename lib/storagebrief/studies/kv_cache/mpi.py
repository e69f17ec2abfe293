"""The clients of one run as MPI ranks (`kv_cache.launcher: mpi`), as MLPerf Storage runs them: one rank per
client on whatever hosts mpirun is given, through kit.mpi (mpirun found and checked before any work, Open
MPI's folders, the start line, results gathered to rank 0, why mpirun failed). Each rank does what a forked
client does (clients.py): dies with its Open MPI daemon, joins the run's cgroup on the launching host (a
cgroup lives on one host), fills its buffer, then runs client.Client from the start line's release.

Clocks: CLOCK_MONOTONIC is system-wide on Linux, so ranks on the launching host share the launcher's clock;
a rank on another host has its own, and its records are shifted so its start line is the launcher's.
"""
from __future__ import annotations

import json
import socket
import sys
import time
import traceback
from pathlib import Path

from ...core.procs import die_with_parent
from ...kit import mpi as kit_mpi

SECTION = "kv_cache"
RANK_MODULE = "storagebrief.studies.kv_cache.mpi"


def run_mpi(spec: dict, clients: int, procs_files: list[str] | None, mpi, work_dir: Path, on_start=None) -> dict:
    """`clients` MPI ranks, once; returns {t_start, ranks: [client results]} on the launcher's clock."""
    got = kit_mpi.run_ranks(RANK_MODULE, {"spec": spec, "procs_files": procs_files or []}, clients, mpi,
                            work_dir, SECTION, on_start=on_start)
    ranks = sorted(got["ranks"], key=lambda r: r["rank"])
    t_start = min(r["t_start"] for r in ranks if r["host"] == got["launch_host"]) if any(
        r["host"] == got["launch_host"] for r in ranks) else ranks[0]["t_start"]
    for r in ranks:
        if r["host"] != got["launch_host"]:                   # another host's clock: align its start line
            shift = t_start - r["t_start"]
            r["records"] = [(*x[:2], x[2] + shift, x[3] + shift, *x[4:]) for x in r["records"]]
            r["t_end"] += shift
    return {"t_start": t_start, "ranks": ranks, "hosts": sorted({r["host"] for r in ranks})}


def _rank_main(config_file: str, result_file: str) -> None:
    from mpi4py import MPI   # only ranks import MPI: the study process never initialises it

    from ...core import cgroups
    from ...kit.checkpoint import incompressible
    from .client import Client

    comm = MPI.COMM_WORLD
    rank, host = comm.Get_rank(), socket.gethostname()
    die_with_parent()        # the rank's parent is Open MPI's daemon: never outlive it
    spec = json.loads(Path(config_file).read_text())
    cfg = spec["spec"]
    try:
        if host == spec["launch_host"] and spec["procs_files"]:
            cgroups.join(spec["procs_files"])
        c = Client(cfg, rank, incompressible(min(cfg["write_block"], cfg["largest_entry_bytes"])))
    except BaseException:
        sys.stderr.write(f"rank {rank} on {host} failed before the start:\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(2)
    barrier = kit_mpi.polite_barrier(comm)
    kit_mpi.start_line(comm, barrier)
    t_start = time.monotonic()
    try:
        result = {**c.run(t_start), "t_start": t_start, "host": host}
    except BaseException:
        c.clear()
        sys.stderr.write(f"rank {rank} on {host} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(4)
    kit_mpi.finish_line(comm, result, result_file)


if __name__ == "__main__":
    _rank_main(sys.argv[1], sys.argv[2])
