"""One measured run (core.sweep.Run): its target, cold cache, cgroups, monitor and block trace, and the
limits it puts on long-lived jobs (core/run_limits.py); the engine creates it for every run of the plan,
hands it to the study's run_one and always closes it (core/sweep.py).
"""
from __future__ import annotations

from pathlib import Path

from . import blocktrace, cache, cgroups, cpu_confine, interference, monitor, results, targets as targets_mod
from .engine_outputs import TRACES
from .run_limits import RunLimits


def limits_set(io) -> bool:
    return io is not None and any((io.read_bps, io.write_bps, io.read_iops, io.write_iops))



class Run(RunLimits):
    """One measured run: its target, cold cache, cgroups, monitor, a long-lived job's limits; closed by the engine."""

    def __init__(self, sweep, target, repeat: int, run_id: str):
        self.sweep, self.target, self.repeat, self.run_id = sweep, target, repeat, run_id
        self.params, self.p, self.log = sweep.params, sweep.p, sweep.log
        self.started_at = results.utc_now()
        self.cache_method = ""
        self.emulated = sweep.throttled(target.name)     # a held cgroup (a gateway, brokers) has its profile on
        self.monitor = monitor.Monitor(target.device.name if target.device else None,
                                       sweep.params.run.monitor_interval_s)
        self.memory_limited = False      # a cgroup of this run capped its memory: its memory stalls are its own
        self.rerun_of = ""               # the disturbed run this one re-runs (core/reruns.py), '' for a first run
        self._samplers: list = []
        self._groups: list[cgroups.Cgroup] = []
        self._clock = False
        self._trace: blocktrace.BlockTrace | None = None
        self.trace: blocktrace.TraceResult | None = None

    # -- cold cache --------------------------------------------------------------------------
    def cold_cache(self, paths) -> str:
        """Make the next reads of `paths` come from the device; the method becomes cache_method."""
        self.cache_method = cache.cold_cache(paths, self.params.run.cold_cache)
        return self.cache_method

    # -- cgroups -----------------------------------------------------------------------------
    def cgroup(self, suffix: str = "", memory_limit_bytes: int | None = None, io=None) -> cgroups.Cgroup:
        """A child cgroup removed when the run ends; raises CgroupUnavailable with the reason."""
        name = f"{self.run_id}-{suffix}" if suffix else self.run_id
        group = cgroups.Cgroup(name, memory_limit_bytes=memory_limit_bytes, io=io).create()
        self._groups.append(group)
        self.memory_limited = self.memory_limited or memory_limit_bytes is not None
        if limits_set(io):
            self.emulated = True
        if group.inherited_io:
            caps = ", ".join(f"{k.rsplit('.', 1)[-1].removesuffix('_device')} {v:,}"
                             for k, v in group.inherited_io.items())
            self.sweep.note(f"target '{self.target.name}': this process's own cgroup (or an ancestor) throttles the "
                            f"target's device ({caps}); the run's cgroups carry that limit too, so its figures are "
                            "capped by it")
        return group

    def confine_cpus(self, cpus: list[int], group: cgroups.Cgroup | None = None) -> cpu_confine.Confinement:
        """This run's processes held to `cpus` (core/cpu_confine.py): a v1 cpuset cgroup, removed when the run
        ends; else cpuset.cpus or cpu.max on `group` (this run's own v2 cgroup); else their affinity, said why."""
        conf = cpu_confine.confine(f"{self.run_id}-cpuset", cpus, group)
        if conf.group is not None:
            self._groups.append(conf.group)
        return conf

    def release(self, group: cgroups.Cgroup) -> None:
        """Let a cgroup outlive this run (run.lasting_throttle hands it to sweep.jobs, which removes it); a group
        this run does not own is left as it is."""
        if group in self._groups:
            self._groups.remove(group)

    def throttle(self, suffix: str = "") -> cgroups.Cgroup | None:
        """A cgroup holding the target's emulated profile, or None (unthrottled target, or the
        capability is missing: the reason goes to the target's warnings)."""
        return targets_mod.throttle_or_count(self.target, lambda io: self.cgroup(suffix, io=io),
                                             self.unthrottled, counting=False)

    def client_cgroup(self, memory_limit_bytes: int | None = None) -> cgroups.Cgroup | None:
        """The cgroup for a client that reads the target's device itself (core.store.DirStore.client_group): the
        target's throttle, or limits that only count its device reads, and/or a memory limit capping its page
        cache; removed when the run ends. When both cannot be had it keeps what the machine allows (the throttle
        alone, else the cap alone) and a note says what is missing; None when neither can be had."""
        t = self.target
        io = targets_mod.io_limits(t, accounting=True)       # unthrottled: counts the run's own reads
        if t.emulated and io is None:
            self.sweep.note(f"target '{t.name}': emulated profile not applied: {t.device.reason}")
        attempts = [(memory_limit_bytes, io)]
        if memory_limit_bytes is not None and io is not None:
            attempts += [(None, io), (memory_limit_bytes, None)]
        group, last_err = None, None
        for mem, lim in attempts:
            if mem is None and lim is None:
                continue
            try:
                group = self.cgroup(memory_limit_bytes=mem, io=lim)
                break
            except cgroups.CgroupUnavailable as exc:
                last_err = exc
        if limits_set(io) and (group is None or group.io is None):
            self.sweep.note(f"target '{t.name}': emulated profile not applied: {last_err}")
        if memory_limit_bytes is not None and (group is None or group.memory_limit_bytes is None):
            self.sweep.note(f"page cache not capped (memory cgroup unavailable: {last_err}); the loader evicted "
                            "each file after reading it (fadvise DONTNEED) instead")
        return group

    def unthrottled(self, reason) -> None:
        msg = f"target '{self.target.name}': emulated profile not applied: {reason}"
        if msg not in self.target.warnings:
            self.target.warnings.append(msg)

    # -- clock -------------------------------------------------------------------------------
    def add_sampler(self, sampler) -> None:
        """Anything with start()/stop() that samples alongside the monitor."""
        self._samplers.append(sampler)

    def start_clock(self) -> None:
        """The measured interval begins: block trace (run.trace), device/CPU monitor and samplers start."""
        self._start_trace()
        self.monitor.start()
        for s in self._samplers:
            s.start()
        self._clock = True

    def stop_clock(self) -> None:
        if not self._clock:
            return
        self._clock = False
        for s in self._samplers:
            s.stop()
        self.monitor.stop()
        self._stop_trace()

    # -- block trace -------------------------------------------------------------------------
    def trace_path(self) -> Path:
        return self.sweep.out_dir / TRACES / f"{self.run_id}.tracefs-raw.gz"

    def _start_trace(self) -> None:
        """Block events of the target's device while the clock runs (tracefs instance of our own)."""
        sweep, dev = self.sweep, self.target.device
        if not self.params.run.trace or self._trace is not None:
            return
        if sweep.trace_off is None and (dev is None or dev.major is None):
            self.sweep.note(f"target '{self.target.name}': no block device to trace "
                            f"({dev.reason if dev else 'unresolved'}); characterization from diskstats only")
            return
        if sweep.trace_off is not None:
            return
        try:
            self._trace = blocktrace.BlockTrace((dev.major, dev.minor), self.trace_path(),
                                                self.params.run.trace_buffer_kib).start()
        except blocktrace.TraceUnavailable as exc:
            self._trace = None
            sweep.trace_off = str(exc)
            sweep.note(f"block tracing off: {exc}; characterization.csv holds what diskstats gives "
                       "(read %, IOPS, mean request size), no per-request statistics")

    def _stop_trace(self) -> None:
        t, self._trace = self._trace, None
        if t is not None:
            self.trace = t.stop()

    def discard_trace(self) -> None:
        """An interrupted run leaves no row, so no trace either."""
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        self.trace_path().unlink(missing_ok=True)

    @property
    def monitored(self) -> bool:
        return bool(self.monitor.snapshots)

    def disturbance(self, summary: dict) -> dict:
        """`disturbed` and `disturbed_reason` of the run from its monitor summary (core/interference.judge)."""
        limited = self.memory_limited or any(s.machine.memory_limited for s in self.monitor.snapshots if s.machine)
        disturbed, why = interference.judge(summary, self.monitor.span_s, limited)
        return {"disturbed": disturbed, "disturbed_reason": why}

    def close(self) -> None:
        """Always runs: samplers, monitor and block trace stopped (tracing switched off, its
        instance removed), every cgroup of this run removed, every long-lived job's limits lifted."""
        try:
            try:
                self.stop_clock()
            finally:
                if self._trace is not None:
                    self._trace.close()
                    self._trace = None
        finally:
            for g in reversed(self._groups):
                g.remove()
            self._groups.clear()
            self.lift_job_limits()
