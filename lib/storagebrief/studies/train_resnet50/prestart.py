"""Start-up shared in pairs: a run whose jobs start cold also starts the next run's jobs.

A job's start-up (TensorFlow import, ResNet50 build, tracing the train step, warm-up) is
20-30 s of mostly one-core work; two of them side by side on two cores take about as long as
one. So a run that starts its own jobs, and cannot leave them to the run after it (reuse.py:
a size limit, another model count), also starts that run's jobs, waits until both sets are ready, and only then makes its cache cold and says go: the early jobs sit idle
(blocked on stdin, no record read, nothing computed) while this run is measured. The next run
finds its jobs ready and starts none early, so no start-up ever overlaps a measured phase.

The early jobs are made for a stand-in core.sweep.Run of the next run (its name, its target's io
device, unthrottled until go like every job) and owned by the engine (sweep.jobs) like every job;
a failure while starting them only drops them (the next run starts its own), an interrupt ends them
with this run's jobs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import targets as targets_mod
from ...core.sweep import Run
from . import reuse
from .jobs import Job, JobFailed, _poll
from .params import parse_memory


@dataclass
class Early:
    """Jobs started ahead of their run, with the stand-in Run they were made for."""
    run_id: str
    owner: Run
    jobs: list[Job]

    def discard(self) -> None:
        try:
            for j in self.jobs:
                j.end()
        finally:
            self.owner.close()


def run_order(sweep, points) -> list[tuple]:
    """(config, target, repeat) in the engine's order: each point on each of its targets."""
    by_name = {t.name: t for t in sweep.targets}
    return [(pt.config, by_name[n], pt.repeat) for pt in points
            for n in (pt.targets or sweep.target_names) if n in by_name]


def take(state, run_id: str) -> list[Job] | None:
    """This run's jobs if an earlier run started them (they are ready or nearly)."""
    early = state.early
    if early is None or early.run_id != run_id:
        return None
    state.early = None
    return early.jobs


def start_next(run, make_jobs, run_id_for, cpu_split) -> None:
    """Start the jobs of the run after `run` (unless it limits memory by size: it may be refused; or it
    takes jobs kept from an earlier run or from this one: reuse.py)."""
    state = run.sweep.state
    ids = [run_id_for(spec, t.name, rep) for spec, t, rep in state.order]
    if run.run_id not in ids or ids.index(run.run_id) + 1 >= len(ids):
        return
    i = ids.index(run.run_id) + 1
    spec, target, repeat = state.order[i]
    setting = parse_memory(spec.memory)
    io = targets_mod.io_limits(target)
    if (setting.kind == "bytes" or reuse.available(state, spec, io)
            or reuse.passes_on(state, state.order[i - 1][0], spec, run.run_id, run_id_for)):
        return
    owner = Run(run.sweep, target, repeat, ids[i])
    early = Early(ids[i], owner, [])
    state.early = early
    try:
        make_jobs(owner, spec, state.datasets[target.name], setting, io,
                  cpu_split(spec.models), early.jobs)
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
