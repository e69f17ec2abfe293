"""The vector search on the shared engine (core.sweep): search list L x beam width x search threads x target, on
the clustered set, and the uniform control (v3.0's data) at each L on the first target.

prepare() makes each target's data sets and indexes (dataset.py; kept for later sweeps). A run: `threads` search
processes (search.py, kit.ranks workers in the run's cgroup: the target's throttle, or a cgroup of its own that only
counts their reads) open the index; the engine evicts the index files; the clock runs while they search. After the clock:
the index's pages still in the page cache (DiskANN reads with O_DIRECT: none should be), the cgroup's block-layer
read counters, the reads the searches kept in flight, and fio's 4 KiB random-read IOPS on the same index file in the same
cgroup (probe.py) at the depth the searches kept (inflight.py), from which the point's QPS is predicted
(metrics.py).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ...core import cache, cgroups, plans, results, targets as targets_mod
from ...core.causes import EnvironmentFailure
from ...core.sweep import Measurement, Point
from ...kit import mlpstorage_verdict, space
from ...kit.cgroup_io import cgroup_read_stats
from ...kit.launch import open_launch
from . import STUDY, dataset, inflight, metrics, mlperf_tree, probe, search
from .params import VectorSearchParams


@dataclass(frozen=True)
class Config:
    data: str                 # clustered | uniform
    search_list: int          # L
    beam_width: int
    threads: int

    @property
    def label(self) -> str:
        return f"{self.data} L{self.search_list} W{self.beam_width} T{self.threads}"


@dataclass
class VectorState:
    sets: dict[str, dict[str, dict]] = field(default_factory=dict)     # target -> set -> its manifest
    probes: list[dict] = field(default_factory=list)                   # fio's figures, one per run


# --------------------------------------------------------------------------- prepare
def _needed(p: VectorSearchParams, t, builds: bool) -> int:
    """The sets `t` lacks (a kept set of another shape is rebuilt: not present); where they are built, the last
    one at its build's peak (fit.build_peak_bytes: vectors, index and DiskANN's temporaries)."""
    return dataset.space_needed(p, t, builds)


ENGINE = "diskannpy-rust==0.49.1"


def engine_missing() -> str | None:
    """Why the search engine cannot run here (one line: the package, where it is pinned, what to do), or None."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version
    try:
        v = version("diskannpy-rust")
    except PackageNotFoundError:
        v = None
    if v is None or importlib.util.find_spec("diskannpy") is None:
        other = "" if importlib.util.find_spec("diskannpy") is None else \
            " (a `diskannpy` of another package is installed: the C++ diskannpy, which has the same import name)"
        return (f"vector_search needs {ENGINE} (pyproject.toml, environment.yml), which is not installed in "
                f"{sys.executable}{other}: pip install '{ENGINE}'")
    return None


def prepare(sweep) -> None:
    p: VectorSearchParams = sweep.p
    p.check_machine()
    why = engine_missing()
    if why:
        raise EnvironmentFailure(why)
    sweep.state = VectorState()
    kinds = dataset.SETS if p.uniform_control else dataset.SETS[:1]
    first = sweep.targets[0] if sweep.targets else None
    space.check_space(sweep.targets, lambda t: _needed(p, t, t is first),
                      "the vector sets and their DiskANN indexes (a build's peak: the vectors, the index and "
                      "DiskANN's temporaries)")
    for t in sweep.targets:     # built once, on the first target; the others get a copy (the same bytes)
        sweep.state.sets[t.name] = {k: dataset.ready(t, p, k, sweep.status, None if t is first else first,
                                                     log_dir=sweep.out_dir / "logs") for k in kinds}
    results.write_json(sweep.out_dir / "study.json", _study_json(sweep))


def _study_json(sweep) -> dict:
    from importlib.metadata import version      # the engine's version, without loading it here

    p: VectorSearchParams = sweep.p
    return {"engine": f"diskannpy-rust {version('diskannpy-rust')}", "index_type": "DISKANN (Vamana + PQ, disk)",
            "cpus": os.cpu_count(), "num_vectors": p.num_vectors, "dimension": p.dimension, "k": p.k,
            "recall_floor": p.recall_floor, "graph_degree": p.graph_degree, "pq_chunks": p.pq_chunks,
            "sets": sweep.state.sets}


# --------------------------------------------------------------------------- plan
def plan(sweep) -> plans.FixedPlan:
    """Every point `repeats` times, then each target's page-1 point (the best QPS at recall >= the floor) again up to
    `answer_runs` runs in all: its range on page 1 comes from those runs, the other points stay exploratory."""
    p: VectorSearchParams = sweep.p
    configs = [Config("clustered", L, w, n) for L in p.search_list for w in p.beam_width for n in p.threads]
    if p.uniform_control:
        configs += [Config("uniform", L, p.beam_width[0], p.threads[0]) for L in p.search_list]
    points = [Point(c, r, c.label) for r in range(1, p.repeats + 1) for c in configs]
    return plans.AnswerRepeats(points, sweep.target_names, sweep.params.run.rerun_disturbed,
                               lambda: answer_points(sweep.frame(), p.recall_floor), p.repeats + 1, p.answer_runs)


def answer_points(frame, floor: float) -> list[tuple[Config, str, str]]:
    """(config, label, target) of each target's page-1 point in the rows so far (metrics.best_at_floor)."""
    best = metrics.best_at_floor(metrics.points(frame, floor), floor) if len(frame) else []
    out = []
    for r in getattr(best, "itertuples", lambda: [])():
        c = Config(str(r.data), int(r.search_list), int(r.beam_width), int(r.threads))
        out.append((c, c.label, str(r.target)))
    return out


def skip(sweep, point: Point, target) -> bool:
    """The uniform control runs on the first target only: its point is recall, which no storage changes."""
    return point.config.data == "uniform" and target.name != sweep.targets[0].name


def run_id(config: Config, target, repeat: int) -> str:
    c = config
    return f"{STUDY.name}-{target.name}-{c.data}-L{c.search_list}-w{c.beam_width}-t{c.threads}-r{repeat}"


# --------------------------------------------------------------------------- one run
def _group(run):
    """The target's throttle, else a cgroup of the run's own that only counts its reads (None: no cgroups here)."""
    group = run.throttle()
    dev = run.target.device
    if group is not None or dev is None or dev.major is None:
        return group
    try:                 # an io cgroup with no limit: it only counts the reads of its processes
        return run.cgroup("reads", io=cgroups.IoLimits(device=(dev.major, dev.minor)))
    except cgroups.CgroupUnavailable:
        return None


def run_one(run, config: Config) -> Measurement:
    p: VectorSearchParams = run.p
    t, c = run.target, config
    folder = dataset.folder(t, c.data)
    files = dataset.index_files(folder)
    group = _group(run)
    cfg = {"folder": str(folder), "k": p.k, "search_list": c.search_list, "beam_width": c.beam_width,
           "max_point_s": p.max_point_s, "min_queries": p.min_queries}
    keys = {"data": c.data, "search_list": c.search_list, "beam_width": c.beam_width, "threads": c.threads,
            "queue_depth_max": c.beam_width * c.threads, "throttled": bool(run.emulated)}
    with open_launch(search.WORKER, range(c.threads), cfg, procs_files=group.procs_files if group else None,
                     tasks=True) as launch:
        launch.put_tasks(range(p.queries))
        run.evict(files, "the index files")
        before = cgroup_read_stats(group, t.device)
        release, done = launch.operate(on_start=run.start_clock, timeout_s=p.max_point_s * 50 + 600)
        run.stop_clock()
        after = cgroup_read_stats(group, t.device)
    result = search.merge([d.result for d in done], release)
    if result.get("error"):         # a search process failed: the row fails, and no QPS or recall is reported
        return Measurement(keys, ok=False, failure_reason=result["error"])
    resident = sum(cache.cached_pages(f) for f in files)
    disk_index = dataset.disk_index(folder)
    trace = run.trace.path if getattr(run, "trace", None) is not None else None
    spans = _extents(disk_index, t)
    depth = inflight.measured_depth(result, result["wall_s"], trace, spans, bool(run.emulated))
    dev = _probe(run, group, disk_index, depth, spans, c)
    truth = np.load(folder / "truth.npy")[result["index"]]
    block = metrics.block_reads(before, after, run.monitor.summary() if run.monitored else {})
    machine = run.monitor.summary().get("cpu_busy_percent") if run.monitored else None
    row = metrics.point_row(result, truth, block, dev, resident, p, os.cpu_count() or 1, machine, depth)
    row.update(keys)
    return Measurement(row)


def _extents(index_file, target) -> list | None:
    """The index file's sectors on the disk (the block trace's reads inside them are the search's), or None."""
    dev = target.device
    if dev is None or dev.major is None:
        return None
    try:
        return inflight.extents(index_file, dev.partition)
    except OSError:                 # a filesystem without FIEMAP: the depth comes from per-query timing
        return None


def _probe(run, group, index_file, depth: dict, spans, config: Config) -> dict:
    """fio right after the searches, in their pattern (`threads` jobs of beams of `beam_width` reads): the device's
    IOPS of this moment (a shared disk's speed drifts: a probe minutes away predicted a local point 40-126 % off,
    measured), under the same profile as the searches; where the searches' depth is the block layer's, fio's reads
    are traced there too (like with like), a second probe with as many jobs as bring fio's depth near theirs when
    the first was far from it, and the IOPS at the searches' depth come from the latency there (inflight.py)."""
    traced = depth["inflight_source"].startswith("block layer")
    got = [_one_probe(run, group, index_file, config.beam_width, config.threads, spans, traced, "")]
    jobs = inflight.second_jobs(depth["reads_in_flight"], got[0], config.threads) if traced else None
    if jobs is not None:
        got.append(_one_probe(run, group, index_file, config.beam_width, jobs, spans, traced, f"-j{jobs}"))
    return {**got[0], "iops": inflight.device_iops(depth, got, config.threads), "pattern_iops": got[0]["iops"],
            "block_latency_us": inflight.latency_at(depth["reads_in_flight"], {
                g["block_depth"]: g["block_latency_us"] for g in got}) if got[0].get("block_latency_us") else None}


def _one_probe(run, group, index_file, beam_width: int, jobs: int, spans, traced: bool, tag: str) -> dict:
    limits = targets_mod.io_limits(run.target) if run.emulated else None
    out = run.sweep.out_dir / "logs" / f"{run.run_id}-fio{tag}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    trace = _trace_start(run, out.with_suffix(".tracefs-raw.gz")) if traced else None
    try:
        measured = probe.probe(index_file, beam_width, run.p.probe_s, out, probe_group(run, group, f"probe{tag}"),
                               f"{run.run_id}-fio", jobs=jobs)
    finally:
        done = trace.stop() if trace is not None else None
    got = {"target": run.target.name, "run_id": run.run_id, **probe.within_profile(measured, limits)}
    block = inflight.traced_reads(done.path, spans) if done is not None else {"reads": 0}
    if block["reads"]:
        got.update(block_depth=block["depth"], block_latency_us=block["latency_us"])
    run.sweep.state.probes.append(got)
    return got


def _trace_start(run, path):
    """A block trace of the target's device around one probe, or None where tracing is unavailable."""
    from ...core import blocktrace

    dev = run.target.device
    try:
        return blocktrace.BlockTrace((dev.major, dev.minor), path, run.sweep.params.run.trace_buffer_kib).start()
    except blocktrace.TraceUnavailable:
        return None


def probe_group(run, group, suffix: str = "probe"):
    """Where the probe runs: on an emulated target, a fresh cgroup with the same profile. The searches' throttle
    group still owes for their last reads, and a probe in it started slow (an emulated-HDD probe read ~2/3 of the
    cap in 1 of 12 points, measured: that point's prediction was 48.6 % low); a new group owes nothing. Elsewhere
    the searches' own (counting) group."""
    if not run.emulated or group is None:
        return group
    return run.throttle(suffix) or group


# --------------------------------------------------------------------------- finish
def finish(sweep, frame) -> None:
    import pandas as pd

    p: VectorSearchParams = sweep.p
    pts = metrics.points(frame, p.recall_floor)
    results.write_csv(sweep.out_dir / "points.csv", pts)
    results.write_csv(sweep.out_dir / "probes.csv", pd.DataFrame(sweep.state.probes))
    mlperf_tree.export(sweep.out_dir, frame, p, _study_json(sweep))
    mlpstorage_verdict.record(sweep.out_dir)


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = close = None
