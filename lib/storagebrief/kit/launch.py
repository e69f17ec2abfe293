"""The one entry to a run's workers: `open_launch` gives the launcher a study's knobs name (`launcher: fork`, kit.ranks'
Forked; `launcher: mpi`, kit.ranks_mpi's Mpi), `check_launch` checks mpirun and the hosts before any work, and
`LaunchParams` are the knobs every launching study shares (its params model inherits them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from ..core.config import Strict
from . import mpi as kit_mpi
from .ranks import Forked, Launch, Worker
from .ranks_mpi import Mpi


class LaunchParams(Strict):
    """The knobs every study that launches workers shares (its params model inherits them)."""
    launcher: Literal["fork", "mpi"] = "fork"            # fork: processes on this host; mpi: mpirun ranks
    mpi: kit_mpi.MpiParams = Field(default_factory=kit_mpi.MpiParams)   # used by launcher: mpi only
    client_check: bool = False                           # re-run a point with the workers on half the CPUs
    client_check_repeats: int = Field(1, ge=1, le=100)   # confined runs (kit/client_check.py)


def check_launch(params: LaunchParams, ranks: int, work_dir: Path, section: str, ranks_knob: str,
                 status: Callable[[str], None] | None = None) -> None:
    """Before any work, with launcher: mpi: mpirun is there (else a ParamsError naming `section`.mpi.mpirun)
    and starts `ranks` ranks on the given hosts (kit.mpi.preflight's one-line causes); with launcher: fork, the
    launch's own share of the one budget (check_fork)."""
    if params.launcher != "mpi":
        check_fork(ranks, section, ranks_knob)
        return
    from ..core.config import ParamsError
    try:
        kit_mpi.check_available(params.mpi.mpirun, section)
    except kit_mpi.MpiUnavailable as exc:
        raise ParamsError(str(exc)) from None
    if status:
        status(f"checking that mpirun starts {ranks} rank(s)")
    kit_mpi.preflight(params.mpi, ranks, work_dir, section, ranks_knob=ranks_knob)


def check_fork(workers: int, section: str, knob: str) -> None:
    """Refuse before any work (ValueError, one line with the numbers) `workers` forked workers the machine's
    process, file or memory limits cannot hold (kit.budget): each is a process and its queue's feeder thread, a
    few pipes in the parent and its own memory. A study adds its own threads and buffers to the budget in its
    params' validation; this is the part every forking study inherits from the launcher."""
    from . import budget
    n, what = workers, f"{section}: {workers:,} forked workers ({knob})"
    budget.check(f"{what},", tasks=n * budget.TASKS_PER_WORKER, how=f"{n:,} × {budget.TASKS_PER_WORKER}",
                 lower=f"lower {knob}, use launcher: mpi, or raise the limit")
    budget.check(f"{what},", files=n * budget.FILES_PER_WORKER, how=f"{n:,} × {budget.FILES_PER_WORKER} pipes",
                 lower=f"lower {knob}, use launcher: mpi, or raise the limit")
    budget.check(what, memory=n * budget.PROCESS_OWN_BYTES,
                 how=f"{n:,} × {budget.PROCESS_OWN_BYTES // budget.MIB} MiB per process",
                 lower=f"lower {knob} or use launcher: mpi")


def open_launch(worker: Worker, ranks, config: Any = None, *, params: LaunchParams | None = None,
                work_dir: Path | None = None, section: str = "", **kw) -> Launch:
    """The launcher `params.launcher` names (fork when params is None), not yet entered: a context manager."""
    if params is not None and params.launcher == "mpi":
        return Mpi(worker, ranks, config, mpi=params.mpi, work_dir=work_dir, section=section, **kw)
    return Forked(worker, ranks, config, **kw)


