"""object_sweep arithmetic: per-point table (repeats merged, with their spread), directory-vs-S3 pairs on one
device, headline deltas and metrics.json."""
from __future__ import annotations

import pandas as pd

from ...core import columns
from ...core.columns import Column
from ...kit import runs as kit_runs
from ...report.headlines import versus_reference
from ...core.targets import same_device_pairs

KEYS = ["load", "op", "object_bytes", "concurrency"]


COLUMNS: tuple[Column, ...] = (
    Column("load", "", "idle | busy (stress-ng at busy.cpu_percent of every CPU beside the client)", "text"),
    Column("op", "", "get | put", "text"),
    Column("object_bytes", "bytes", "size of every object (file) of the point"),
    Column("object_label", "", "the object size as a label (64K, 1M; K = 1,024 B)", "text"),
    Column("concurrency", "", "requests in flight (client threads, one connection each)"),
    Column("kind", "", "directory | s3: the target's kind", "text"),
    Column("access", "", "files | S3 local gateway | S3 external", "text"),
    Column("objects", "", "objects moved in the measured batch"),
    Column("bytes_moved", "bytes", "objects x object_bytes"),
    Column("wall_seconds", "s", "the batch's wall time, first request sent to last completed"),
    Column("throughput_mb_per_s", "MB/s", "bytes_moved / wall_seconds / 10⁶"),
    Column("objects_per_s", "objects/s", "objects / wall_seconds"),
    Column("latency_ms_p50", "ms", "median request latency (request sent to last body byte)"),
    Column("latency_ms_p99", "ms", "99th percentile request latency"),
    Column("latency_ms_mean", "ms", "mean request latency"),
    Column("latency_ms_max", "ms", "slowest request"),
    Column("client_cpu_seconds", "s", "the client process's user + system CPU during the batch"),
    Column("client_cpu_s_per_gb", "s/GB", "client CPU seconds per 10⁹ bytes moved"),
    Column("client_cpu_percent_of_machine", "%", "client CPU / (wall x CPUs)"),
    Column("gateway_cpu_seconds", "s", "the local gateway's (versitygw) user + system CPU during the batch"),
    Column("gateway_cpu_s_per_gb", "s/GB", "gateway CPU seconds per 10⁹ bytes moved"),
    Column("client_processes", "", "client processes that moved the batch (each measured on its own)"),
    Column("client_cores_used_max", "cores", "the busiest client process's CPU seconds / wall seconds"),
    Column("client_usable_cores", "cores", "cores the client processes can use together: one per interpreter-bound "
           "(Python) process, else its threads, capped by affinity and cgroup quota (kit/client_bound)"),
    Column("limited_by", "", "client CPU (a client process used, or was ready to use, ≥ 85 % of its usable cores: "
           "its busiest thread's run-queue time, or a thread of it on a CPU or ready in that share of 20-ms samples; or "
           "the pool of client processes ≥ 85 % of the cores they can use together; or the client ≥ 80 % of all "
           "CPUs; however busy the machine was) | client + gateway CPU (together ≥ 80 % of all CPUs, the client at "
           "the CPU it wanted) | machine CPU (every CPU ≥ 90 % busy, the busy load or other work, the client below "
           "its own ceiling): the CPU, not the storage, set the figure; empty otherwise", "text"),
    Column("limited_by_reason", "", "the evidence: each client process's CPU over the wall time against its usable "
           "cores and its sampled readiness; the local gateway's CPU, or 'not measured (external)'", "text"),
    Column("reference_mb_per_s", "MB/s", "the compiled reference client (benchmarks/s3ref, Go with minio-go) on the "
           "same keys and cold state, when object_sweep.reference_client is on (idle points, local gateway)"),
    Column("reference_client_cpu_s_per_gb", "s/GB", "the reference client's CPU seconds per 10⁹ bytes moved"),
    Column("reference_order", "", "before | after: the reference batch ran before or after ours (alternating by "
           "repeat)", "text"),
    Column("study_to_reference", "", "throughput_mb_per_s / reference_mb_per_s: below 1, our client gave less than "
           "the store gives a compiled client"),
    Column("errors", "", "failed requests (a failure stops the run, so 0 in a written row)"),
    Column("throttled", "", "True when the device I/O ran inside the target's throttle cgroup", "bool"),
)
RUNS_COLUMNS = columns.kinds((
    "load", "op", "object_bytes", "concurrency", "kind", "throughput_mb_per_s", "objects_per_s",
    "latency_ms_p50", "latency_ms_p99", "client_cpu_s_per_gb", "limited_by"), COLUMNS)


def headlines(frame, target_names: list[str]) -> list[dict]:
    return versus_reference(kit_runs.ok_runs(frame), target_names, KEYS,
                            [("throughput_mb_per_s", "higher", "throughput MB/s"),
                             ("latency_ms_p99", "lower", "p99 request latency")])


def metrics(frame, target_names: list[str]) -> dict:
    def per_target(g):
        get = g[g.op == "get"]
        return {"best_get_mb_per_s": float(get.throughput_mb_per_s.max()) if len(get) else None,
                "client_cpu_s_per_gb_median": float(g.client_cpu_s_per_gb.median())}
    return kit_runs.metrics(frame, target_names, headlines, per_target=per_target)


def points(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per target and point: median over repeats, with min and max (the spread) beside it."""
    ok = kit_runs.ok_runs(frame)
    if ok.empty:
        return pd.DataFrame()
    g = ok.groupby(["target", "kind", "access", *KEYS], dropna=False)
    ref = {"reference_mb_per_s": ("reference_mb_per_s", "median"),
           "study_to_reference": ("study_to_reference", "median")} if "reference_mb_per_s" in ok else {}
    out = g.agg(repeats=("repeat", "count"),
                throughput_mb_per_s=("throughput_mb_per_s", "median"),
                throughput_mb_per_s_min=("throughput_mb_per_s", "min"),
                throughput_mb_per_s_max=("throughput_mb_per_s", "max"),
                objects_per_s=("objects_per_s", "median"),
                latency_ms_p50=("latency_ms_p50", "median"),
                latency_ms_p99=("latency_ms_p99", "median"),
                latency_ms_p99_max=("latency_ms_p99", "max"),
                client_cpu_s_per_gb=("client_cpu_s_per_gb", "median"),
                gateway_cpu_s_per_gb=("gateway_cpu_s_per_gb", "median"),
                limited_by=("limited_by", lambda s: ", ".join(sorted({x for x in s.fillna("") if x}))), **ref)
    return out.reset_index()


def pairs(frame: pd.DataFrame, targets) -> pd.DataFrame:
    """Directory vs S3 on the same device at like size, concurrency, op and load: medians and the ratio."""
    pts = points(frame)
    rows = []
    for d, s in same_device_pairs(targets):
        a = pts[pts.target == d].set_index(KEYS)
        b = pts[pts.target == s].set_index(KEYS)
        for key in a.index.intersection(b.index):
            da, sb = a.loc[key], b.loc[key]
            rows.append({"directory_target": d, "s3_target": s, **dict(zip(KEYS, key)),
                         "directory_mb_per_s": da.throughput_mb_per_s, "s3_mb_per_s": sb.throughput_mb_per_s,
                         "s3_vs_directory": sb.throughput_mb_per_s / da.throughput_mb_per_s
                         if da.throughput_mb_per_s else None,
                         "directory_latency_ms_p99": da.latency_ms_p99, "s3_latency_ms_p99": sb.latency_ms_p99,
                         "directory_client_cpu_s_per_gb": da.client_cpu_s_per_gb,
                         "s3_client_cpu_s_per_gb": sb.client_cpu_s_per_gb,
                         "s3_gateway_cpu_s_per_gb": sb.gateway_cpu_s_per_gb,
                         "limited_by": ", ".join(x for x in (f"directory: {da.limited_by}" if da.limited_by else "",
                                                             f"S3: {sb.limited_by}" if sb.limited_by else "") if x)})
    cols = ["directory_target", "s3_target", *KEYS, "directory_mb_per_s", "s3_mb_per_s", "s3_vs_directory",
            "directory_latency_ms_p99", "s3_latency_ms_p99", "directory_client_cpu_s_per_gb",
            "s3_client_cpu_s_per_gb", "s3_gateway_cpu_s_per_gb", "limited_by"]
    return pd.DataFrame(rows, columns=cols)
