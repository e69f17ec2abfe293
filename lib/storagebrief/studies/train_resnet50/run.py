"""ResNet50 training from TFRecords under cgroup memory limits, on the shared engine (core.sweep).

Reproduces the training half of "Benchmarking Storage with AI Workloads" (Samsung, SDC):
benchmark datasets fit in the page cache, so training never stresses storage; capping
memory so the dataset:memory ratio is 2.5:1 instead of 1:5 makes every epoch read from the
device. Scenarios, each on every target:

  memory      one model, each memory setting (none, a dataset:memory ratio, a size)
  parallel    K models at once, cores split, each job in its own cgroup
  ingest      one model while a writer ingests new TFRecords at a set rate
  checkpoint  one model checkpointing every N steps (vs the long default interval)

Each job is its own process in its own cgroup (jobs.py, worker.py; a core.longjob.LongJob the engine
owns). The parent waits for every job to be ready, makes the dataset's cache cold, applies the ratio's page-cache cap
(memory.py), starts the clock and says go. Where memory cgroups are unavailable, limited
runs are skipped (a note says why) and unlimited runs go without memory statistics.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core import cgroups, targets as targets_mod
from ...core.folders import folder_below
from ...core.outdir import remove_tree
from ...core.procs import die_with_parent
from ...core.sweep import Measurement, Point
from . import STUDY, prestart, reuse
from .dataset import Dataset, resolve_datasets
from ...kit.ingest import IngestWriter
from ...kit import tf_import
from .cachecap import DatasetCacheCap
from .jobs import Job, JobFailed, _poll, new_job
from .memory import (anon_bytes, final_stats, foreign_cache_drops, memory_need, reset_peak, safe_stats,
                     total_memory_bytes)
from ...core.longjob import memory_unavailable
from .metrics import _rows
from .params import MIB, MemorySetting, TrainParams, parse_memory


# --------------------------------------------------------------------------- what runs
@dataclass(frozen=True)
class RunSpec:
    sweep: str                 # memory | parallel | ingest | checkpoint
    models: int
    memory: str
    ingest_mb_per_s: float = 0.0
    checkpoint_every_steps: int = 0


def scenarios(p: TrainParams) -> list[RunSpec]:
    """Run order; the parallel sweep's K=1 point is the memory sweep's run when settings match."""
    runs = [RunSpec("memory", 1, m) for m in sorted(p.memory_limits, key=lambda m: parse_memory(m).limited)]
    have_one = p.parallel_memory in p.memory_limits
    runs += [RunSpec("parallel", k, p.parallel_memory) for k in p.parallel_models if not (k == 1 and have_one)]
    if p.ingest_mb_per_s > 0:
        runs.append(RunSpec("ingest", 1, p.ingest_memory, ingest_mb_per_s=p.ingest_mb_per_s))
    if p.checkpoint_every_steps > 0:
        runs.append(RunSpec("checkpoint", 1, p.checkpoint_memory, checkpoint_every_steps=p.checkpoint_every_steps))
    return runs


def run_id_for(spec: RunSpec, target: str, repeat: int) -> str:
    mem = re.sub(r"[^A-Za-z0-9.]+", "_", spec.memory)
    extra = (f"-ingest{spec.ingest_mb_per_s:g}" if spec.ingest_mb_per_s else "") + \
            (f"-ckpt{spec.checkpoint_every_steps}" if spec.checkpoint_every_steps else "")
    return f"{STUDY.name}-{spec.sweep}-{target}-k{spec.models}-mem{mem}{extra}-r{repeat}"


def cpu_split(models: int, ncpu: int | None = None) -> list[list[int]]:
    """Cores per job: an equal share of this process's CPUs; jobs share cores when K > CPUs."""
    cpus = sorted(os.sched_getaffinity(0)) if ncpu is None else list(range(ncpu))
    if models >= len(cpus):
        return [[cpus[i % len(cpus)]] for i in range(models)]
    per = len(cpus) // models
    return [cpus[i * per:(i + 1) * per] for i in range(models)]


def warm_libraries() -> subprocess.Popen:
    """Read TensorFlow's libraries once outside every job's cgroup, so their pages are cached already
    (started beside the datasets' generation; `.wait()` before the first job). Reading them (tf_import.read_libraries:
    ~1 GB, 0.6-0.9 s of CPU here) replaced importing TensorFlow for it (4.6-8.7 s of CPU) in issue 56.

    After an earlier stage's drop_caches the first job would otherwise read ~400 MB of libraries,
    charged to its cgroup as page cache (measured: 444 MiB 'held' by the first baseline vs 94 MiB
    by the next), which skews its startup, its page cache and a ratio run's cap.
    """
    return subprocess.Popen([sys.executable, "-c", tf_import.WARM_UP],
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)


# --------------------------------------------------------------------------- engine hooks
@dataclass
class TrainState:
    """sweep.state: every target's dataset, whether memory cgroups work, and what runs measured."""
    datasets: dict[str, Dataset]
    memory_unavailable: str | None          # why memory cgroups are unavailable; None: they work
    # per target, the most memory a job held that reclaim cannot take (refuses smaller sizes)
    need: dict[str, int] = field(default_factory=dict)
    early: prestart.Early | None = None         # the next run's jobs, started with this run's
    kept: dict = field(default_factory=dict)    # models -> jobs kept for a later run (reuse.py)


def prepare(sweep) -> None:
    """Fresh output folders, datasets, warm libraries, capability."""
    p: TrainParams = sweep.p
    sweep.out_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("timeseries", "logs", "jobs"):     # the engine's working folder is fresh: nothing to clear
        (sweep.out_dir / sub).mkdir(exist_ok=True)
    t = time.perf_counter()
    warm = warm_libraries()
    try:
        sweep.status("datasets on every target (TensorFlow's libraries read into the cache beside)")
        datasets = resolve_datasets(sweep.params, sweep.targets, p, sweep.log)
        warm.wait(timeout=600)
    finally:
        if warm.poll() is None:
            warm.kill()
            warm.wait()
    sweep.log(f"datasets ready, TensorFlow libraries cached ({time.perf_counter() - t:.1f} s)")
    for t in sweep.targets:
        targets_mod.check_profile_speed(t, [Path(f) for f in datasets[t.name].files[:4]])
    sweep.state = TrainState(datasets=datasets, memory_unavailable=memory_unavailable())


def plan(sweep) -> list[Point]:
    """for repeat: for scenario (targets interleaved by the engine); limited runs need memory cgroups."""
    p: TrainParams = sweep.p
    runs = scenarios(p)
    reason = sweep.state.memory_unavailable
    if reason:
        skipped = [r for r in runs if parse_memory(r.memory).limited]
        runs = [r for r in runs if not parse_memory(r.memory).limited]
        sweep.note(f"memory-limited runs skipped ({len(skipped)} per target and repeat: "
                   f"{', '.join(sorted({r.memory for r in skipped}))}): memory cgroups unavailable: {reason}")
    def times(spec: RunSpec) -> int:      # page 1's memory sweep: memory_runs; the other sweeps, exploratory: repeats
        return max(p.repeats, p.memory_runs) if spec.sweep == "memory" else p.repeats
    points = [Point(spec, repeat, f"{spec.sweep}: {spec.models} model(s), memory {spec.memory}")
              for repeat in range(1, max(map(times, runs), default=0) + 1) for spec in runs if repeat <= times(spec)]
    return points


def run_id(config: RunSpec, target, repeat: int) -> str:
    return run_id_for(config, target.name, repeat)


def run_one(run, config: RunSpec) -> Measurement:
    """One scenario on run.target; remembers the job's memory need for later size limits."""
    state: TrainState = run.sweep.state
    m = execute_run(run, config, state.datasets[run.target.name], need_hint=state.need.get(run.target.name))
    if m.ok:
        need = m.row["memory_need_bytes"]
        if need == need:   # NaN: nothing measured
            state.need[run.target.name] = max(state.need.get(run.target.name, 0), int(need))
        if m.row.get("foreign_cache_drops"):
            run.sweep.note(f"{run.run_id}: another process dropped the page cache {m.row['foreign_cache_drops']} "
                           "time(s) during the run, so its cache hits (re-read ratio) understate caching")
    return m


def finish(sweep, frame) -> None:
    shutil.rmtree(sweep.out_dir / "jobs", ignore_errors=True)


def close(sweep) -> None:
    """Always, also after an error between runs or a signal: the early and the kept jobs end and their
    cgroups go (the engine ends every job it owns after this too: sweep.jobs)."""
    state = getattr(sweep, "state", None)
    if state is not None:
        prestart.drop(state)
        reuse.drop(state)


# --------------------------------------------------------------------------- one measured run
def balanced_batches(p: TrainParams, ds: Dataset) -> bool:
    """Class-balanced batches on a generated set only: its classes are equal by construction, so an epoch
    still has records // batch_size steps; a preprocessed set's class counts are not known before reading."""
    return p.class_balanced_batches and ds.source == "generated"


def _base_row(run, spec: RunSpec, ds: Dataset, setting: MemorySetting, steps_per_epoch: int, cpus: int) -> dict:
    p: TrainParams = run.p
    t = run.target
    return {"run_id": run.run_id, "sweep": spec.sweep, "target": t.name,
            "profile": t.profile_name or "", "repeat": run.repeat, "started_at": run.started_at,
            "models": spec.models,
            "memory_setting": setting.text, "dataset_source": ds.source, "dataset_records": ds.records,
            "dataset_bytes": ds.bytes, "input_size": p.input_size, "batch_size": p.batch_size,
            "batches": "class-balanced" if balanced_batches(p, ds) else "as read",
            "epochs": p.epochs, "num_classes": p.num_classes, "steps_per_epoch": steps_per_epoch,
            "cpus_per_job": cpus, "ingest_target_mb_per_s": spec.ingest_mb_per_s,
            "checkpoint_every_steps": spec.checkpoint_every_steps,
            "checkpoint_interval_s": 0.0 if spec.checkpoint_every_steps else p.checkpoint_default_interval_s}


def _per_run(run, spec: RunSpec, index: int, ds: Dataset) -> dict:
    """What a job's spec takes from its run (all kept jobs change when a later run re-arms them)."""
    p: TrainParams = run.p
    ckdir = folder_below(run.target.study_dir(STUDY.name), "checkpoints", f"{run.run_id}-j{index}", create=False)
    remove_tree(ckdir, ckdir.parent, ignore_errors=True)
    return {"files": ds.files, "seed": p.seed + 1000 * run.repeat, "checkpoint_dir": str(ckdir),
            "checkpoint_every_steps": spec.checkpoint_every_steps,
            "checkpoint_interval_s": p.checkpoint_default_interval_s}


def _make_jobs(run, spec: RunSpec, ds: Dataset, setting: MemorySetting, io, splits, jobs: list[Job]) -> None:
    """One Job per model (appended to `jobs` as made, so a failure half-way still cleans up), each the engine's
    (sweep.jobs) with its own cgroup: memory (a size limit from its start, else all RAM, for its peak and OOM
    counters) and io counted on the target's device but not throttled yet: the profile goes on at go
    (_throttle), so the job's start-up (TensorFlow's ~400 MB of libraries, re-read whenever anything dropped
    them) is not read at the emulated device's speed (measured: 85-91 s start-up on hdd-emulated vs 26-30 s
    on local). An unthrottled target's job counts io too, so a later run may throttle it (reuse.py). Without
    cgroups an unlimited job runs without memory statistics; a limited one cannot (CgroupUnavailable)."""
    p: TrainParams = run.p
    counting = io or targets_mod.io_limits(run.target, accounting=True)
    for i, cpus in enumerate(splits):
        jobs.append(new_job(i, {"job": i, "input_size": p.input_size, "batch_size": p.batch_size,
                                "num_classes": p.num_classes, "epochs": p.epochs,
                                "steps_per_epoch": ds.records // p.batch_size,
                                "balanced_batches": balanced_batches(p, ds),
                                "learning_rate": p.learning_rate, "shuffle_buffer": p.shuffle_buffer,
                                "read_parallelism": p.read_parallelism, "warmup_steps": p.warmup_steps,
                                "threads": len(cpus), "cpus": cpus, **_per_run(run, spec, i, ds)},
                            f"{run.run_id}-j{i}", run.sweep.out_dir, run.sweep.jobs,
                            memory_limit_bytes=int(setting.value) if setting.kind == "bytes" else None,
                            io_device=counting.device if counting is not None else None,
                            need_cgroup=setting.limited, run_id=run.run_id))


def _start_jobs(run, spec: RunSpec, ds: Dataset, setting: MemorySetting, io, jobs: list[Job]) -> None:
    """This run's jobs: started early by the run before (prestart.py), or now, with the next run's."""
    state = run.sweep.state
    paired = isinstance(state, TrainState)
    kept = reuse.take(state, run, spec, [_per_run(run, spec, i, ds) for i in range(spec.models)], poll=_poll) \
        if paired and reuse.available(state, spec, io) else None
    if kept is not None:
        jobs.extend(kept)
        return
    early = prestart.take(state, run.run_id) if paired else None
    if early is not None:
        jobs.extend(early)
        return
    _make_jobs(run, spec, ds, setting, io, cpu_split(spec.models), jobs)
    for j in jobs:
        j.start()
    if paired:
        prestart.start_next(run, spec, _make_jobs, cpu_split)


def _ingest_writer(run, spec: RunSpec, ds: Dataset, io) -> IngestWriter:
    """Built (and its payload read) before the cache is made cold; throttled like the target."""
    group = None
    if io is not None:
        try:
            group = run.cgroup("ingest", io=io)
        except cgroups.CgroupUnavailable:
            group = None
    writer = IngestWriter(folder_below(run.target.study_dir(STUDY.name), "ingest", run.run_id, create=False), ds.files, spec.ingest_mb_per_s,
                          group.procs_files if group else [])
    writer.group = group
    return writer


def _arm(jobs: list[Job], setting: MemorySetting, ds: Dataset) -> None:
    """Just before go: each job's need, its anon baseline, a ratio's page-cache share, a fresh peak."""
    share = max(1, int(ds.bytes * setting.value)) if setting.kind == "ratio" else 0
    # From go on, the cap reads the dataset's cached pages (page_cache_mean_bytes) and, in a ratio run,
    # holds them at the jobs' shares (one page cache).
    cap = DatasetCacheCap(ds.files, share * len(jobs) if share else None, ds.bytes)
    for j in jobs:
        j.need_bytes = memory_need(j.group) or j.ready.get("rss_peak_bytes")
        if j.group is not None:
            j.anon_ready = j.anon_max = anon_bytes(j.group)
        j.cache_share_bytes, j.cache_cap = share, cap
        reset_peak(j.group)
    cap.poll([j.proc.pid for j in jobs if j.proc is not None])


def _throttle(run, jobs: list[Job], io) -> bool:
    """Just before go: the target's emulated profile on every job through the engine (run.limit_job, lifted when
    the run closes); True where applied."""
    if io is None:
        return False
    applied = False
    for j in jobs:
        try:
            applied = run.limit_job(j.worker, io) or applied
        except cgroups.CgroupUnavailable as exc:
            run.unthrottled(exc)
            return False
    return applied           # run.limit_job set run.emulated where it applied the profile


def _no_rows() -> dict:
    """A failed run adds no job or epoch rows (jobs.csv and epochs.csv are still rewritten, as before)."""
    return {"jobs.csv": [], "epochs.csv": []}


def _sum_stats(jobs: list[Job]) -> dict:
    """Memory counters of a failed run's jobs (NaN where no job had a cgroup to count them)."""
    stats = [j.stats or safe_stats(j.group) for j in jobs]
    counted = any(j.group is not None for j in jobs)
    return {"memory_peak_bytes": max((s.get("memory_peak_bytes", 0) for s in stats), default=0) or np.nan,
            "memory_failcnt": sum(s.get("memory_failcnt", 0) for s in stats) if counted else np.nan,
            "oom_kills": sum(s.get("oom_kills", 0) for s in stats) if counted else np.nan}


def _failed(base: dict, jobs: list[Job], reason: str, emulated: bool) -> Measurement:
    first = next((j for j in jobs if j.limit_bytes), None)
    return Measurement({**base, "emulated": emulated,
                        "memory_limit_bytes": first.limit_bytes if first else np.nan,
                        "memory_need_bytes": max((j.need_bytes or 0 for j in jobs), default=0) or np.nan,
                        **_sum_stats(jobs)}, ok=False, failure_reason=reason, tables=_no_rows())


def _clean_up(target, jobs: list[Job], writer: IngestWriter | None) -> None:
    """Every job killed, its cgroup removed (the engine's end would remove them too), scratch files gone."""
    for j in jobs:
        j.end()
    if writer is not None:
        writer.kill()                       # before its cgroup goes (a no-op once stopped)
        if writer.group is not None:
            writer.group.remove()
    for folder in ("checkpoints", "ingest"):
        remove_tree(target.study_dir(STUDY.name) / folder, target.study_dir(STUDY.name), ignore_errors=True)


def _refusal(base: dict, setting: MemorySetting, need_hint: int, margin_mib: int, io) -> Measurement:
    """A size limit below the need an earlier run measured: not run, the row says what to use."""
    minimum = need_hint + margin_mib * MIB
    return Measurement({**base, "emulated": io is not None}, ok=False,
                       failure_reason=f"not run: memory limit {setting.text} ({setting.value / MIB:,.0f} MiB) is "
                       f"below what TensorFlow needs for this model on this target ({need_hint / MIB:,.0f} MiB "
                       f"measured in an earlier run); use at least {minimum / MIB:,.0f} MiB",
                       tables=_no_rows())


def execute_run(run, spec: RunSpec, ds: Dataset, need_hint: int | None = None) -> Measurement:
    """Run one measured configuration: run row, jobs.csv and epochs.csv rows, the memory series.

    A job failure (OOM, crash, stall) is a row with status=failed and its reason; an
    interrupt (SIGINT/SIGTERM) propagates after every job is killed and every cgroup removed.
    """
    p: TrainParams = run.p
    setting = parse_memory(spec.memory)
    io = targets_mod.io_limits(run.target)
    splits = cpu_split(spec.models)
    base = _base_row(run, spec, ds, setting, ds.records // p.batch_size, len(splits[0]))
    if setting.kind == "bytes" and need_hint and setting.value < need_hint:
        return _refusal(base, setting, need_hint, p.memory_margin_mib, io)
    out_dir = run.sweep.out_dir
    (out_dir / "jobs").mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    jobs: list[Job] = []
    kept: list[Job] = []
    writer: IngestWriter | None = None
    try:
        _start_jobs(run, spec, ds, setting, io, jobs)
        emulated = io is not None and any(j.group is not None for j in jobs)
        _poll(jobs, "ready", p.stall_timeout_s, p.stall_timeout_s * 2)
        prestart.wait_ready(run, p.stall_timeout_s)
        writer = _ingest_writer(run, spec, ds, io) if spec.ingest_mb_per_s else None
        # the dataset's pages only: drop_caches would also evict TensorFlow's not-yet-mapped code pages,
        # whose re-reads would then be charged to the training run
        run.evict(ds.files, "dataset files")
        _arm(jobs, setting, ds)
        emulated = _throttle(run, jobs, io)
        drops0 = foreign_cache_drops()
        run.start_clock()
        t0, t_go = time.perf_counter(), time.monotonic()
        if writer:
            writer.start()
        for j in jobs:
            j.go()
        _poll(jobs, "done", p.stall_timeout_s, max(3600.0, p.stall_timeout_s * 10) * p.epochs)
        elapsed = time.perf_counter() - t0
        run.stop_clock()
        base["foreign_cache_drops"] = foreign_cache_drops() - drops0
        ingest = writer.stop() if writer else {}
        for j in jobs:
            j.stats = final_stats(j.group)
        if reuse.keep(run.sweep.state, run, spec, jobs):
            kept = list(jobs)               # not cleaned up with this run: a later run takes it
        else:
            for j in jobs:
                j.worker.finish(timeout_s=60)   # no "again": the job ends
    except JobFailed as exc:
        run.stop_clock()
        if writer:
            writer.stop()
        for j in jobs:
            j.kill()
        run.log(f"[{run.run_id}] failed: {exc}")
        return _failed(base, jobs, str(exc), emulated)
    except BaseException:     # an interrupt: the next run's early jobs and kept jobs end with this run's
        prestart.drop(run.sweep.state)
        reuse.drop(run.sweep.state)
        raise
    finally:
        _clean_up(run.target, [j for j in jobs if j not in kept], writer)
    # The job's own memory vs its page cache over time (the brief's memory figure).
    trace = [{"t_s": round(m["t"] - t_go, 3), **{k: v for k, v in m.items() if k != "t"}}
             for j in jobs for m in j.memory_trace]
    summary, series = run.monitor.summary(), run.monitor.timeseries()
    row, job_rows, epoch_rows = _rows(base, jobs, elapsed, summary, series, ingest, emulated, ds)
    return Measurement(row, tables={"jobs.csv": job_rows, "epochs.csv": epoch_rows}, series={"-memory": trace})


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = skip = None
