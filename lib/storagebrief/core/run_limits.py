"""What a Run does to things beyond its own cgroups: a long-lived job's limits for this run, and how the
run's cache was made cold. Mixed into core.measured_run.Run (core.sweep.Run), so a study sets neither a cgroup limit nor
`cache_method` itself (tests/test_code_shape.py holds the studies to it).

Limits: `run.limit_job(job)` puts the target's emulated profile (and, if asked, a memory limit) on a
long-lived job's cgroup (core/longjob.py) for this run only; `Run.close()` lifts them after every run,
failed or not (memory back to the job's own limit, the device unthrottled), so a job kept for a later
run, or idle between runs, never carries a run's limits.

Cache methods, each recorded as the row's cache_method: `Run.cold_cache` (drop_caches as root, else
fadvise of the paths), `evict` (fadvise of the files a run will read only: drop_caches would also evict
a long-lived job's code pages, whose re-reads would be charged to the run), `settle_written` (a write
workload: earlier dirty pages written back, the run's own folder evicted) and `cache_not_controlled`
(a remote store whose cache this client cannot reach).
"""
from __future__ import annotations

import os

from . import cache, targets as targets_mod

TARGET = object()       # limit_job's default io: the run's target's emulated profile


class RunLimits:
    """Mixed into core.measured_run.Run (which sets target, params, emulated, cache_method and unthrottled())."""

    # -- a long-lived job's limits -------------------------------------------------------------
    def limit_job(self, job, io=TARGET, memory_limit_bytes: int | None = None) -> bool:
        """This run's limits on `job` (a core.longjob.LongJob), lifted when the run closes.

        io: the profile to throttle its device with (default the target's; None: none). A job without an
        io cgroup runs unthrottled and the target's warnings say why. Returns whether the profile is on
        (run.emulated is set then). A limit the kernel refuses raises (CgroupUnavailable, CgroupLimitError,
        OSError for a memory limit it cannot reclaim to): the study decides between a failed row and an
        unthrottled run."""
        from .cgroups import CgroupUnavailable
        if io is TARGET:
            io = targets_mod.io_limits(self.target)
        jobs = self.__dict__.setdefault("_limited_jobs", [])
        if job not in jobs:
            jobs.append(job)              # before writing: close() lifts even a half-applied limit
        applied = False
        if io is not None:
            if job.group is None or "blkio" not in job.group.dirs:
                self.unthrottled(f"{job.title} has no io cgroup" + (f": {job.why_no_cgroup}" if job.why_no_cgroup
                                                                   else ""))
            else:
                job.throttle(io)
                self.emulated = applied = True
        if memory_limit_bytes is not None:
            if job.group is None:
                raise CgroupUnavailable(f"{job.title} has no memory cgroup: {job.why_no_cgroup}")
            os.sync()                     # dirty pages written first: what the limit reclaims is clean cache
            job.limit_memory(memory_limit_bytes)
        return applied

    def lift_job_limits(self) -> None:
        """Every job this run limited back to its own limits (Run.close calls it)."""
        for job in self.__dict__.pop("_limited_jobs", []):
            job.lift_limits()

    def lasting_throttle(self, suffix: str):
        """Like Run.throttle(), for processes that serve this target's later runs too (a server): the cgroup is
        not removed when this run closes but when the study removes it or, at the latest, when the sweep ends
        (sweep.jobs holds it). None: an unthrottled target, or the capability is missing (said in the warnings)."""
        group = self.throttle(suffix)
        if group is not None:
            self.release(group)
            self.sweep.hold(group, self.target)    # the target's later runs are emulated while it lives
        return group

    # -- cache methods (the row's cache_method) ------------------------------------------------
    def evict(self, paths, what: str, sync: bool = True) -> str:
        """Evict these files' pages only (fadvise DONTNEED; os.sync first unless sync=False): the files the
        run will read, nothing a long-lived job or server has cached. run.cold_cache false: nothing."""
        if not self.params.run.cold_cache:
            self.cache_method = "none (run.cold_cache is false)"
        else:
            if sync:
                os.sync()
            cache.fadvise_dontneed(paths)
            self.cache_method = f"fadvise_dontneed ({what})"
        return self.cache_method

    def settle_written(self, folder, what: str = "the run's checkpoint folder",
                       stays: str = "TensorFlow's code") -> str:
        """A write workload's start: earlier runs' dirty pages written back (none is written in this run) and
        the run's own folder evicted; not drop_caches, which would evict a long-lived job's code pages."""
        os.sync()
        cache.fadvise_dontneed([folder])
        self.cache_method = f"fadvise_dontneed ({what}, after os.sync; not drop_caches: {stays} stays cached)"
        return self.cache_method

    def cache_not_controlled(self, where: str = "remote store") -> str:
        """The data lives where this client cannot make its cache cold (an S3 endpoint elsewhere)."""
        self.cache_method = f"{where}: not controlled"
        return self.cache_method
