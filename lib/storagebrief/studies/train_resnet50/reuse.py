"""Jobs carried from run to run: TensorFlow starts once per model count, not once per run.

A job's start-up (import, ResNet50, tracing the train step: 20-30 s on 2 cores, 4 at once
95-118 s) was most of a quick run's time, and every scenario but a size limit trains with
nothing in its cgroup but a page-cache share (memory none, a ratio, parallel, ingest,
checkpoint). So the jobs that end such a run stay (idle, blocked on stdin, their cgroups kept;
the engine owns them, sweep.jobs) when a later run with as many models can take them, on any
target: that run re-arms them (its dataset's files, a new checkpoint folder and interval, a fresh
tf.data iterator, memory counters reset) instead of starting new ones. A job's cgroup counts io on
every target from its start, so it can be throttled wherever it goes; an emulated profile is applied
at go (run.limit_job) and lifted by the engine when that run closes. Before each run the cache is made cold as always, so what is measured
is the same; the row names the run the jobs came from (job_reused_from) and start-up is only the
re-arming. Size limits (set when the cgroup is made) start their own jobs. Jobs kept idle across
runs of another model count hold memory those runs do not have, so they are kept only while they
need at most 1/IDLE_MEMORY_SHARE of RAM (quick: ~1 GB of 24; paper-scale jobs end and start again).
"""
from __future__ import annotations

from .memory import total_memory_bytes
from .params import parse_memory

IDLE_MEMORY_SHARE = 8


def compatible(spec) -> bool:
    return parse_memory(spec.memory).kind != "bytes"


def _after(sweep, run_id: str) -> list:
    """The specs of the runs after `run_id` in the engine's order (sweep.runs_after)."""
    return [r.config for r in sweep.runs_after(run_id)]


def later_wants(sweep, run_id: str, models: int) -> bool:
    """Whether a run after `run_id` could take `models` jobs."""
    return any(compatible(spec) and spec.models == models for spec in _after(sweep, run_id))


def next_wants(sweep, run_id: str, models: int) -> bool:
    """Whether the very next run could take `models` jobs (none would wait idle across other runs)."""
    after = _after(sweep, run_id)
    return bool(after) and compatible(after[0]) and after[0].models == models


def passes_on(sweep, spec, next_spec, run_id: str) -> bool:
    """Whether the run `run_id` (with `spec`) will leave its jobs to a run like `next_spec` (prestart.py)."""
    return (compatible(spec) and compatible(next_spec) and spec.models == next_spec.models
            and later_wants(sweep, run_id, spec.models))


def keep(state, run, spec, jobs) -> bool:
    """After a successful run: keep its jobs for a later run (True), or let them end."""
    if not (compatible(spec) and jobs and all(j.group is not None for j in jobs)
            and spec.models not in getattr(state, "kept", {})
            and later_wants(run.sweep, run.run_id, len(jobs))):
        return False
    idle = sum(j.need_bytes or 0 for j in jobs)
    if not next_wants(run.sweep, run.run_id, len(jobs)) and idle * IDLE_MEMORY_SHARE > total_memory_bytes():
        return False
    state.kept[len(jobs)] = list(jobs)
    return True


def available(state, spec, io) -> bool:
    """Kept jobs for this run: as many models, and an io group wherever the target throttles."""
    jobs = getattr(state, "kept", {}).get(spec.models) if compatible(spec) else None
    return bool(jobs) and (io is None or all("blkio" in j.group.dirs for j in jobs))


REARM_TIMEOUT_S = 60.0


def take(state, run, spec, changes: list[dict], poll=None):
    """The kept jobs for this run, re-armed for it (changes[i] to job i) and ready, or None (the last run's
    limits came off when it closed).

    Jobs not ready again within REARM_TIMEOUT_S are killed with their cgroups and the run starts its
    own; a note says so. (Seen before cachecap.py: a ratio cap that made the cgroup reclaim also
    evicted TensorFlow's code pages, and the re-faults stalled a throttled job.)"""
    if not available(state, spec, None):
        return None
    jobs = state.kept.pop(spec.models)
    for j in jobs:
        j.again(changes[j.index], run.run_id)
    if poll is not None:
        try:
            poll(jobs, "ready", REARM_TIMEOUT_S, REARM_TIMEOUT_S)
        except Exception as exc:      # jobs.JobFailed: stalled or ended
            _end(jobs)
            run.sweep.note(f"{run.run_id}: the jobs kept from {jobs[0].reused_from} did not re-arm ({exc}); "
                           "the run started its own")
            return None
    return jobs


def _end(jobs) -> None:
    for j in jobs:
        j.end()


def drop(state) -> None:
    """End every kept job and remove its cgroup (study end, interrupt)."""
    for jobs in list(getattr(state, "kept", {}).values()):
        _end(jobs)
    if hasattr(state, "kept"):
        state.kept.clear()
