"""transfer_sweep arithmetic: per-point tables (repeats merged), headline deltas, metrics.json.

Headlines, as Micron's GDS brief states them:
  reference vs other target on the busy system (its "9400 vs Competitor A", busy GDS system):
    throughput, mean latency and p99 latency; matched on (rw, transfer size, queue depth);
  idle vs busy on each target (its "busy system shows 50 % lower performance, 2x response time"):
    throughput and p99 latency, the idle run as the reference.
Each card carries the spread over repeats at the configuration where the delta is largest
(repeat r of one side against repeat r of the other).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...core import columns
from ...core.columns import Column
from ...kit import files as kit_files, runs as kit_runs
from ...report import formatting
from ...report.headlines import compare
from . import cpu_cost, fio

POINT_KEYS = ["target", "load", "path", "rw", "block_size_bytes", "queue_depth"]
MATCH = ["rw", "block_size_bytes", "queue_depth"]


def _n(name: str, unit: str, meaning: str) -> Column:
    return Column(name, unit, meaning, "number")


def _t(name: str, meaning: str) -> Column:
    return Column(name, "", meaning, "text")


# Every column a run_one row can hold, beyond the engine's and the monitor's (core.columns).
CONFIG_COLUMNS: tuple[Column, ...] = (
    _t("load", "idle | busy: the system beside fio"),
    _t("path", "cpu (fio into host memory) | gds | legacy | legacy-pread (ours, into GPU memory) | gds-fio | "
               "legacy-fio (fio's libcufile engine, cuda_io=cufile | posix)"),
    _t("engine", "fio's ioengine, or kvikio / pread+cudaMemcpyAsync on our GPU paths"),
    _t("rw", "fio's rw pattern (randread, read, randwrite, write)"),
    _n("block_size_bytes", "bytes", "transfer size of one I/O"),
    _t("block_size_label", "the transfer size as fio writes it (4K, 128K, 1M; K = 1,024 B)"),
    _n("queue_depth", "", "I/Os in flight = iodepth x numjobs"),
    _n("iodepth", "", "fio's iodepth per job"),
    _n("numjobs", "", "fio's job count"),
    _n("ramp_time_s", "s", "fio's ramp time before measuring"),
    _n("runtime_s", "s", "fio's measured run time"),
    _n("file_bytes", "bytes", "size of the preconditioned file fio reads"),
    Column("throttled", "", "True when fio ran inside the target's throttle cgroup", "bool"),
    _t("fio_json", "fio's raw JSON+ of the run, relative to the out folder (fio/<run_id>.json)"),
)
FIO_COLUMNS: tuple[Column, ...] = (
    _n("fio_bw_bytes", "B/s", "fio's bw_bytes"),
    _n("throughput_mb_per_s", "MB/s", "throughput (fio's bw_bytes / 10⁶; GPU path: bytes / elapsed)"),
    _n("throughput_mib_per_s", "MiB/s", "fio's bw_bytes / 2²⁰"),
    _n("iops", "IO/s", "I/Os per second"),
    _n("io_bytes", "bytes", "bytes transferred in the measured time"),
    _n("total_ios", "", "I/Os completed in the measured time"),
    _n("fio_runtime_ms", "ms", "fio's own measured run time"),
    _n("fio_wall_s", "s", "wall time of the fio process"),
    _n("lat_us_mean", "µs", "mean total latency (submission + completion)"),
    _n("lat_us_stddev", "µs", "standard deviation of total latency"),
    _n("lat_us_min", "µs", "smallest total latency"),
    _n("lat_us_max", "µs", "largest total latency"),
    _n("clat_us_mean", "µs", "mean completion latency"),
    _n("clat_us_stddev", "µs", "standard deviation of completion latency"),
    _n("slat_us_mean", "µs", "mean submission latency"),
    *(_n(f"clat_us_p{fio.percentile_key(p)}", "µs", f"fio's {p}th percentile of completion latency")
      for p in fio.PERCENTILES),
    _n("fio_usr_cpu_percent", "%", "fio's own CPU in user mode"),
    _n("fio_sys_cpu_percent", "%", "fio's own CPU in the kernel"),
    *(_n(f"iodepth_level_{'ge64' if b.startswith('>=') else b}_percent", "%",
         f"share of the run fio had {b} I/Os in flight (iodepth_level)") for b in fio.IODEPTH_BUCKETS),
    _t("iodepth_reached", "the iodepth_level bucket holding most of the run (the depth actually reached)"),
)
LOAD_COLUMNS: tuple[Column, ...] = (
    _t("load_tool", "the busy load's tool (stress-ng | stressapptest)"),
    _n("load_cpu_percent_target", "%", "busy.cpu_percent: the CPU share the load was calibrated to"),
    _n("load_memory_share_percent_target", "%", "busy.memory_bandwidth_percent of the peak"),
    _n("peak_memory_mb_per_s", "MB/s", "this machine's peak memory bandwidth, measured once per study run"),
    _n("load_cpu_setting_percent", "%", "stress-ng --cpu-load after calibration"),
    _n("load_calibrated_cpu_percent", "%", "whole-machine CPU the calibrated load reached without fio"),
    _n("load_memory_mb_per_s", "MB/s", "memory bandwidth the load moved during the point (its own report)"),
    _n("load_memory_share_percent", "%", "load_memory_mb_per_s / peak_memory_mb_per_s x 100"),
    _n("load_cpu_percent", "%", "the load's own usr+sys over all CPUs during the point"),
    _n("load_wall_s", "s", "wall time the load ran"),
)
GPU_COLUMNS: tuple[Column, ...] = (
    Column("kvikio_compat_mode_preferred", "", "kvikio's report: compat (POSIX) mode preferred", "bool"),
    Column("kvikio_gds_available", "", "kvikio's report: GDS available in the driver", "bool"),
    _n("kvikio_gds_threshold_bytes", "bytes", "kvikio's gds_threshold: smaller reads go through POSIX"),
    _t("gpu_path_ran", "the path that ran, from kvikio's report (gds | legacy); legacy-pread: legacy"),
    _n("kvikio_nthreads", "", "KVIKIO_NTHREADS the worker ran with (= the point's queue depth)"),
    _t("kvikio_compat_mode_env", "KVIKIO_COMPAT_MODE the worker ran with (OFF: gds, ON: legacy)"),
    Column("host_buffer_pinned", "", "legacy-pread: its page-aligned host buffers were pinned (cudaHostRegister)",
           "bool"),
    _n("elapsed_s", "s", "measured time of a GPU point (after the ramp)"),
    _n("ramp_io_bytes", "bytes", "bytes read during the ramp (not counted)"),
    _n("requests_issued", "", "requests the queue engine issued (ramp included)"),
    _n("requests_completed", "", "requests the queue engine saw complete (ramp included; = issued when drained)"),
    _n("max_in_flight", "", "most requests the engine had in flight at once"),
    _n("in_flight_mean", "", "time-weighted mean of requests in flight over the measured window"),
    _n("slots_used", "", "queue slots that completed at least one request"),
    _n("queue_depth_requested", "", "the queue depth the worker was asked to keep"),
    _t("latency_bins_json", "our GPU paths: per-request latency histogram (fio's buckets), fio/<run_id>.json"),
    _t("cuda_io", "fio's libcufile cuda_io (cufile | posix) on gds-fio / legacy-fio"),
)
SERVED_COLUMNS: tuple[Column, ...] = (
    _n("device_bytes_per_delivered_byte", "", "read points: the device's bytes over the run (diskstats, ramp "
                                              "included) ÷ the bytes the path delivered (served.py)"),
    _t("not_the_storage", "read points: why the figure is not the storage's (the page cache served part of it); "
                          "empty: the device read what was delivered"),
)
COLUMNS: tuple[Column, ...] = (CONFIG_COLUMNS + FIO_COLUMNS + LOAD_COLUMNS + GPU_COLUMNS + SERVED_COLUMNS
                                + cpu_cost.COLUMNS)
# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (brief/inputs.py) refuses a runs.csv without them, so the code below may assume them.
REQUIRED = ("load", "path", "rw", "block_size_bytes", "queue_depth", "iodepth", "numjobs", "throughput_mb_per_s",
            "iops", "lat_us_mean", "clat_us_p99")
RUNS_COLUMNS = columns.kinds(REQUIRED, COLUMNS)
TARGET_METRICS = [("throughput_mb_per_s", "higher", "Throughput, busy system (MB/s)"),
                  ("lat_us_mean", "lower", "Mean latency, busy system (µs)"),
                  ("clat_us_p99", "lower", "p99 latency, busy system (µs)")]
LOAD_METRICS = [("throughput_mb_per_s", "higher", "Throughput idle vs busy (MB/s)"),
                ("clat_us_p99", "lower", "p99 latency idle vs busy (µs)")]


def _cpu(frame: pd.DataFrame) -> pd.DataFrame:
    ok = kit_runs.ok_runs(frame)
    return ok[ok.path == "cpu"] if "path" in ok else ok


def _spread(frame: pd.DataFrame, h: dict, keys: list[str], side: str = "target") -> dict:
    """Per-repeat deltas (repeat r vs repeat r) at the headline's configuration."""
    if h.get("delta_percent") is None:
        return h
    sel = frame
    for k, v in h["at"].items():
        sel = sel[sel[k] == v]
    a = sel[sel[side] == h["ref"]].set_index("repeat")[h["metric"]]
    b = sel[sel[side] == h["other"]].set_index("repeat")[h["metric"]]
    pair = pd.concat([a, b], axis=1, keys=["a", "b"]).dropna()
    pair = pair[(pair.a > 0) & (pair.b > 0)]
    if len(pair) < 2:
        return {**h, "spread_percent": None}
    r = pair.a / pair.b
    d = (r - 1) * 100 if h["better"] == "higher" else (1 - r) * 100
    lo, hi = float(d.min()), float(d.max())
    return {**h, "spread_percent": [round(lo, 1), round(hi, 1)],
            "text": h["text"] + formatting.spread(lo, hi, h["better"])}


def _where(h: dict) -> str:
    at = h.get("at") or {}
    if not at:
        return ""
    bs = at.get("block_size_bytes")
    return f" at {at.get('rw', '')} {fio_label(bs)} QD {at.get('queue_depth')}" if bs else ""


def fio_label(bs) -> str:
    from .params import size_label
    return size_label(int(bs)) if bs is not None else "?"


def headlines(frame, target_names: list[str]) -> list[dict]:
    cpu = _cpu(frame)
    out = []
    if cpu.empty:
        return out
    busy = cpu[cpu.load == "busy"] if (cpu.load == "busy").any() else cpu[cpu.load == "idle"]
    word = "busy" if (cpu.load == "busy").any() else "idle"
    for other in target_names[1:]:
        for metric, better, label in TARGET_METRICS:
            h = compare(busy, metric, better, MATCH, target_names[0], other, label.replace("busy", word))
            h = _spread(busy, h, MATCH)
            h["text"] += _where(h)
            out.append(h)
    if {"idle", "busy"} <= set(cpu.load):
        for name in target_names:
            one = cpu[cpu.target == name].assign(target=lambda f: f.load)
            for metric, better, label in LOAD_METRICS:
                h = compare(one, metric, better, MATCH, "idle", "busy", f"{label} on {name}")
                h = _spread(one, h, MATCH)
                h["text"] += _where(h)
                out.append({**h, "id": f"{metric}:{name}|idle_vs_busy", "hint": "the busy load's effect",
                            "ref": f"{name} idle", "other": f"{name} busy"})
    return out


def _per_load(g: pd.DataFrame) -> dict:
    m = g.groupby(MATCH).agg(bw=("throughput_mb_per_s", "mean"), iops=("iops", "mean"))
    return {"max_throughput_mb_per_s": float(m.bw.max()), "max_iops": float(m.iops.max())}


def metrics(frame, target_names: list[str]) -> dict:
    """{target: {load: maxima over the cpu path's configurations}}: the GPU paths' rows get no load key
    (`_cpu_load` NaN), and groupby leaves rows with a NaN key out."""
    if "load" in frame:
        cpu_load = frame["load"].where(frame["path"] == "cpu") if "path" in frame else frame["load"]
        frame = frame.assign(_cpu_load=cpu_load)
    return kit_runs.metrics(frame, target_names, headlines, per_target=_per_load, by=["target", "_cpu_load"])


# --------------------------------------------------------------------------- per point
def points(frame: pd.DataFrame, fio_dir: Path | None) -> pd.DataFrame:
    """One row per point (target, load, path, rw, size, QD): means and sd over repeats, and fio
    latency percentiles recomputed from the repeats' merged histogram bins (fio's rule)."""
    ok = kit_runs.ok_runs(frame)
    rows = []
    for key, g in ok.groupby(POINT_KEYS, sort=False):
        row = dict(zip(POINT_KEYS, key))
        row.update(repeats=int(len(g)), iodepth=int(g.iodepth.iloc[0]), numjobs=int(g.numjobs.iloc[0]))
        for col in ("throughput_mb_per_s", "iops", "lat_us_mean", "clat_us_p99"):
            row[f"{col}_mean"] = float(g[col].mean())
            row[f"{col}_sd"] = float(g[col].std(ddof=1)) if len(g) > 1 else 0.0
        # the worse and better repeat: the forecast takes the worse, which one fast repeat cannot inflate
        row["throughput_mb_per_s_min"] = float(g.throughput_mb_per_s.min())
        row["throughput_mb_per_s_max"] = float(g.throughput_mb_per_s.max())
        ios = g.total_ios if "total_ios" in g else None
        if ios is not None and ios.notna().all() and ios.sum() > 0:
            row["lat_us_mean_all_ios"] = float((g.lat_us_mean * ios).sum() / ios.sum())
        for c in ("cpu_busy_percent", "load_cpu_percent", "load_memory_share_percent", "cpu_cores_per_gb_per_s",
                  "device_bytes_per_delivered_byte"):
            if c in g:
                row[f"{c}_mean"] = float(pd.to_numeric(g[c], errors="coerce").mean())
        caveats = g.not_the_storage.dropna().astype(str) if "not_the_storage" in g else pd.Series(dtype=str)
        row["not_the_storage"] = (f"{len(caveats)} of {len(g)} repeats: {caveats.iloc[0]}"
                                  if len(caveats) else None)      # a point any repeat of which memory served
        merged = _merged_bins(g, fio_dir) if fio_dir is not None else None
        if merged:
            pct = fio.percentiles_from_bins(merged)
            for p, v in pct.items():
                row[f"clat_us_p{fio.percentile_key(p)}_merged"] = v / 1e3 if v is not None else None
            row["clat_samples_merged"] = int(sum(merged.values()))
        rows.append(row)
    return pd.DataFrame(rows)


def _merged_bins(g: pd.DataFrame, fio_dir: Path) -> dict[int, int] | None:
    many = []
    for run_id, rw in zip(g.run_id, g.rw):
        doc = kit_files.read_json_or(Path(fio_dir) / f"{run_id}.json")
        if not doc:
            return None
        many.append(fio.bins(doc, rw))
    return fio.merge_bins(many)
