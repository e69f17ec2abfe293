"""vector_search arithmetic: one row per run (recall, QPS, per-query tails, reads per query three ways, the
prediction from the device's IOPS and what limited the point), the per-point table with the best QPS at the
recall floor, headline deltas and metrics.json."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...core import columns
from ...core.columns import Column
from ...kit import runs as kit_runs
from ...kit.client_bound import MACHINE_BUSY_PERCENT
from ...report.headlines import versus_reference
from .dataset import recall_at_k

PAGE = 4096
KEYS = ["data", "search_list", "beam_width", "threads"]
AGREE = 0.05                  # reads per query from the three sources agree within 5 %
IO_BOUND_SHARE = 0.5          # I/O time at least this share of a query's latency: the device set the pace
BAND = 0.10                   # predicted and measured within this: the prediction holds; else limited_by names why
CLIENT_BUSY = 80.0            # % of the cores the search processes can use: the client's CPU set the pace


COLUMNS: tuple[Column, ...] = (
    Column("data", "", "clustered (planted queries) | uniform (v3.0's random data and queries: the control)", "text"),
    Column("search_list", "", "L: the candidate list of a search (DiskANN's complexity)"),
    Column("beam_width", "", "reads a search keeps in flight per hop"),
    Column("threads", "", "queries in flight: search processes, each with the index open, one query at a time"),
    Column("queue_depth_max", "", "beam_width x threads: the most reads the point could keep in flight"),
    Column("queue_depth", "", "the reads the point kept in flight on average, measured (inflight_source says "
                              "how): the depth its prediction is at"),
    Column("inflight_source", "", "block layer (trace): the search's reads inside the index file's extents | per-query "
                                  "timing: the queries waiting on I/O at once (a throttled target, or no block trace)",
           "text"),
    Column("read_latency_us_block", "us", "mean block-layer latency of the search's reads (issue to completion; "
                                          "block-layer source only)"),
    Column("queries_in_flight", "", "sum of the queries' wall times / the point's wall time: the queries really "
           "in flight (Little's law)"),
    Column("queries", "", "queries the point ran (stopped after max_point_s, at least min_queries)"),
    Column("qps_ci95_percent", "%", "95 % confidence half-width of qps from the spread of per-query latencies "
           "(1.96 x their coefficient of variation / sqrt(queries))"),
    Column("too_short", "", f"True when qps_ci95_percent > {BAND:.0%}: the point ran too few queries for its error bars",
           "bool"),
    Column("recall_at_k", "", "mean |found ∩ true k nearest| / k over the queries run (exact L2 ground truth)"),
    Column("below_recall_floor", "", "True when recall_at_k < recall_floor: its QPS is not an answer", "bool"),
    Column("qps", "queries/s", "queries / wall time of the measured interval"),
    Column("latency_ms_mean", "ms", "mean per-query latency (each query timed alone, call to return)"),
    Column("latency_ms_p50", "ms", "median per-query latency"),
    Column("latency_ms_p95", "ms", "95th percentile per-query latency"),
    Column("latency_ms_p99", "ms", "99th percentile per-query latency (of queries, not of batch means)"),
    Column("latency_ms_p999", "ms", "99.9th percentile per-query latency"),
    Column("reads_per_query_engine", "", "the engine's own count of 4 KiB sector reads per query (mean_ios)"),
    Column("reads_per_query_process", "", "/proc/self/io read_bytes of the search process / 4096 / queries"),
    Column("reads_per_query_block", "", "block-layer reads per query: the run's cgroup counters, else device-wide "
           "diskstats bytes / 4096 (block_source says which)"),
    Column("block_source", "", "cgroup (the run's own processes) | diskstats (the whole device) | not measured: no block device …", "text"),
    Column("reads_agree", "", f"True when the three reads-per-query figures agree within {AGREE:.0%}", "bool"),
    Column("bytes_per_query", "bytes", "read_bytes of the search process / queries"),
    Column("io_time_share", "", "the engine's I/O time / its latency, summed over queries"),
    Column("client_cpu_percent", "%", "the search process's CPU time / (wall x CPUs)"),
    Column("call_overhead_ms", "ms", "mean per query of (the query's wall time - the engine's own latency): the "
           "Python call around the search, which no IOPS figure predicts"),
    Column("resident_index_pages", "", "pages of the index files in the page cache after the run (direct I/O: 0)"),
    Column("page_cache_bypassed", "", "True when no page of the index files was cached after the run", "bool"),
    Column("device_iops_at_qd", "IOPS", "the device's 4 KiB random-read IOPS at queue_depth: queue_depth / the "
           "block-layer latency of fio's reads in the point's pattern (threads jobs, beams of beam_width); without "
           "a block-layer depth, fio's IOPS x the share of the time the device had the searches' work (inflight.py)"),
    Column("fio_iops_at_qd", "IOPS", "fio's own IOPS in the point's pattern, no time between beams (above the "
           "profile's cap only where a fresh throttle's start-up burst exceeded it)"),
    Column("fio_read_latency_us_block", "us", "block-layer latency of fio's reads in the point's pattern at "
           "queue_depth (between two probes' depths where a second probe brought fio's depth near the point's)"),
    Column("qps_device_bound", "queries/s", "fio's IOPS in the point's pattern (at most the profile's cap) / "
           "reads_per_query_engine: the QPS with no time between hops"),
    Column("qps_predicted", "queries/s", "device_iops_at_qd / reads_per_query_engine"),
    Column("prediction_error", "", "qps / qps_predicted - 1 (negative: slower than the device allows)"),
    Column("regime", "", "I/O-bound (io_time_share >= 0.5) | CPU-bound", "text"),
    Column("limited_by", "", "machine CPU (every CPU ≥ 90 % busy: other work) | client CPU | the engine (CPU in the "
           "search) | the device (its reads took longer or shorter than fio's in the search's pattern) | too few queries; "
           "never empty where qps and qps_predicted part by more than 10 %; empty: the device I/O set the pace "
           "as fio predicts", "text"),
    Column("limited_by_reason", "", "the figures behind limited_by", "text"),
    Column("throttled", "", "True when the search ran inside the target's throttle cgroup", "bool"),
)
RUNS_COLUMNS = columns.kinds(("data", "search_list", "beam_width", "threads", "recall_at_k", "qps",
                              "latency_ms_p99", "reads_per_query_engine", "qps_predicted", "regime"), COLUMNS)


NO_BLOCK = "not measured: no block device (tmpfs or another in-memory filesystem)"


def block_reads(before, after, monitor: dict) -> dict:
    """The block layer's reads of the measured interval: the cgroup's (requests, bytes) when it counted them,
    else the device-wide diskstats bytes."""
    if before is not None and after is not None:
        return {"source": "cgroup", "bytes": after[0] - before[0], "requests": after[1] - before[1]}
    if "device_read_bytes" in monitor:
        return {"source": "diskstats", "bytes": monitor["device_read_bytes"], "requests": None}
    return {"source": NO_BLOCK, "bytes": None, "requests": None}


def _per_query_reads(block: dict, n: int) -> float | None:
    if block["bytes"] is None or n == 0:
        return None
    return block["bytes"] / PAGE / n      # 4 KiB sectors: merged requests would undercount, bytes do not


def point_row(result: dict, truth: np.ndarray, block: dict, dev: dict, resident: int, p, cpus: int,
              machine_busy_percent: float | None = None, depth: dict | None = None) -> dict:
    n = int(result["queries"])
    stats = np.asarray(result["stats"], dtype=float).reshape(-1, 6)
    lat_ms = (stats[:, 1] - stats[:, 0]) * 1e3
    engine = float(stats[:, 5].mean()) if n else float("nan")
    process = result["read_bytes"] / PAGE / n if n else float("nan")
    blk = _per_query_reads(block, n)
    figures = [x for x in (engine, process, blk) if x is not None]
    agree = bool(figures and max(figures) <= min(figures) * (1 + AGREE) and blk is not None)
    share = float(stats[:, 3].sum() / stats[:, 2].sum()) if n and stats[:, 2].sum() > 0 else float("nan")
    wall = float(result["wall_s"])
    qps = n / wall if wall > 0 else float("nan")
    cpu_pct = 100.0 * result["cpu_s"] / (wall * cpus) if wall > 0 else float("nan")
    procs = int(result.get("processes", 1))
    usable = 100.0 * result["cpu_s"] / (wall * min(procs, cpus)) if wall > 0 else float("nan")
    predicted = dev["iops"] / engine if engine > 0 else float("nan")
    ci = qps_ci95(lat_ms)
    recall = recall_at_k(np.asarray(result["found"]), truth)
    depth = depth or {}
    row = {"queries": n, "qps_ci95_percent": ci, "too_short": bool(ci > 100 * BAND),
           "recall_at_k": recall, "below_recall_floor": recall < p.recall_floor, "qps": qps,
           "latency_ms_mean": float(lat_ms.mean()),
           **{f"latency_ms_{k}": float(np.percentile(lat_ms, q)) for k, q in
              (("p50", 50), ("p95", 95), ("p99", 99), ("p999", 99.9))},
           "reads_per_query_engine": engine, "reads_per_query_process": process, "reads_per_query_block": blk,
           "block_source": block["source"], "reads_agree": agree, "bytes_per_query": result["read_bytes"] / n,
           "io_time_share": share, "client_cpu_percent": cpu_pct,
           "call_overhead_ms": float((lat_ms - stats[:, 2] / 1e3).mean()) if n else float("nan"),
           "resident_index_pages": int(resident), "page_cache_bypassed": resident == 0,
           "queue_depth": depth.get("reads_in_flight", float("nan")), "inflight_source": depth.get("inflight_source", ""),
           "read_latency_us_block": depth.get("read_latency_us_block", float("nan")),
           "queries_in_flight": float(lat_ms.sum() / 1e3 / wall) if wall > 0 else float("nan"),
           "device_iops_at_qd": dev["iops"], "fio_iops_at_qd": dev.get("fio_iops", dev["iops"]),
           "fio_read_latency_us_block": dev.get("block_latency_us") or float("nan"),
           "qps_device_bound": dev.get("pattern_iops", dev["iops"]) / engine if engine > 0 else float("nan"),
           "qps_predicted": predicted,
           "prediction_error": qps / predicted - 1 if predicted > 0 else float("nan"),
           "regime": "I/O-bound" if share >= IO_BOUND_SHARE else "CPU-bound"}
    row.update(limited(share, usable, min(procs, cpus), machine_busy_percent, row["prediction_error"], ci, n,
                       row["read_latency_us_block"], row["fio_read_latency_us_block"]))
    return row


def qps_ci95(lat_ms: np.ndarray) -> float:
    """95 % confidence half-width of a point's QPS, in %, from its per-query latencies: 1.96 x cv / sqrt(n)."""
    n = len(lat_ms)
    if n < 2 or not lat_ms.mean() > 0:
        return float("inf")
    return float(100 * 1.96 * lat_ms.std(ddof=1) / lat_ms.mean() / np.sqrt(n))


def limited(share: float, cpu_pct: float, cores: int, machine_busy_percent: float | None = None,
            error: float = 0.0, ci: float = 0.0, n: int = 0, read_us: float = float("nan"),
            fio_us: float = float("nan")) -> dict:
    """What set the pace: the device as fio predicts (empty), the machine's CPU (every CPU busy with other work: the
    search waits to be scheduled and its I/O completions are reaped late; measured: a paper-scale point on a
    95-98 % busy machine ran 27-49 % below the prediction with 93 % of its latency in I/O), the client's CPU (the
    search processes used most of the cores they can use: `cpu_pct` is of `cores`), the engine's own CPU work per
    query (its latency mostly outside I/O), a point too short for its error bars, or the device itself (the
    searches' reads took longer or shorter than fio's in their pattern). Never empty where measured and
    predicted part by more than BAND."""
    why = f"I/O time {share:.0%} of query latency; search processes {cpu_pct:.0f} % of {cores} CPU(s)"
    off = error == error and abs(error) > BAND
    if off:
        why += f"; measured {error:+.0%} from the prediction"
    if machine_busy_percent is not None and machine_busy_percent >= MACHINE_BUSY_PERCENT:
        return {"limited_by": f"machine CPU ({machine_busy_percent:.0f} % busy)",
                "limited_by_reason": f"{why}; every CPU {machine_busy_percent:.0f} % busy"}
    if cpu_pct >= CLIENT_BUSY and (share < IO_BOUND_SHARE or off):
        return {"limited_by": "client CPU", "limited_by_reason": why}
    if share < IO_BOUND_SHARE:
        return {"limited_by": "the engine (CPU in the search)", "limited_by_reason": why}
    if not off:
        return {"limited_by": "", "limited_by_reason": why}
    if ci > 100 * BAND:
        return {"limited_by": f"too few queries ({n}: QPS ± {ci:.0f} %)", "limited_by_reason": why}
    parts = [why]
    if read_us == read_us and fio_us == fio_us:
        parts.append(f"the searches' reads took {read_us:.0f} us at the block layer, fio's in their pattern {fio_us:.0f} us")
    return {"limited_by": "the device (not as fio in the search's pattern)", "limited_by_reason": "; ".join(parts)}


def headlines(frame, target_names: list[str]) -> list[dict]:
    ok = kit_runs.ok_runs(frame)
    ok = ok[ok.data == "clustered"] if "data" in ok else ok
    return versus_reference(ok, target_names, KEYS, [("qps", "higher", "queries/s"),
                                                     ("latency_ms_p99", "lower", "p99 query latency")])


def best_at_floor(pts: pd.DataFrame, floor: float) -> pd.DataFrame:
    """Per target, the clustered point with the highest QPS among those at recall >= floor (none: left out)."""
    ok = pts[(pts.data == "clustered") & (pts.recall_at_k >= floor)]
    if ok.empty:
        return ok
    return ok.loc[ok.groupby("target").qps.idxmax()]


def metrics(frame, target_names: list[str]) -> dict:
    def per_target(g):
        c = g[g.data == "clustered"]
        floor = c[~c.below_recall_floor.astype(bool)]
        best = floor.loc[floor.qps.idxmax()] if len(floor) else None
        return {"best_qps_at_recall_floor": float(best.qps) if best is not None else None,
                "recall_of_best": float(best.recall_at_k) if best is not None else None,
                "qps_predicted_of_best": float(best.qps_predicted) if best is not None else None,
                "reads_per_query_of_best": float(best.reads_per_query_engine) if best is not None else None}
    return kit_runs.metrics(frame, target_names, headlines, per_target=per_target)


def points(frame: pd.DataFrame, floor: float) -> pd.DataFrame:
    """One row per target and point: medians over repeats (recall is the same at every repeat)."""
    ok = kit_runs.ok_runs(frame)
    if ok.empty:
        return pd.DataFrame()
    nums = ["queries", "qps_ci95_percent", "queue_depth", "queries_in_flight", "recall_at_k", "qps", "latency_ms_p50", "latency_ms_p95", "latency_ms_p99", "latency_ms_p999",
            "reads_per_query_engine", "reads_per_query_process", "reads_per_query_block", "bytes_per_query",
            "io_time_share", "client_cpu_percent", "call_overhead_ms", "resident_index_pages", "device_iops_at_qd", "qps_predicted", "qps_device_bound",
            "prediction_error"]
    g = ok.groupby(["target", *KEYS], dropna=False)
    out = g.agg(repeats=("repeat", "count"), **{c: (c, "median") for c in nums if c in ok},
                regime=("regime", lambda s: ", ".join(sorted(set(s.dropna())))),
                reads_agree=("reads_agree", "all"),
                limited_by=("limited_by", lambda s: ", ".join(sorted({x for x in s.fillna("") if x})))).reset_index()
    out["below_recall_floor"] = out.recall_at_k < floor
    return out
