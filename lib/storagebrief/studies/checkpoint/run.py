"""The checkpoint sweep on the shared engine (core.sweep): per model, MLPerf Storage v3.0's protocol.

One measured run = one model on one target at one repeat: `saves` checkpoint writes, then
`restores` reads, a pause of `pause_s` before each (off every clock), caches dropped before every
read. The writing ranks (ranks.py) live for the run inside its cgroup (the target's throttle). Each
save writes global_epoch1_step<k>/ with every rank's files (core.checkpoint_workloads at `scale`),
then its manifest; with more than `retain` complete checkpoints the oldest is deleted (timed
apart, off the save's clock). Restore j reads the j-th retained checkpoint (cycling), rank r
reading the files rank (r + rank_shift) mod n wrote. run.start_clock()/stop_clock() bracket the
whole protocol (monitor, block trace); every operation has its own clock from its barrier.

MLPerf's figure (rank 0's own duration, mean of per-checkpoint rates) and the honest one (until
the last rank's fsync returned, from the barrier) both come from the same operations: metrics.py.

The "cost" sweep (cost.py: what a checkpoint costs training, sync vs async) is a second kind of
Config (`sweep="cost"`, with `mode` none|sync|async and `interval_steps`), planned after the protocol
runs from `checkpoint.cost`; run_one dispatches on Config.sweep. finish() turns both into the
intervals table (metrics.intervals) in study.json. The "framework" sweep (framework.py: TensorFlow's
own CheckpointManager on a BERT-shaped model, `mode` = its scenario) comes last, from
`checkpoint.framework`; its TensorFlow job is the engine's (sweep.jobs), which stops it however the sweep ends.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

from ...core import results
from ...core.config import ParamsError
from ...core.checkpoint_workloads import GIB, files_of_rank, size_table
from ...core.folders import folder_below
from ...core.memory_state import NONE as NO_PREP, SETTLE_S, prefault, reporting_passes
from ...core.sweep import Measurement, Point
from ...kit import client_check, mlpstorage_verdict
from ...kit.launch import check_launch
from ...kit.checkpoint import incompressible, incompressible_into
from ...kit.client_check import unchecked
from ...kit.space import check_space, out_of_space
from . import STUDY, cost, dataset, framework, metrics, mlperf_tree
from . import objects
from .params import CheckpointParams
from .rank_io import direct_refusal
from .ranks import RankPool, check_budget

# Test hook, None in use: {"slow_rank": 1, "delay_s": 0.5} makes rank 1 sleep that long after every
# barrier (a late rank: tests/studies/checkpoint/test_checkpoint.py sets it with monkeypatch).
FAULT: dict | None = None
GENERATOR_PROBE_BYTES = 64 << 20
LATENCY_TABLE = "latency.csv"
LATENCY_TABLE_COLUMNS = ["run_id", "target", "model", "repeat", "op", "call", "bin_low_us", "bin_high_us", "count"]


@dataclass(frozen=True)
class Config:
    """One point: which sweep ("protocol" or "cost"), the model; a cost run's mode and interval."""
    sweep: str
    model: str
    mode: str = ""               # cost: none | sync | async; framework: its scenario
    interval_steps: int = 0      # cost: checkpoint every this many steps (0: none)
    client_check: str = ""       # protocol: client_check.CHECK for the client check's confined re-run


@dataclass
class CheckpointState:
    """What prepare() measured (sweep.state)."""
    generator_gb_per_s: float = 0.0
    removed: list[str] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)   # (target, repeat) -> the cost sweep's mode-none CostResult
    directories: set = field(default_factory=set)   # the directory targets: the only ones the cost, framework and
                                                    # client-check sweeps measure (S3 targets run the protocol alone)


def _generator_gb_per_s(tries: int = 10) -> float:
    """The byte generator's own rate on one core of this host (GB, 10^9, per CPU second of the thread that runs
    it: other work on the machine takes wall time from it, not work): the best of `tries` refills of one buffer,
    touched once before (kit.checkpoint.incompressible_into), as a saver that generated its bytes inline would
    refill its own; fresh memory's page faults are the VM's memory, not the generator's. By wall time, beside
    other work (load average 10-13 on the 2 cores), the same refills gave 1.35-2.95 GB/s (issue 59)."""
    buf = incompressible(GENERATOR_PROBE_BYTES)
    best = 0.0
    for _ in range(tries):
        t = time.thread_time()
        incompressible_into(buf)
        best = max(best, len(buf) / max(time.thread_time() - t, 1e-6) / 1e9)
    return best


def prepare(sweep) -> None:
    """Space for retain + 1 checkpoints of the largest model on every target (the new one is written
    before the oldest goes); the generator's rate; folders of saves cut short removed."""
    p: CheckpointParams = sweep.p
    # the study's one "directory or S3?": which targets its directory-only sweeps take part on, asked once
    sweep.state = state = CheckpointState(directories={t.name for t in sweep.targets if t.s3 is None})
    dirs = [t for t in sweep.targets if t.name in state.directories]
    cost.check_memory(p)
    check_budget(p, s3=len(dirs) < len(sweep.targets), directories=bool(dirs))   # the machine's limits (validate too)
    # mpirun and mpi4py there, and mpirun starts the most ranks a model needs: before any checkpoint
    check_launch(p, max(len(p.writers(m)) for m in p.models), sweep.out_dir, STUDY.name,
                       "the models' rank counts", sweep.status)
    biggest = max(p.checkpoint_bytes(m) for m in p.models)
    c = p.cost
    cost_need = (c.steps // min(c.intervals_steps)) * p.cost_bytes if c.on and c.checkpointing_modes else 0
    local = [t for t in sweep.targets if t.on_this_machine]
    check_space(local, lambda t: (p.retain + 1) * biggest + (cost_need if t in dirs else 0),
                f"{p.retain + 1} checkpoints (checkpoint.retain + the one being written) of "
                f"{biggest / GIB:.2f} GiB at checkpoint.scale = {p.scale:g}"
                + (f", and the cost sweep's {cost_need / GIB:.2f} GiB (checkpoint.cost)" if cost_need else ""))
    for t in dirs:
        for m in p.models:
            for gone in dataset.remove_incomplete(dataset.model_dir(t, STUDY.name, m), t, STUDY.name):
                state.removed.append(str(gone))
                sweep.note(f"removed {gone}: a checkpoint without its manifest (a save cut short)")
    state.generator_gb_per_s = _generator_gb_per_s()
    objects.open_stores(sweep)
    if p.save_io == "direct":          # directory targets write files; S3 targets upload parts either way
        check_direct([(t.name, t.path) for t in dirs])


def check_direct(targets: list[tuple[str, object]]) -> None:
    """checkpoint.save_io: direct on (name, folder) targets: refused in one line where O_DIRECT writes fail."""
    for name, path in targets:
        why = direct_refusal(path)
        if why:
            raise ParamsError(f"checkpoint.save_io = direct: target '{name}' ({path}) refuses O_DIRECT writes "
                              f"({why}); use save_io: buffered, or another target")


def plan(sweep) -> list[Point]:
    p: CheckpointParams = sweep.p
    runs = {m: max(p.repeats, p.protocol_runs) if m == p.headline_model else p.repeats for m in p.models}
    protocol = [Point(Config("protocol", m), r, f"{m}: {p.saves} saves, {p.restores} restores")
                for r in range(1, max(runs.values()) + 1) for m in p.models if r <= runs[m]]   # page 1's: protocol_runs
    frameworks = framework.points(p, p.repeats, Config, sweep.note) if p.framework.on else []
    return protocol + _check_points(sweep, p) + cost.points(p, p.repeats, Config) + frameworks


def _check_points(sweep, p: CheckpointParams) -> list[Point]:
    """The client check (checkpoint.client_check): the headline model's protocol once more per directory target,
    the ranks on half the CPUs, right after the protocol runs. S3 targets are left out: their gateway shares
    the CPUs with the ranks, so confining the ranks alone would not answer whether the client limits."""
    cpus = client_check.check_cpus(sweep.note, p.launcher) if p.client_check else []
    if not cpus:
        return []
    s3 = [t.name for t in sweep.targets if t.name not in sweep.state.directories]
    if s3:
        sweep.note(f"client check: not on S3 target(s) {', '.join(s3)} (the local gateway shares the CPUs with the "
                   "ranks; confining the ranks alone does not say whether the client limits)")
    m, of = p.headline_model, len(os.sched_getaffinity(0))
    return [Point(Config("protocol", m, client_check=client_check.CHECK), r,
                  f"{m}: client check, the ranks on {len(cpus)} of {of} CPUs", targets=(t.name,))
            for t in sweep.targets if t.name in sweep.state.directories for r in range(1, p.client_check_repeats + 1)]


def skip(sweep, point: Point, target) -> bool:
    """The cost and framework sweeps measure directories only: an S3 target runs the protocol alone."""
    return objects.skip(sweep, point.config.sweep, target)


def run_id(config: Config, target, repeat: int) -> str:
    what = config.model + ("-halfcpus" if config.client_check else "") if config.sweep == "protocol" else \
        f"{config.mode}" + (f"-every{config.interval_steps}" if config.interval_steps else "")
    return f"{STUDY.name}-{config.sweep}-{what}-{target.name}-r{repeat}"


def _files(p: CheckpointParams, model: str) -> dict[int, list]:
    w = p.workload(model)
    return {r: files_of_rank(w, r, p.scale) for r in p.writers(model)}


def _saves(run, pool, p: CheckpointParams, model: str, root, files) -> tuple[list, list, list, list]:
    """`saves` checkpoints; returns (ops, retained folders, deletion seconds, memory preparations: (Prepared,
    reporting passes from its end to the save's end or None))."""
    ops, kept, deletes, preps = [], [], [], []
    plain = {r: (r, [(f.name, f.bytes) for f in fs]) for r, fs in files.items()}
    nbytes = sum(f.bytes for fs in files.values() for f in fs)
    for i in range(p.saves):
        step = i + 1
        where = dataset.folder(root, step)
        where.mkdir()
        dataset.fsync_dir(root)
        pool.pause(p.pause_s)      # MLPerf's pause before every operation: off every clock
        # like memory for every save (core.memory_state): pages the host still backs, not whatever the last
        # deletion or cache drop left; O_DIRECT saves bypass the page cache
        memory = prefault(where, nbytes) if p.save_io == "buffered" else NO_PREP
        passes = reporting_passes()
        release, got = pool.operate("save", where, plain, p.write_block)
        after = reporting_passes()
        preps.append((memory, None if None in (passes, after) else after - passes))
        dataset.write_manifest(where, model, step, p.scale, [f for fs in files.values() for f in fs])
        ops.append(("save", i, step, release, got))
        kept.append(where)
        while len(kept) > p.retain:
            t = time.perf_counter()
            dataset.remove(kept.pop(0), run.target, STUDY.name)
            dataset.fsync_dir(root)
            deletes.append(time.perf_counter() - t)
    return ops, kept, deletes, preps


def memory_columns(p: CheckpointParams, preps: list, launcher: str) -> dict:
    """The row's record of the saves' memory state and how they wrote (metrics.COLUMNS: save_io, memory_prep...)."""
    done = [m for m, _ in preps if m.method != "none"]
    passes = [n for _, n in preps]
    if p.save_io == "direct":
        what = "none: O_DIRECT saves (checkpoint.save_io: direct) bypass the page cache"
    elif done:
        held = max(m.waited_s for m in done) > 0
        what = (f"scratch file of {max(m.bytes for m in done) / 1e6:,.0f} MB written in the save's folder and "
                "deleted right before each save" + (", held until a free-page reporting pass (at most "
                                                    f"{SETTLE_S:g} s)" if held else "")
                + ("; on the launching host only (ranks on other hosts: none)" if launcher == "mpi" else ""))
    else:
        what = "none"
    return {"save_io": p.save_io, "memory_prep": what,
            "memory_prep_s_mean": sum(m.seconds for m in done) / len(done) if done else 0.0,
            "save_reporting_passes": None if not passes or None in passes else sum(passes)}


def _restores(run, pool, p: CheckpointParams, kept, files) -> list:
    ranks = sorted(files)
    shifted = {r: ranks[(i + p.rank_shift) % len(ranks)] for i, r in enumerate(ranks)}
    plan_ = {r: (shifted[r], [(f.name, f.bytes) for f in files[shifted[r]]]) for r in ranks}
    ops = []
    for j in range(p.restores):
        where = kept[j % len(kept)]
        if not dataset.complete(where):
            raise RuntimeError(f"{where}: not a complete checkpoint (manifest or files missing)")
        pool.pause(p.pause_s)
        run.cold_cache([where])
        release, got = pool.operate("load", where, plan_, p.read_block, p.readers_per_rank)
        ops.append(("load", j, int(where.name.rsplit("step", 1)[1]), release, got))
    return ops


def run_one(run, config: Config) -> Measurement:
    if config.sweep == "framework":
        return framework.measure(run, config)
    try:
        if config.sweep == "cost":
            row, records = cost.measure(run, run.p, config, run.sweep.state.baselines)
            keys = {"run_id": run.run_id, "target": run.target.name, "repeat": run.repeat}
            return Measurement(row, tables={cost.TABLE: [{**keys, **r} for r in records]})
        if run.target.name not in run.sweep.state.directories:
            return objects.protocol(run, config, _files(run.p, config.model), _measurement, FAULT)
        return _protocol(run, config)
    except (OSError, RuntimeError) as exc:
        full = out_of_space(exc)
        if full is None:
            raise
        return _target_full(run, config, full)


def _target_full(run, config: Config, why: str) -> Measurement:
    """A filesystem that filled up mid-write: a failed row with the reason, and every file this run
    wrote removed (the next run, and the user, find the target as it was)."""
    p: CheckpointParams = run.p
    run.stop_clock()
    if config.sweep == "cost":
        _remove_quietly(cost.folder(run.target), run.target)
        row = {"sweep": "cost", "model": config.model, "save_mode": config.mode, "scale": p.scale,
               "checkpoint_bytes": p.cost_bytes, "files": p.cost.files,
               "interval_steps": config.interval_steps or None, "steps": p.cost.steps}
    else:
        _remove_quietly(dataset.model_dir(run.target, STUDY.name, config.model), run.target)
        row = metrics.run_row(p, config.model, [], [], run.sweep.state.generator_gb_per_s,
                              SimpleNamespace(launcher=p.launcher, clock=""))
    run.sweep.note(f"target '{run.target.name}' filled up during {run.run_id}: {why}")
    t = run.target
    return Measurement(row, ok=False, failure_reason=f"target full mid-write: {why}; target '{t.name}' ({t.path}); "
                                                     "this run's checkpoints were removed")


def _remove_quietly(path, target) -> None:
    """A full target's files go (through the outdir delete guard); an error removing them must not hide
    the full disk."""
    try:
        dataset.remove(path, target, STUDY.name)
    except OSError:
        pass


def _protocol(run, config: Config) -> Measurement:
    p: CheckpointParams = run.p
    model = config.model
    files = _files(p, model)
    root = dataset.model_dir(run.target, STUDY.name, model)
    dataset.clear(root, run.target, STUDY.name)
    store = objects.target_store(run.sweep, run.target)
    group = store.client_group(run)         # the target's throttle, or a cgroup that only counts
    buf = min(p.write_block, max(f.bytes for fs in files.values() for f in fs))
    procs_files = group.procs_files if group else None
    conf = client_check.confine_run(run, group) if config.client_check else None
    try:
        pool = RankPool(sorted(files), buf, (procs_files or []) + (conf.procs_files if conf else []), FAULT,
                        affinity=conf.affinity if conf else None, params=p,
                        work_dir=folder_below(run.target.study_dir(STUDY.name), "mpi", create=False),
                        direct=p.save_io == "direct", store=asdict(store.handle()))
        with pool:
            run.start_clock()
            saved, kept, deletes, preps = _saves(run, pool, p, model, root, files)
            loaded = _restores(run, pool, p, kept, files)
            run.stop_clock()
    finally:
        if conf:
            conf.remove()
    ops = saved + loaded
    _note_outside_cgroup(run, pool, procs_files)
    if pool.launcher == "mpi":
        for host in sorted(pool.hosts):
            run.sweep.add_host(host, "checkpoint: MPI ranks", pool.host_facts.get(host))
    return _measurement(run, model, ops, deletes, pool, {"access": "files", "save_ends_at": "fsync returned",
                                                         **memory_columns(p, preps, pool.launcher),
                                                         **client_check.row_columns(config.client_check, conf)})


def _measurement(run, model: str, ops, deletes, pool, extra: dict) -> Measurement:
    """The protocol run's row (metrics.run_row with `extra`: access, client / gateway CPU, limited_by) and its
    checkpoints.csv, ranks.csv and latency.csv rows."""
    p: CheckpointParams = run.p
    keys = {"run_id": run.run_id, "target": run.target.name, "model": model, "repeat": run.repeat}
    if extra.get("client_check"):          # a client-check re-run: its side-table rows say so too (left out of figures)
        keys["client_check"] = extra["client_check"]
    busy = run.monitor.summary().get("cpu_busy_percent") if run.monitored else None
    row = {**metrics.run_row(p, model, ops, deletes, run.sweep.state.generator_gb_per_s, pool),
           **metrics.cpu_columns(ops, extra.pop("gateway_cpu", {}), busy,
                                 p.readers_per_rank if extra.get("access", "files") != "files" else None), **extra}
    hists = metrics.latency_histograms(ops)
    return Measurement(row, tables={"checkpoints.csv": [{**keys, **r} for r in metrics.op_rows(ops)],
                                    "ranks.csv": [{**keys, **r} for r in metrics.rank_rows(ops)],
                                    LATENCY_TABLE: [{**keys, **r} for r in metrics.latency_rows(hists)]})


def _note_outside_cgroup(run, pool, procs_files) -> None:
    outside = sorted(h for h in pool.hosts if h != pool.launch_host)
    if outside and procs_files:
        run.sweep.note(f"checkpoint ranks on {', '.join(outside)} ran outside the run's cgroup (a cgroup lives "
                       "on one host): no throttle there; their times are per rank from the MPI barrier")


def finish(sweep, frame) -> None:
    """MLPerf's results tree (mlperf_tree.py) and its verdicts, study.json, and the generator's note."""
    import pandas as pd

    p: CheckpointParams = sweep.p
    state: CheckpointState = sweep.state
    all_ckpts = pd.DataFrame(sweep.tables.get("checkpoints.csv", []))
    ckpts = unchecked(all_ckpts)
    for name, cols in ((cost.TABLE, cost.TABLE_COLUMNS), (LATENCY_TABLE, LATENCY_TABLE_COLUMNS)):
        if not sweep.tables.get(name):              # the stage's outputs exist even with a sweep off
            results.write_csv(sweep.out_dir / name, pd.DataFrame(columns=cols))
    (sweep.out_dir / "logs").mkdir(exist_ok=True)    # the framework sweep's TensorFlow log (a stage output)
    mlperf_tree.export(sweep.out_dir, frame, ckpts, p.pause_s)
    mlpstorage_verdict.record(sweep.out_dir)
    for t in sweep.target_names:
        rate = metrics.best_write_gb_per_s(ckpts, t)
        if rate and state.generator_gb_per_s < 3 * rate:
            sweep.note(f"target '{t}': the generator fills buffers at {state.generator_gb_per_s:.2f} GB/s, below 3× "
                       f"the target's write rate ({rate:.2f} GB/s); the buffers are filled before the clock, "
                       "but a writer that generated its bytes inline would be held back by the generator")
    results.write_json(sweep.out_dir / "study.json", {
        "models": p.models, "scale": p.scale, "mode": p.mode, "saves": p.saves, "restores": p.restores,
        "pause_s": p.pause_s, "rank_shift": p.rank_shift, "retain": p.retain,
        "write_block_mib": p.write_block_mib, "read_block_mib": p.read_block_mib,
        "readers_per_rank": p.readers_per_rank, "repeats": p.repeats, "launcher": p.launcher,
        "shapes": p.shapes,
        "writers": {m: len(p.writers(m)) for m in p.models},
        "checkpoint_bytes": {m: p.checkpoint_bytes(m) for m in p.models},
        "generator_gb_per_s": state.generator_gb_per_s, "removed_incomplete": state.removed,
        "framework": p.framework.model_dump(),
        "cost": p.cost.model_dump(), "cost_checkpoint_bytes": p.cost_bytes if p.cost.on else None,
        "intervals": metrics.intervals(frame, sweep.target_names, p.cost.overhead_limit_percent),
        "client_check": p.client_check, "client_checks": metrics.client_checks(frame, all_ckpts),
        **objects.targets_doc(sweep, state),
        "size_table": [{"model": r.model, "parameters": r.parameters, "model_gib": r.model_gib,
                        "optimizer_gib": r.optimizer_gib, "computed_gib": r.computed_gib,
                        "published_gib": r.published_gib} for r in size_table()]})


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = close = None     # the stores are the engine's (core/stores.py)
