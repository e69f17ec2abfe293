"""The emulate sweep on the shared engine (core.sweep): accelerator counts per workload, on every target.

Reproduces "Accelerating Machine Learning Performance / Decreasing Training Times with
KIOXIA CM7 Series SSDs" (2024), which ran DLIO's unet3d workload with 8..18 emulated
V100s, and MLPerf Storage's rule: a storage system supports the largest number of
accelerators whose utilization (AU) stays at or above a threshold (90 % unet3d/resnet50,
70 % cosmoflow, 85 % retinanet). An emulated accelerator is one process with its own loader
(loader.py, accelerators.py): forked on this host (`launcher: fork`, the default) or an MPI
rank on the hosts mpirun is given (`launcher: mpi`, kit.ranks); AU arithmetic is in metrics.py,
what limited a run in limits.py.

Per workload, accelerator counts x repeats in run order, targets interleaved. Each run:
cold cache, one cgroup holding the target's throttle and/or the page-cache cap, N
accelerators, one row, per-accelerator rows (accelerators.csv) and a read-latency
histogram (latency_histograms.csv) beside it.

Page cache: a small dataset read for several epochs would come from memory.
Two ways to keep reads on the device (recorded per run, `dataset_sizing`):
  mlperf      the dataset is at least 5 × the host's memory (MLPerf Storage rule);
  memory_cap  the accelerators run in a child cgroup whose memory limit caps
              their page cache (cgroup v1 and v2 charge page cache to the
              cgroup); the dataset must be at least 5 × that cap, so at most
              ~20 % of reads can hit the cache. Loader buffers are allocated
              before the processes join, so the cap is almost all page cache.
              Without a memory cgroup the loader evicts each file after reading
              it (fadvise DONTNEED) instead, and the run says so.
`odirect: true` bypasses the page cache altogether (aligned reads).
"""
from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...core import cgroups, results, targets as targets_mod
from ...core.config import ParamsError
from ...core.folders import folder_below
from ...core.outdir import remove_tree
from ...core.sweep import Measurement, Point
from ...kit.cgroup_io import CgroupIoSampler, cgroup_read_stats
from ...kit.launch import check_launch
from ...kit.client_check import CoreBusy
from ...kit import mlpstorage_verdict
from ...kit.space import check_space, existing_bytes
from . import STUDY, mlperf, objects
from .accelerators import run_once
from .dataset import files_for, first_files, generate_dataset, planned_files, study_description
from .idle import idle_read_latency_us
from .limits import limited_by
from .loader import steps_per_epoch
from .metrics import (host_roles, latency_histogram, mlperf_results, per_host, summarize, throttle_au_bound,
                      throttle_cap_mb_per_s)
from .params import EmulateParams, on_s3
from .window import cache_served, checks as au_checks
from .plan import ClientCheckPlan, EmulateConfig, SearchPlan, check_columns, confine_client, fixed_plan, measured

# Test hook, None in use: keys merged into every run's accelerator config, e.g.
# {"fail_rank": 1, "fail_at_step": 3} makes accelerator 1 exit at step 3
# (tests/studies/emulate/test_emulate.py sets it with monkeypatch to check failure handling).
FAULT: dict | None = None


@dataclass
class EmulateState:
    """What prepare() leaves for the runs (sweep.state)."""
    datasets: dict[tuple[str, str], dict]           # (target, workload) -> generate_dataset's description
    memory_limit: int | None                        # the page-cache cap (bytes), None: no cap
    stopped: set[tuple[str, str]] = field(default_factory=set)   # (workload, target) below threshold
    search: SearchPlan | None = None                              # accelerators: auto
    last_n: dict[str, int] = field(default_factory=dict)         # workload -> the accelerator count last planned
    idle_latency_us: dict[str, float | None] = field(default_factory=dict)   # target -> idle device read latency
    dead: dict[str, str] = field(default_factory=dict)   # S3 target -> why its store failed mid-sweep


# --------------------------------------------------------------------------- prepare
def _dataset_sizes(p: EmulateParams, targets) -> dict[tuple[str, str], int]:
    """Files per (target, workload): enough for the most accelerators a run there may have (dataset.files_for);
    refuses a workload that has no full step at the largest accelerator count."""
    sizes: dict[tuple[str, str], int] = {}
    for name in p.workloads:
        spec = p.spec(name)
        base = planned_files(p, spec)
        steps = steps_per_epoch(files_for(p, spec, name, p.max_accelerators, base), spec.samples_per_file,
                                p.max_accelerators, spec.batch_for(p.accelerator_type))
        if steps < 1:
            raise ParamsError(f"emulate: workload '{name}' with {base} files has no full step for "
                              f"{p.max_accelerators} accelerators")
        for t in targets:
            sizes[(t.name, name)] = files_for(p, spec, name, p.largest_n(name, t), base)
    return sizes


def _bytes_needed(p: EmulateParams, sizes: dict[tuple[str, str], int], t) -> int:
    """New bytes one target needs: every workload's dataset (less what is already there) and a checkpoint; a local
    S3 target holds the dataset twice while it is PUT (staging files and the gateway's objects)."""
    need = 0
    for name in p.workloads:
        spec = p.spec(name)
        existing = existing_bytes(folder_below(t.study_dir(STUDY.name), name, "data", create=False))
        need += max(0, int(sizes[(t.name, name)] * spec.samples_per_file * (spec.record_bytes + 64)) - existing)
    local_s3 = on_s3(t) and t.on_this_machine
    return need * (2 if local_s3 else 1) + int(p.checkpoint_mib * 2**20)


def prepare(sweep) -> None:
    """Everything that can be wrong is checked before any measured work; then the datasets, and study.json."""
    p: EmulateParams = sweep.p
    # hosts, hostfile, options: before any dataset
    check_launch(p, p.max_accelerators, sweep.out_dir, STUDY.name,
                       "the largest of emulate.accelerators (emulate.search_max with auto)", sweep.status)
    sizes = _dataset_sizes(p, sweep.targets)
    check_space(sweep.targets, lambda t: _bytes_needed(p, sizes, t), f"the emulate datasets ({', '.join(p.workloads)})")
    memory_limit = p.memory_limit_mib * 2**20 if p.dataset_sizing == "memory_cap" and not p.odirect else None
    sweep.state = state = EmulateState(datasets={}, memory_limit=memory_limit)
    for t in sweep.targets:
        for name in p.workloads:
            sweep.status(f"dataset of {name} on '{t.name}'")
            state.datasets[(t.name, name)] = _dataset(sweep, t, name, sizes[(t.name, name)])
        first = state.datasets[(t.name, p.workloads[0])]       # its files here (a gateway's too), or none
        files = [Path(first["backing"]) / Path(k).name for k in first["files"][:16]] if first["backing"] else []
        targets_mod.check_profile_speed(t, files) if files else None
    state.idle_latency_us = {t.name: idle_read_latency_us(t, t.study_dir(STUDY.name), p.read_block_kib * 1024)
                             for t in sweep.targets}
    datasets = state.datasets
    sweep.out_dir.mkdir(parents=True, exist_ok=True)
    results.write_json(sweep.out_dir / "study.json", {**study_description(p, datasets, sweep.targets),
                                                       "object_targets": {
                                                           t.name: d for t in sweep.targets
                                                           if (d := _store(sweep, t).describe())},
                                                       "s3_pairs": targets_mod.same_device_pairs(sweep.targets)})


def _store(sweep, t):
    """The target's store (the engine's: core/stores.py)."""
    p: EmulateParams = sweep.p
    return sweep.store(t, pool=p.max_accelerators * (p.read_threads or max(p.spec(w).read_threads for w in p.workloads)))


def _dataset(sweep, t, name: str, files: int) -> dict:
    """A workload's dataset on one target, made the store's data (core.store's fill: a directory's files in its
    study folder, in place; an S3 target's objects, PUT from a staging folder). "backing": its files here."""
    p: EmulateParams = sweep.p
    staging = folder_below(t.study_dir(STUDY.name), name, create=False) / "staging"
    return _store(sweep, t).fill(f"{name}/data", lambda folder: generate_dataset(
        folder, name, p.spec(name), files, p.seed, sweep.log), staging, sweep.log)


# --------------------------------------------------------------------------- plan
def plan(sweep) -> list[Point] | SearchPlan:
    """A fixed list: (workload, accelerators) x repeats in run order (targets interleave inside each).
    accelerators: auto: a search per workload and target (plan.py, search.py), kept in sweep.state."""
    p: EmulateParams = sweep.p
    if p.search:
        sweep.state.search = SearchPlan(p, sweep.targets, sweep.params.run.rerun_disturbed)
        inner = sweep.state.search
    else:
        inner = fixed_plan(p)
    return ClientCheckPlan(inner, sweep) if p.client_check and p.launcher == "fork" else inner


def run_id(config: EmulateConfig, target, repeat: int) -> str:
    check = f"-cpus{config.cpus_confined}" if config.cpus_confined else ""
    return f"{STUDY.name}-{config.workload}-{target.name}-n{config.accelerators}{check}-r{repeat}"


def skip(sweep, point, target) -> bool:
    """stop_below_threshold: a target whose mean AU at the previous accelerator count fell
    below the workload's threshold runs no larger counts of that workload."""
    p: EmulateParams = sweep.p
    if p.search or point.config.cpus_confined:   # a search stops by itself (search.py); the client check always runs
        return False
    name, n = point.config.workload, point.config.accelerators
    stopped, last_n = sweep.state.stopped, sweep.state.last_n
    if p.stop_below_threshold and point.repeat == 1 and n != last_n.get(name):   # first target of a new N
        frame = measured(sweep.frame())
        if not frame.empty and name in last_n:
            prev = frame[(frame.workload == name) & (frame.accelerators == last_n[name])]
            for tname, au in prev.groupby("target").au_percent.mean().items():
                if au < p.spec(name).au_threshold_percent:
                    stopped.add((name, tname))
        last_n[name] = n
    return (name, target.name) in stopped


# --------------------------------------------------------------------------- one run
def run_config(p: EmulateParams, name: str, data: dict, accelerators: int, evict: bool,
               checkpoint_dir: Path, capped: bool = False) -> dict:
    """What every accelerator process of one run needs (accelerators._accelerator)."""
    spec = p.spec(name)
    batch = spec.batch_for(p.accelerator_type)
    return {"files": data["files"], "spans": [[tuple(s) for s in f] for f in data["spans"]],
            "epochs": p.epochs, "seed": p.seed, "batch": batch,
            "steps_per_epoch": steps_per_epoch(len(data["files"]), spec.samples_per_file, accelerators, batch),
            "compute_s": spec.compute_s[p.accelerator_type], "read_threads": p.read_threads or spec.read_threads,
            "prefetch": p.prefetch, "block": p.read_block_kib * 1024, "odirect": p.odirect, "evict": evict,
            "readahead": p.readahead if p.readahead is not None else not capped,
            "checkpoint_every_steps": p.checkpoint_every_steps,
            "checkpoint_bytes": int(p.checkpoint_mib * 2**20), "checkpoint_dir": str(checkpoint_dir)}


@dataclass(frozen=True)
class RunCgroup:
    """The run's cgroup (or None) and what it holds: the target's throttle, the page-cache cap."""
    group: cgroups.Cgroup | None
    throttled: bool
    capped: bool


@dataclass(frozen=True)
class CgroupReads:
    """The run's own device reads (cgroup counters): the whole run (bytes, requests) and the AU window
    (bytes, requests, seconds); None where they could not be had."""
    run: tuple[int, int] | None
    window: tuple[int, int, float] | None


def _sizing(p: EmulateParams, capped: bool, memory_limit: int | None) -> str:
    """How the page cache was kept out of the measurement (the dataset_sizing column)."""
    return ("odirect (page cache bypassed)" if p.odirect else
            "memory_cap" if capped else
            "memory_cap->fadvise_evict (no memory cgroup)" if memory_limit else
            "fixed (page cache not controlled)" if p.dataset_sizing == "fixed" else "mlperf")


def _throttle_columns(run, n: int, demand: float, reads: CgroupReads, throttled: bool) -> dict:
    """What the throttle allows: its cap at the request size the run's cgroup saw in the AU window.

    The run's first reads after a cold cache include the files' metadata (small
    requests, before the AU window): the request size of the whole run would
    understate what the IOPS cap allows in the window AU measures.
    """
    cg, cgw = reads.run, reads.window
    req_run = cg[0] / cg[1] if cg and cg[1] else None
    req = cgw[0] / cgw[1] if cgw else req_run
    cap = throttle_cap_mb_per_s(run.target.profile if throttled else None, req)
    return {"cgroup_read_kib_per_request_au_window": req / 1024 if req else None,
            "cgroup_read_mb_per_s_au_window": cgw[0] / cgw[2] / 1e6 if cgw and cgw[2] > 0 else None,
            "throttle_cap_mb_per_s": cap,
            "throttle_au_bound_percent": throttle_au_bound(cap, n, demand)}


def _cgroup_columns(cg: tuple[int, int] | None, summary: dict) -> dict:
    """The run's own device reads over the whole run (cgroup counters), beside the loaders' reads."""
    return {"cgroup_read_bytes": cg[0] if cg else None,
            "cgroup_read_requests": cg[1] if cg else None,
            "cgroup_read_kib_per_request": cg[0] / cg[1] / 1024 if cg and cg[1] else None,
            "cgroup_read_mb_per_s": cg[0] / summary["total_time_s"] / 1e6 if cg else None,
            "device_bytes_per_loader_byte": cg[0] / summary["loader_bytes"] if cg and summary["loader_bytes"] else None}


def _limit_columns(run, row: dict) -> dict:
    """limited_by / limited_by_reason (limits.py) from the row, the monitor's device and CPU figures."""
    seen = {**(run.monitor.summary() if run.monitored else {}), **row}
    return dict(zip(("limited_by", "limited_by_reason"), limited_by(seen)))


def _row(run, config: EmulateConfig, data: dict, cfg: dict, summary: dict, reads: CgroupReads,
         cgroup: RunCgroup) -> dict:
    """The run's columns (the engine adds the common and monitor ones)."""
    p: EmulateParams = run.p
    name, n = config.workload, config.accelerators
    spec = p.spec(name)
    memory_limit = run.sweep.state.memory_limit
    sample_bytes = data["bytes"] / (len(data["files"]) * spec.samples_per_file)
    demand = cfg["batch"] * sample_bytes / cfg["compute_s"] / 1e6
    row = {"workload": name, "accelerator_type": p.accelerator_type, "accelerators": n, "launcher": p.launcher,
           "dataset_sizing": _sizing(p, cgroup.capped, memory_limit),
           "memory_limit_bytes": memory_limit if cgroup.capped else None,
           "odirect": p.odirect, "num_files": len(data["files"]), "dataset_bytes": int(data["bytes"]),
           "sample_bytes_mean": sample_bytes,
           "batch_size": cfg["batch"], "compute_s": cfg["compute_s"], "epochs": p.epochs,
           "steps_per_epoch": cfg["steps_per_epoch"], "read_threads": cfg["read_threads"],
           "prefetch": p.prefetch, "read_block_bytes": cfg["block"], "readahead": cfg["readahead"],
           "demand_mb_per_s_per_accelerator": demand,
           **_throttle_columns(run, n, demand, reads, cgroup.throttled),
           "au_threshold_percent": spec.au_threshold_percent, **summary,
           **_cgroup_columns(reads.run, summary)}
    row.update(au_checks(row))          # is the AU a measurement (window.py)? One that is not cannot pass
    row["au_pass"] = bool(summary["au_percent"] >= spec.au_threshold_percent and row.get("au_measured", True))
    return row


def _launch(run, cfg: dict, n: int, procs: list[str] | None) -> dict:
    """The accelerators, forked or as MPI ranks; the clock runs from the first step to the last."""
    p, t = run.p, run.target
    raw = run_once(cfg, n, procs, p, folder_below(t.study_dir(STUDY.name), "mpi", create=False),
                   affinity=cfg.get("cpu_affinity"), on_start=run.start_clock)
    run.stop_clock()
    if raw["launcher"] == "mpi":
        for h in sorted({r["host"] for r in raw["ranks"]}):
            run.sweep.add_host(h, "emulate: MPI ranks", raw["host_facts"].get(h))
        outside = sorted({r["host"] for r in raw["ranks"] if procs and not r["in_cgroup"]})
        if outside:
            run.sweep.note(f"ranks on {', '.join(outside)} ran outside the run's cgroup (a cgroup lives on one "
                           "host): no throttle or page-cache cap there, and their device reads are not in the "
                           "cgroup counters; use real storage targets for multi-host runs")
    return raw


def _delta(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    return (b[0] - a[0], b[1] - a[1]) if a and b else None


def _search_columns(p: EmulateParams, config: EmulateConfig, seconds: float, target) -> dict:
    """A search's probe (accelerators: auto): which step, and the search's own seconds so far (its budget's
    clock, this run included); nothing for a fixed list."""
    if config.search_step is None:
        return {}
    cap, cap_by = p.search_cap(config.workload, target)
    return {"search_step": config.search_step, "search_phase": config.search_phase,
            "search_elapsed_s": config.search_elapsed_before_s + seconds,
            "search_budget_s": p.budget_s(target), "search_max": cap,
            "search_max_by": "memory" if cap_by == "memory" else "search_max"}


def run_one(run, config: EmulateConfig) -> Measurement:
    """N emulated accelerators on run.target. On an S3 target whose gateway died (in this run or before): a
    failed row saying so, and every later point on that target is one too."""
    state: EmulateState = run.sweep.state
    store, t = _store(run.sweep, run.target), run.target
    if t.name in state.dead:
        why = f"not run: {state.dead[t.name]}"
        return Measurement(objects.failed_row(config, why), ok=False, failure_reason=why)
    try:
        return _run_one(run, config, store)
    except Exception:
        why = objects.store_failure(store)
        if why is None:
            raise
        state.dead[t.name] = why
        run.sweep.note(f"target '{t.name}': {why}")
        return Measurement(objects.failed_row(config, why), ok=False, failure_reason=why)


def _run_one(run, config: EmulateConfig, store) -> Measurement:
    """Cold cache, throttle / page-cache cap (directory) or the gateway's cgroup (S3), the measured run."""
    began = time.perf_counter()
    name, n = config.workload, config.accelerators
    t, p = run.target, run.p
    state: EmulateState = run.sweep.state
    data, memory_limit = state.datasets[(t.name, name)], state.memory_limit
    data = first_files(data, files_for(p, p.spec(name), name, n, planned_files(p, p.spec(name))))   # grown with N
    store.evict_cold(run, [store.key(f"{name}/data")], drop=True)   # its files here (a gateway's too), or none
    store.warm(data["files"][0])
    group = store.client_group(run, memory_limit)     # a directory's throttle and page-cache cap; S3: none
    capped = group is not None and group.memory_limit_bytes is not None
    cgroup = RunCgroup(group, bool(run.emulated), capped)    # the profile on (the client's cgroup or the gateway's)
    evict = memory_limit is not None and not capped and data["backing"] is not None
    cfg = run_config(p, name, data, n, evict, folder_below(t.study_dir(STUDY.name), "checkpoints", create=False),
                     capped)
    # which loader the accelerators run, and how its rows say the page cache was kept out (on S3 the gateway's
    # files are the cache, elsewhere than the client)
    objects_side = on_s3(t)
    cfg.update({"loader": "objects" if objects_side else "files", "store": asdict(store.handle()),
                "sizes": data["sizes"], "backing": data["backing"]})
    if p.mlperf_rules:
        cfg["seed"] = p.seed + run.repeat     # the rules: the shuffle seed changes every run
    if FAULT:
        cfg.update(FAULT)
    io_group = store.io_group(group)     # where the store's device reads are counted: the client's, or its gateway's
    cgio, cores = CgroupIoSampler(io_group, t.device, run.params.run.monitor_interval_s), CoreBusy()
    io_before = cgroup_read_stats(io_group, t.device)
    gw_cpu_before = store.server_cpu_seconds()
    run.add_sampler(cgio)
    run.add_sampler(cores)
    procs = group.procs_files if group else None
    confined = confine_client(run, config, cfg, group)
    try:
        raw = _launch(run, cfg, n, (procs or []) + confined.procs_files if confined else procs)
    finally:
        if confined:
            confined.remove()
    gw_cpu_after = store.server_cpu_seconds()
    mem_stats = group.memory_stats() if cgroup.capped else {}
    summary, per, lat = summarize(raw, cfg, n)
    reads = CgroupReads(_delta(io_before, cgroup_read_stats(io_group, t.device)), cgio.window(*summary.pop("window_t")))
    row = {**_row(run, config, data, cfg, summary, reads, cgroup), **cgio.summary(), **mem_stats,
           **cores.summary(), "device_read_latency_us_idle": run.sweep.state.idle_latency_us.get(t.name),
           "host_roles": host_roles(per, raw.get("launch_host") or socket.gethostname()),
           **check_columns(config, confined),
           "mlperf_run": mlperf.run_kind(run.repeat) if p.mlperf_rules and not config.cpus_confined else None,
           **objects.gateway_columns(store, gw_cpu_before, gw_cpu_after, summary)}
    if objects_side:
        row["dataset_sizing"] = objects.sizing(data, evict)
    row.update(_limit_columns(run, row))
    row.update(_search_columns(p, config, time.perf_counter() - began, t))
    ids = {"run_id": run.run_id, "target": t.name, "workload": name, "accelerators": n, "repeat": run.repeat}
    hosts = per_host(per, summary["total_time_s"])
    return Measurement(row, tables={"accelerators.csv": [{**ids, **r} for r in per],
                                    "hosts.csv": [{**ids, **h} for h in hosts],
                                    "latency_histograms.csv": [{**ids, **h} for h in latency_histogram(lat)]},
                       series={"-cgroup": cgio.timeseries()} if cgio.samples else {})


# --------------------------------------------------------------------------- finish
def finish(sweep, frame) -> None:
    """Checkpoints removed from every target; the MLPerf-Storage-like summary."""
    for t in sweep.targets:
        remove_tree(t.study_dir(STUDY.name) / "checkpoints", t.study_dir(STUDY.name), ignore_errors=True)
    ml = mlperf_results(frame)
    results.write_json(sweep.out_dir / "mlperf_results.json", ml)
    mlperf.export(sweep.out_dir, frame)
    mlpstorage_verdict.record(sweep.out_dir)
    _cache_notes(sweep, frame)
    if sweep.state.search is not None:         # the answer from the rows must be the one the search reached
        rows = {(r["workload"], r["target"]): r for r in ml["accelerators_supported"]}
        for (w, t), out in sweep.state.search.outcomes().items():
            got = rows.get((w, t), {})
            if (got.get("accelerators_supported"), got.get("supported_limited_by")) != (out.answer, out.limited_by):
                sweep.note(f"search of {w} on '{t}' ended at {out.text}, but its rows give "
                           f"{got.get('accelerators_supported_text')}: the rows' answer is reported")


def _cache_notes(sweep, frame) -> None:
    """notes.json: per workload and target, the runs whose page cache served part of the loaders' bytes on a target
    whose cache is meant cold (window.cache_served): their AU is above what the device delivered."""
    if frame.empty or "device_bytes_per_loader_byte" not in frame:
        return
    for (w, t), g in measured(frame).groupby(["workload", "target"], sort=False):
        hit = g[[bool(cache_served(r)) for r in g.to_dict("records")]]
        if len(hit):
            ratio = hit.device_bytes_per_loader_byte
            sweep.note(f"emulate: {w} on '{t}': the page cache served {100 * (1 - ratio.max()):.0f}–"
                       f"{100 * (1 - ratio.min()):.0f} % of the loaders' bytes in {len(hit)} of {len(g)} runs (device "
                       f"bytes per loader byte {ratio.min():.2f}–{ratio.max():.2f}, at N = "
                       f"{', '.join(str(int(n)) for n in sorted(hit.accelerators.unique()))}): their AU is above what "
                       "the device alone delivered, and a throttle's bound does not hold for them")


# The engine's optional hooks this study does not have (core/contract.py RunRoom); the stores are the engine's.
configure = close = None
