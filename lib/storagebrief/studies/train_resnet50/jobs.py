"""Training jobs seen from the parent: each a core.longjob.LongJob (its own process and cgroup), its events.

Each training job is a fresh Python process (`python -c longjob.BOOT`) that joins its cgroup
before anything else, so all its memory (TensorFlow, page cache of the records it reads)
is charged there and an OOM kill takes only that job, which becomes a failed run row with
its reason. The job reports ready, waits for go (the parent makes the cache cold and
starts the clock in between) and reports each step, epoch and the end on a pipe. The engine
owns every job (sweep.jobs): whatever the study does not end, the sweep's end does.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...core.longjob import Jobs, LongJob
from .memory import breakdown
from .params import MIB

ENTRY = "storagebrief.studies.train_resnet50.worker:worker_main"


class JobFailed(RuntimeError):
    pass


@dataclass(eq=False)   # jobs are compared by identity (run.py: which are kept)
class Job:
    """One training job: its process and cgroup (a core.longjob.LongJob the engine owns) and what it measured."""
    index: int
    worker: LongJob
    owner: Jobs | None = None       # the sweep's registry (sweep.jobs), which ends it if the study does not
    ready: dict | None = None
    done: dict | None = None
    epochs: list = field(default_factory=list)
    last_progress: float = 0.0
    need_bytes: int | None = None
    limit_bytes: int | None = None
    anon_ready: int = 0
    anon_max: int = 0
    memory_trace: list = field(default_factory=list)   # polled every 0.25 s while training
    cache_share_bytes: int = 0      # a ratio limit's page-cache share (0: not a ratio run)
    cache_cap: object | None = None  # the run's cachecap.DatasetCacheCap (shared by its jobs; caps ratio runs)
    cache_sum: int = 0              # unmapped page cache in the group, summed over polls
    cache_samples: int = 0
    stats: dict = field(default_factory=dict)
    run_id: str = ""                # the run it is measured in now
    reused_from: str = ""           # the run whose job this was ("" = started for this run)

    @property
    def spec(self) -> dict:
        return self.worker.spec

    @property
    def group(self):
        """Its memory (+ io) cgroup; None where cgroups are unavailable."""
        return self.worker.group

    @property
    def proc(self):
        return self.worker.proc

    def start(self) -> None:
        # Temporary files (TensorFlow's autograph sources) go under the run's own jobs/ folder, which the
        # study removes, instead of piling up in /tmp.
        Path(self.worker.env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        self.worker.start()
        self.last_progress = time.monotonic()

    def again(self, changes: dict, run_id: str) -> None:
        """Re-arm a job that finished a run for a later run (any target; reuse.py) (worker: "again").

        Its TensorFlow start-up (20-30 s, most of a quick run) is not paid again; what the new run
        measures is counted from here (events, memory samples, stats), and its rows name the run
        whose job it was (job_reused_from)."""
        self.spec.update(changes)
        self.reused_from, self.run_id = self.run_id, run_id
        self.ready = self.done = None
        self.epochs, self.memory_trace, self.stats = [], [], {}
        self.need_bytes = None
        self.anon_ready = self.anon_max = self.cache_share_bytes = 0
        self.cache_cap, self.cache_sum, self.cache_samples = None, 0, 0
        self.worker.send("again " + json.dumps(changes))
        self.last_progress = time.monotonic()

    def go(self) -> None:
        self.worker.send("go")
        self.last_progress = time.monotonic()   # a job started early waited idle since ready

    def kill(self) -> None:
        self.worker.kill()

    def end(self) -> None:
        """Kill it if it runs and remove its cgroup (the registry forgets it)."""
        if self.owner is not None:
            self.owner.end(self.worker)
        else:
            self.worker.stop()

    def log_tail(self, n: int = 1500) -> str:
        return self.worker.log_tail(n)


def new_job(index: int, spec: dict, name: str, out_dir: Path, owner: Jobs | None = None, *,
            memory_limit_bytes: int | None = None, io_device=None, need_cgroup: bool = False,
            run_id: str = "") -> Job:
    """A training job, not yet started: logs/<name>.log, jobs/<name>.json, its cgroup made now (memory:
    the size limit or all RAM; io counted on io_device). need_cgroup: CgroupUnavailable instead of none."""
    # Two malloc arenas and a fixed mmap threshold: otherwise TensorFlow's threads grow an arena
    # each and freed decode buffers stay in the heap, so the job's memory drifts by 100+ MB after
    # warm-up (measured) and a ratio limit's page-cache share would be unpredictable.
    env = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "65536", "TMPDIR": str(out_dir / "jobs" / "tmp")}
    worker = LongJob(name, ENTRY, spec, out_dir / "logs" / f"{name}.log", spec_path=out_dir / "jobs" / f"{name}.json",
                     env=env, memory_limit_bytes=memory_limit_bytes, io_device=io_device, need_cgroup=need_cgroup,
                     title=f"job {index}")
    if owner is not None:
        owner.adopt(worker)
    return Job(index, worker, owner, limit_bytes=memory_limit_bytes, run_id=run_id)


def _sample_memory(j: Job) -> None:
    """One 0.25 s sample of a training job's cgroup (v1 has no anon peak counter) and of the dataset's
    cached bytes (its cachecap, which needs no cgroup; counted here where no ratio polls it every 50 ms)."""
    cached = None
    if j.cache_cap is not None and j.done is None:
        if not j.cache_cap.cap_bytes and j.index == 0:
            j.cache_cap.poll([j.proc.pid] if j.proc is not None else [])
        cached = j.cache_cap.cached_bytes()
    if cached is not None:
        j.cache_sum += cached
        j.cache_samples += 1
    b = breakdown(j.group)
    if b is None:
        return
    j.anon_max = max(j.anon_max, b.get("anon_bytes", 0))
    if cached is not None:
        j.memory_trace.append({"t": time.monotonic(), "job": j.index, "epoch": len(j.epochs) + 1,
                               "anon_bytes": b.get("anon_bytes", 0), "page_cache_bytes": cached,
                               "mapped_file_bytes": b.get("mapped_file_bytes", 0)})


def _drain(j: Job, until: str) -> None:
    """Take every event the job sent so far; JobFailed when it ended before `until`."""
    for ev in j.worker.drain():
        kind = ev.get("event")
        j.last_progress = time.monotonic()
        if kind == "ready":
            j.ready = ev
        elif kind == "epoch":
            if j.group is not None:
                try:
                    ev["anon_bytes"] = j.group.memory_breakdown().get("anon_bytes")
                    ev["cache_bytes"] = j.group.memory_breakdown().get("cache_bytes")
                except (OSError, ValueError):
                    pass
            j.epochs.append(ev)
        elif kind == "done":
            j.done = ev
        elif kind == "eof":
            j.proc.wait()
            if (j.ready if until == "ready" else j.done) is None:
                raise JobFailed(_exit_reason(j))


def _poll(jobs: list[Job], until: str, stall_s: float, timeout_s: float) -> None:
    """Drain events until every job reached `until` ('ready' or 'done'); raise JobFailed otherwise.

    While training, reads the dataset's cached pages (and holds a ratio run's at its cap) every 50 ms and samples each job's
    memory every 0.25 s.
    """
    deadline = time.monotonic() + timeout_s
    next_sample = 0.0
    while True:
        if until == "done":
            _cap_caches(jobs)
        if until == "done" and time.monotonic() >= next_sample:
            next_sample = time.monotonic() + 0.25
            for j in jobs:
                _sample_memory(j)
        pending = [j for j in jobs if (j.ready if until == "ready" else j.done) is None]
        if not pending:
            return
        for j in pending:
            _drain(j, until)
        now = time.monotonic()
        stalled = [j for j in pending if now - j.last_progress > stall_s]
        if stalled:
            j = stalled[0]
            raise JobFailed(f"job {j.index} made no progress for {stall_s:.0f} s (train_resnet50.stall_timeout_s)"
                            + (f" under a {j.limit_bytes / MIB:,.0f} MiB memory limit: the job is thrashing; "
                               "raise the limit" if j.limit_bytes else "") + "; killed")
        if now > deadline:
            raise JobFailed(f"jobs did not reach '{until}' within {timeout_s:.0f} s; killed")
        time.sleep(0.05)


def _cap_caches(jobs: list[Job]) -> None:
    """One poll of each page-cache cap among these jobs, over its jobs still training."""
    caps = {id(j.cache_cap): j.cache_cap for j in jobs if j.cache_cap is not None and j.cache_cap.cap_bytes}
    for cap in caps.values():
        pids = [j.proc.pid for j in jobs if j.cache_cap is cap and j.done is None and j.proc is not None]
        if pids:
            cap.poll(pids)


def _exit_reason(j: Job) -> str:
    code = j.proc.returncode
    stats = {}
    if j.group is not None and "memory" in getattr(j.group, "dirs", {}):
        try:
            stats = j.group.memory_stats()
        except OSError:
            pass
    limit = j.limit_bytes
    if stats.get("oom_kills") or (code in (-9, 137) and limit):
        need = f" TensorFlow's measured need in this job was {j.need_bytes / MIB:,.0f} MiB;" if j.need_bytes else ""
        peak = stats.get("memory_peak_bytes")
        return (f"job {j.index} was OOM-killed by the kernel (exit {code}): memory limit "
                f"{(limit or 0) / MIB:,.0f} MiB is below what TensorFlow needs for this model, input size and "
                f"batch.{need} Use at least the baseline run's memory_need_bytes + memory_anon_growth_bytes + "
                "memory_margin_mib (see runs.csv), or give the limit as a dataset:memory ratio, which caps "
                "only the page cache" + (f" (peak before the kill {peak / MIB:,.0f} MiB)" if peak else ""))
    tail = j.log_tail()
    return f"job {j.index} exited with code {code}" + (f": {tail.splitlines()[-1]}" if tail else "")
