"""One-model jobs carried from run to run on a target: TensorFlow starts once, not once per scenario.

A job's start-up (import, ResNet50, tracing the train step: 20-30 s on 2 cores) was most of a
quick run's time, and four of the five scenarios train one model on all cores with nothing in
its cgroup but a page-cache share (memory none, a ratio, ingest, checkpoint). So a job that ends
such a run stays (idle, blocked on stdin, its cgroup kept) when a later run on the same target
can take it: that run re-arms it (new checkpoint folder and interval, fresh tf.data iterator,
its memory counters reset) instead of starting one. Before each run the cache is made cold as
always, so what is measured is the same; the row names the run the job came from
(job_reused_from) and start-up is only the re-arming. Runs with a size limit (set when the
cgroup is made) or with K > 1 models start their own jobs.
"""
from __future__ import annotations

from .params import parse_memory


def compatible(spec) -> bool:
    return spec.models == 1 and parse_memory(spec.memory).kind != "bytes"


def later_wants(state, run_id: str, target: str, run_id_for) -> bool:
    """Whether a run after `run_id` on `target` could take a one-model job."""
    order = getattr(state, "order", None) or []   # a run outside a study (tests): no later run
    ids = [run_id_for(spec, t.name, rep) for spec, t, rep in order]
    if run_id not in ids:
        return False
    return any(t.name == target and compatible(spec) for spec, t, _ in order[ids.index(run_id) + 1:])


def keep(state, run, spec, jobs, run_id_for) -> bool:
    """After a successful run: keep its job for a later run on the target (True), or let it end."""
    if not (compatible(spec) and len(jobs) == 1 and jobs[0].group is not None
            and later_wants(state, run.run_id, run.target.name, run_id_for)):
        return False
    run.release(jobs[0].group)      # the cgroup now lives with the job, not with this run
    state.kept[run.target.name] = jobs[0]
    return True


def available(state, target: str, spec) -> bool:
    return compatible(spec) and target in getattr(state, "kept", {})


REARM_TIMEOUT_S = 60.0


def take(state, run, spec, changes: dict, poll=None):
    """The kept job of this run's target, re-armed for it and ready, or None.

    A kept job that is not ready again within REARM_TIMEOUT_S (seen once: the throttled target's job
    under the dvc chain's notebook kernel, not reproduced from the CLI) is killed with its cgroup and
    the run starts its own job; a note says so."""
    if not available(state, run.target.name, spec):
        return None
    job = state.kept.pop(run.target.name)
    job.again(changes, run.run_id)
    if poll is not None:
        try:
            poll([job], "ready", REARM_TIMEOUT_S, REARM_TIMEOUT_S)
        except Exception as exc:      # jobs.JobFailed: stalled or ended
            job.kill()
            if job.group is not None:
                job.group.remove()
            run.sweep.note(f"{run.run_id}: the job kept from {job.reused_from} did not re-arm ({exc}); "
                           "the run started its own")
            return None
    return job


def drop(state) -> None:
    """End every kept job and remove its cgroup (study end, interrupt)."""
    for job in list(getattr(state, "kept", {}).values()):
        job.kill()
        if job.group is not None:
            job.group.remove()
    if hasattr(state, "kept"):
        state.kept.clear()
