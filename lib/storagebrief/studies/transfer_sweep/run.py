"""The transfer-size x queue-depth sweep on the shared engine (core.sweep).

Reproduces "The Micron 9400 NVMe SSD Performance With NVIDIA Magnum IO GPUDirect Storage
Platform" (2023): 4 KB / 128 KB / 1024 KB reads at doubling queue depths, every point a
(throughput, latency) pair; idle vs busy system; two drives on the busy system; GDS vs legacy
when a GPU is visible. One fio job per point (fio.py) on one preconditioned file per target
(dataset.py), inside the run's cgroup (the target's blkio throttle, or on an unthrottled target
one that only holds fio) that fio joins before exec, so its forked job processes are inside too
and the leftovers sweep finds them after a kill -9 (procs.Scope); the busy load (load.py) beside
it, outside that cgroup, stopped and reaped after every busy point. The load's temporary files
live in a scratch folder of the out folder, removed by close() (also on SIGTERM / Ctrl-C) or,
after a kill -9, by the next run. Repeats are the outer loop, so drift spreads over every point instead of biting one.
finish() merges repeats per point (points.csv, percentiles from merged histogram bins) and
forecasts accelerators supported per target and workload (forecast.py, forecast.csv).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...core import cgroups, procs, results, targets as targets_mod
from ...core.config import ParamsError
from ...core.sweep import Measurement, Point
from ...kit import space
from . import STUDY, cpu_cost, dataset, fio, forecast, gpu, gpu_fio, load as load_mod, metrics, served
from .params import TransferSweepParams, size_label


@dataclass(frozen=True)
class Config:
    """One point of the sweep: the system's load, the data path, the pattern, transfer size and depth."""
    load: str                   # idle | busy
    path: str                   # cpu | gds | legacy | legacy-pread | gds-fio | legacy-fio (gpu.py)
    rw: str
    block_size_bytes: int
    queue_depth: int

    @property
    def label(self) -> str:
        return (f"{self.load} {self.rw} {size_label(self.block_size_bytes)} QD {self.queue_depth}"
                + ("" if self.path == "cpu" else f" GPU {self.path}"))


@dataclass
class TransferState:
    """sweep.state of this study: what prepare() found and made, read by the runs and close()."""
    files: dict[str, Path] = field(default_factory=dict)   # target name -> its preconditioned file
    gpu: dict = field(default_factory=dict)                # gpu.detect(), or why the path is off
    busy: dict | None = None                               # the peak and the calibrated load; None: no busy load
    tools: dict = field(default_factory=dict)              # fio binary, version, engines
    scratch: Path | None = None                            # the load's scratch folder (removed by close())


# --------------------------------------------------------------------------- prepare
def _check_tools(p: TransferSweepParams) -> dict:
    """fio with the engine, and the load tool: refused with the key before any work."""
    binary = fio.fio_binary()
    if binary is None:
        raise ParamsError(f"transfer_sweep.engine = '{p.engine}': fio is not installed (not on PATH); install the "
                          "Debian package 'fio' (`make system-deps`)")
    listed = fio.engines(binary)
    if p.engine not in listed:
        raise ParamsError(f"transfer_sweep.engine = '{p.engine}': this fio build does not list it in "
                          f"`fio --enghelp`; it lists {', '.join(listed)}")
    if "busy" in p.loads and load_mod.tool_binary(p.busy.tool) is None:
        pkg = {"stress-ng": "stress-ng", "stressapptest": "stressapptest"}[p.busy.tool]
        raise ParamsError(f"transfer_sweep.busy.tool = '{p.busy.tool}': not installed (not on PATH); install the "
                          f"Debian package '{pkg}' (`make system-deps`) or drop 'busy' from transfer_sweep.loads")
    cufile_fio = gpu.gpu_fio_binary()
    return {"fio": binary, "fio_version": fio.fio_version(binary), "fio_engines": listed,
            "fio_libcufile": "libcufile" in fio.engines(cufile_fio), "fio_libcufile_binary": cufile_fio}


def _check_space(p: TransferSweepParams, tlist) -> None:
    """Every target's file fits; targets on one filesystem share its free space."""
    space.check_space(tlist, lambda t: dataset.needed_bytes(dataset.data_file(t, STUDY.name), p.file_bytes),
                      "the transfer-sweep file (transfer_sweep.file_mib)")


def _check_direct(t, path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        os.close(fd)
    except OSError as exc:
        raise targets_mod.TargetError(f"target '{t.name}' ({t.path}): the filesystem refuses O_DIRECT "
                                      f"({exc.strerror}); fio runs with direct=1") from None


def _remove_dead_leftovers(sweep) -> None:
    """A killed run's scratch folder (its owner dead) and fio's half-written JSON files (the engine's
    leftovers sweep has already killed any fio that held them) go before this run writes anything."""
    for line in procs.remove_dead_scratch(sweep.out_dir):
        sweep.log(line)
        sweep.note(line)
    for stale in (sweep.out_dir / "fio").glob(f".{STUDY.name}-*.json.tmp"):
        stale.unlink(missing_ok=True)


def _prepare_files(sweep) -> dict[str, Path]:
    """The preconditioned file of every target, checked: below the target, O_DIRECT, profile speed."""
    p: TransferSweepParams = sweep.p
    files = {}
    for t in sweep.targets:
        f = dataset.prepare_file(t, STUDY.name, p.file_bytes, p.seed, sweep.log)
        if not fio.same_file(f, t.path):
            raise targets_mod.TargetError(f"target '{t.name}': {f} is not a file below {t.path}")
        _check_direct(t, f)
        targets_mod.check_profile_speed(t, [f])
        files[t.name] = f
    return files


def _calibrate_busy(sweep, state: TransferState) -> dict:
    """The machine's peak memory bandwidth and the busy load calibrated against it."""
    p: TransferSweepParams = sweep.p
    sweep.log(f"measuring peak memory bandwidth and calibrating the busy load ({p.busy.tool})")
    # the load's log and report: in the out folder, removed by close() (never the system temp folder)
    scratch = state.scratch = procs.scratch_dir(sweep.out_dir, STUDY.name)
    peak = load_mod.measure_peak(p.busy.tool, p.busy.peak_seconds, scratch)
    settings = load_mod.calibrate(p.busy.tool, p.busy.cpu_percent, p.busy.memory_bandwidth_percent,
                                  peak["peak_memory_mb_per_s"], p.busy.calibrate_seconds, scratch)
    sweep.log(f"peak memory bandwidth {peak['peak_memory_mb_per_s']:,.0f} MB/s; load calibrated to "
              f"{settings.get('calibrated_cpu_percent') or float('nan'):.0f} % CPU (target {p.busy.cpu_percent:g} %)")
    return {**peak, "settings": settings, "tool": p.busy.tool, "cpus": load_mod.ncpu()}


def _study_json(p: TransferSweepParams, state: TransferState) -> dict:
    return {
        "fio_version": state.tools["fio_version"], "engine": p.engine,
        "fio_libcufile_listed": state.tools["fio_libcufile"], "fio_libcufile_binary": state.tools["fio_libcufile_binary"],
        "queue_depth_split": "queue depth = iodepth x numjobs; " + (
            "psync: iodepth 1, numjobs = queue depth" if p.engine in fio.SYNC_ENGINES else
            f"numjobs = {p.numjobs}, iodepth = queue depth / {p.numjobs}"),
        "file_bytes": p.file_bytes, "files": {k: str(v) for k, v in state.files.items()},
        "gpu": state.gpu, "busy": state.busy, "percentiles": list(fio.PERCENTILES),
        "ramp_time_s": p.ramp_time_s, "runtime_s": p.runtime_s, "repeats": p.repeats}


def prepare(sweep) -> None:
    p: TransferSweepParams = sweep.p
    state = sweep.state = TransferState()
    state.tools = _check_tools(p)
    _remove_dead_leftovers(sweep)
    _check_space(p, sweep.targets)
    state.files = _prepare_files(sweep)
    state.gpu = gpu.detect() if p.gpu == "auto" else {"available": False,
                                                      "reason": "GPU path off (transfer_sweep.gpu)"}
    if not state.gpu["available"]:
        sweep.note(state.gpu["reason"])
    if "busy" in p.loads:
        state.busy = _calibrate_busy(sweep, state)
    fio_dir = fio.raw_json_dir(sweep.out_dir)
    for old in fio_dir.glob(f"{STUDY.name}-*.json"):
        old.unlink()
    results.write_json(sweep.out_dir / "study.json", _study_json(p, state))


# --------------------------------------------------------------------------- plan
def _paths(sweep, rw: str) -> list[str]:
    info = sweep.state.gpu or {}
    return ["cpu"] + (gpu.planned(info, sweep.state.tools.get("fio_libcufile", False)) if "read" in rw else [])


def plan(sweep) -> list[Point]:
    p: TransferSweepParams = sweep.p
    out = []
    for r in range(1, p.repeats + 1):
        for ld in p.loads:
            for rw in p.rw:
                for path in _paths(sweep, rw):
                    for bs in p.block_sizes:
                        for qd in p.queue_depths:
                            config = Config(ld, path, rw, bs, qd)
                            out.append(Point(config, r, config.label))
    return out


def run_id(config: Config, target, repeat: int) -> str:
    c = config
    return (f"{STUDY.name}-{target.name}-{c.load}-{c.path}-{c.rw}-{size_label(c.block_size_bytes)}"
            f"-qd{c.queue_depth}-r{repeat}")


# --------------------------------------------------------------------------- one run
def _run_scope(run) -> procs.Scope:
    """Where this run's processes live: the target's throttle cgroup, else a cgroup that only holds
    them (none without the capability: then the owner marker and fio's session are the nets)."""
    group = run.throttle()
    if group is None:
        try:
            group = run.cgroup("run")
        except cgroups.CgroupUnavailable:
            group = None
    if group is not None:
        group.kill_on_remove = True    # whatever is left when the engine removes it is an orphan
    return procs.Scope(run.run_id, group)


def _busy_columns(busy: dict | None, p: TransferSweepParams) -> dict:
    if busy is None:
        return {}
    s = busy["settings"]
    return {"load_tool": busy["tool"], "load_cpu_percent_target": p.busy.cpu_percent,
            "load_memory_share_percent_target": p.busy.memory_bandwidth_percent,
            "peak_memory_mb_per_s": busy["peak_memory_mb_per_s"],
            "load_cpu_setting_percent": s.get("cpu_load"), "load_calibrated_cpu_percent": s.get("calibrated_cpu_percent")}


@dataclass(frozen=True)
class Attempt:
    """One run of one point, as run_one set it up for _measure."""
    run: object                 # core.sweep.Run
    config: Config
    file: Path                  # the target's preconditioned file
    tmp: Path                   # fio's JSON while it writes
    final: Path                 # fio's JSON once the run measured (fio/<run_id>.json)
    busy: dict | None           # the calibrated load on a busy point
    scope: procs.Scope
    iodepth: int
    numjobs: int
    timeout: float


def _config_columns(c: Config, p: TransferSweepParams, a: Attempt, throttled: bool) -> dict:
    return {"load": c.load, "path": c.path, "rw": c.rw, "block_size_bytes": c.block_size_bytes,
            "block_size_label": size_label(c.block_size_bytes), "queue_depth": c.queue_depth,
            "iodepth": a.iodepth, "numjobs": a.numjobs, "ramp_time_s": p.ramp_time_s,
            "runtime_s": p.runtime_s, "file_bytes": p.file_bytes, "throttled": throttled,
            **_busy_columns(a.busy, p)}


def run_one(run, config: Config) -> Measurement:
    t, p = run.target, run.p
    state: TransferState = run.sweep.state
    f = state.files[t.name]
    # fio reads with O_DIRECT (the page cache is bypassed): evicting this file is enough. With a whole-system
    # drop_caches before each, the quick profile's 48 points took 82 and 86 s; 75 s without (measured).
    if config.path == "cpu":
        run.evict([f], "the point's file; fio reads it with O_DIRECT")
    else:
        run.cold_cache([f])
    if config.path == "cpu" or config.path in gpu.FIO_PATHS:
        fio.warm_code(data=f)
    scope = _run_scope(run)
    group = scope.group if scope.group is not None and scope.group.io else None
    # GPU paths keep one request per slot (ours: a thread per slot; fio's libcufile: a job per slot)
    iodepth, numjobs = (fio.split_queue_depth(config.queue_depth, p.numjobs, p.engine) if config.path == "cpu"
                        else (1, config.queue_depth))
    final = fio.raw_json_dir(run.sweep.out_dir) / f"{run.run_id}.json"
    attempt = Attempt(run, config, f, final.with_name(f".{final.name}.tmp"), final,
                      state.busy if config.load == "busy" else None, scope, iodepth, numjobs,
                      p.ramp_time_s + p.runtime_s + 120)
    row = _config_columns(config, p, attempt, group is not None)
    try:
        try:
            return _measure(attempt, row)
        finally:
            scope.close()                # nothing of fio (or the GPU path) outlives its point
    except BaseException:
        attempt.tmp.unlink(missing_ok=True)      # an interrupted run leaves no row and no JSON
        raise


def _start_load(a: Attempt) -> load_mod.Load:
    p = a.run.p
    running = load_mod.start(a.busy["tool"], a.busy["settings"], p.busy.settle_s + a.timeout,
                             a.run.sweep.state.scratch)
    time.sleep(p.busy.settle_s)
    if running.proc.poll() is not None:
        raise load_mod.LoadError(f"the busy load exited early: {running.output()[-500:]}")
    return running


def _run_fio(a: Attempt) -> dict:
    """One fio job, the cpu path (host memory) or fio's libcufile reference (gds-fio, legacy-fio):
    fio's parsed numbers, its own CPU accounting and its wall time."""
    p, c = a.run.p, a.config
    if c.path == "cpu":
        job, binary = fio.FioJob(a.file, c.rw, c.block_size_bytes, a.iodepth, a.numjobs, p.engine,
                                 p.ramp_time_s, p.runtime_s, p.file_bytes, a.tmp), None
    else:
        job = gpu_fio.job(a.file, c.rw, c.block_size_bytes, c.queue_depth, p.ramp_time_s, p.runtime_s,
                          p.file_bytes, a.tmp, c.path)
        binary = a.run.sweep.state.tools.get("fio_libcufile_binary")
    t0 = time.perf_counter()
    doc = fio.run_job(fio.job_args(job), a.timeout, a.scope, fio=binary)
    wall = time.perf_counter() - t0
    a.run.stop_clock()
    row = fio.parse(doc, c.rw)
    cpu_s = cpu_cost.fio_process_cpu_s(doc)
    return {"engine": job.engine, "fio_wall_s": wall, **row, "process_cpu_s": cpu_s,
            "cpu_cores_per_gb_per_s": cpu_cost.per_gb(cpu_s, row.get("io_bytes")),
            **({"cuda_io": gpu.FIO_PATHS[c.path]} if c.path in gpu.FIO_PATHS else {})}


def _run_gpu(a: Attempt) -> dict:
    """One of our GPU points (gds, legacy, legacy-pread) in a fresh process inside the run's scope; its
    latency histogram (fio's buckets) goes beside fio's JSON so points.csv merges repeats the same way."""
    p, c = a.run.p, a.config
    point = gpu.GpuPoint(c.path, str(a.file), c.block_size_bytes, c.queue_depth, p.runtime_s, p.ramp_time_s, p.seed,
                         sequential=c.rw == "read")
    res = gpu.run_point(point, a.timeout, a.scope.preexec())
    a.run.stop_clock()
    bins = res.pop("bins_ns", {})
    results.write_json(a.final, {"storagebrief": "gpu_worker latency histogram (fio's buckets, ns)",
                                 "jobs": [{fio.direction(c.rw): {"clat_ns": {"bins": bins}}}]})
    return {**res, "latency_bins_json": f"fio/{a.final.name}"}


def _measure(a: Attempt, row: dict) -> Measurement:
    running = None
    try:
        if a.busy is not None:
            running = _start_load(a)
        meter = cpu_cost.Meter(a.scope.group)
        a.run.start_clock()
        row.update(_run_gpu(a) if a.config.path in gpu.OURS else _run_fio(a))
        row.update(meter.columns())
    finally:
        a.run.stop_clock()
        if running is not None:
            running.stop()
            row.update(load_mod.measured(running, a.busy["peak_memory_mb_per_s"]))
            running.cleanup_files()
            if row.get("load_memory_mb_per_s") is None:
                # seen once in a loaded full test run: a 1.0 s load whose memory workers reported no rate
                a.run.sweep.note(f"{a.run.run_id}: the busy load reported no memory rate ({running.tool} in "
                                 f"{running.wall_s:.1f} s): its load_memory columns are empty")
    row.update(served.columns(row, a.run.monitor.summary() if a.run.monitored else {}))
    if a.config.path not in gpu.OURS:
        a.tmp.rename(a.final)
        row["fio_json"] = f"fio/{a.final.name}"
    return Measurement(row)


# --------------------------------------------------------------------------- close
def close(sweep) -> None:
    """Always runs last (also after an exception, SIGTERM or Ctrl-C): the scratch folder goes."""
    procs.remove_scratch(getattr(sweep.state, "scratch", None))   # a plain {} when prepare() never began


# --------------------------------------------------------------------------- finish
def finish(sweep, frame) -> None:
    """points.csv (repeats merged, percentiles from merged bins) and forecast.csv."""
    p: TransferSweepParams = sweep.p
    pts = gpu_fio.add_ratios(metrics.points(frame, sweep.out_dir / "fio"))
    results.write_csv(sweep.out_dir / "points.csv", pts)
    ctx = forecast.emulate_context(p.forecast.emulate_dir)
    if not ctx:
        sweep.note(f"forecast: no emulate results in {p.forecast.emulate_dir} (study.json + mlperf_results.json), so "
                   "the forecast stands without an emulated answer beside it")
    profiles = {t.name: t.profile.model_dump() for t in sweep.targets if t.emulated}   # its caps bound the forecast
    fc = forecast.forecast(pts, p.forecast, ctx, profiles)
    results.write_csv(sweep.out_dir / "forecast.csv", fc)


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = skip = None
