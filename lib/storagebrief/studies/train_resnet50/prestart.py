"""Start-up shared in pairs: a run whose jobs start cold also starts the next run's jobs.

A job's start-up (TensorFlow import, ResNet50 build, tracing the train step, warm-up) is
20-30 s of mostly one-core work; two of them side by side on two cores take about as long as
one. So a run that starts its own jobs, and cannot leave them to the run after it (reuse.py:
a size limit, another model count), also starts that run's jobs, waits until both sets are ready, and only then makes its cache cold and says go: the early jobs sit idle
(blocked on stdin, no record read, nothing computed) while this run is measured. The next run
finds its jobs ready and starts none early, so no start-up ever overlaps a measured phase.

The next run is the engine's (sweep.runs_after: the fixed plan's order); the early jobs are made for the
Run the engine gives for work ahead of it (sweep.ahead: its name, its target's io device, unthrottled until
go like every job) and owned by the engine (sweep.jobs) like every job;
a failure while starting them only drops them (the next run starts its own), an interrupt ends them
with this run's jobs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import targets as targets_mod
from ...core.measured_run import Run
from . import reuse
from .jobs import Job, JobFailed, _poll
from .params import parse_memory


@dataclass
class Early:
    """Jobs started ahead of their run, with the Run they were made for (sweep.ahead)."""
    run_id: str
    owner: Run
    jobs: list[Job]

    def discard(self) -> None:
        try:
            for j in self.jobs:
                j.end()
        finally:
            self.owner.close()


def take(state, run_id: str) -> list[Job] | None:
    """This run's jobs if an earlier run started them (they are ready or nearly)."""
    early = state.early
    if early is None or early.run_id != run_id:
        return None
    state.early = None
    return early.jobs


def start_next(run, spec, make_jobs, cpu_split) -> None:
    """Start the jobs of the run after `run` (with `spec`), unless it limits memory by size (it may be refused)
    or takes jobs kept from an earlier run or from this one (reuse.py)."""
    sweep, state = run.sweep, run.sweep.state
    after = sweep.runs_after(run.run_id)
    if not after:
        return
    nxt = after[0]
    setting = parse_memory(nxt.config.memory)
    io = targets_mod.io_limits(nxt.target)
    if (setting.kind == "bytes" or reuse.available(state, nxt.config, io)
            or reuse.passes_on(sweep, spec, nxt.config, run.run_id)):
        return
    owner = sweep.ahead(nxt)
    early = Early(nxt.run_id, owner, [])
    state.early = early
    try:
        make_jobs(owner, nxt.config, state.datasets[nxt.target.name], setting, io,
                  cpu_split(nxt.config.models), early.jobs)
        for j in early.jobs:
            j.start()
    except Exception as exc:    # the next run starts its own jobs and meets the same error there
        run.log(f"[{run.run_id}] next run's jobs not started early: {exc}")
        drop(state)


def wait_ready(run, stall_s: float) -> None:
    """Hold go until the early jobs are ready too, so none is starting while this run is measured."""
    early = getattr(run.sweep.state, "early", None)
    if early is None:
        return
    try:
        _poll(early.jobs, "ready", stall_s, stall_s * 2)
    except JobFailed as exc:
        run.log(f"[{run.run_id}] next run's early jobs failed to start ({exc}); it starts its own")
        drop(run.sweep.state)


def drop(state) -> None:
    """End the early jobs, if any (their cgroups removed)."""
    early = getattr(state, "early", None)
    if early is not None:
        state.early = None
        early.discard()
