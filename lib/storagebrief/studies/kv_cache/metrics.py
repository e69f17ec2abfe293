"""kv_cache arithmetic: the run's row from every client's call records, MLPerf's summary, headlines.

Both bandwidths count the same bytes (every storage read and write of the run, all clients):
  MLPerf-style  MLPerf's arithmetic on this study's I/O: the bytes MLPerf's stats would hold at its snapshot ÷
                elapsed_time_s, the wait for the duration as measured (MLPerf's `elapsed_time`,
                benchmark.py:1242-1244, 1398 at 284ce72). The snapshot comes after the tool joins each worker
                for up to 2 s in turn (benchmark.py:1246-1255); a read counts from its start (cache.py:803), a
                write once done (cache.py:723). The other bytes (the rest of the overrun) count in no MLPerf figure.
                MLPerf's storage write figures (bytes, bandwidth, device P95) count only the requests' own writes
                (allocate_cache, cache.py:723-733): a CPU-tier entry demoted to storage (cache.py:380-425) adds to
                none of them. So do ours under MLPerf's names; `storage_write_gib_per_elapsed_s` is the same
                arithmetic with the demotions counted;
  honest        bytes ÷ io_busy_s, the union of wall-clock time in which any client had a storage call in
                flight (from the first call's start to the last call's end, gaps where none was excluded).
overstatement_ratio = MLPerf ÷ honest = io_busy_s ÷ elapsed_time_s. Latencies per call in ms, p50/p95/p99 of every
call of the run: host (read: open + advice + reads + the copy into the host buffer; write: open to close,
fsync included) and device (read: the read() calls; write: the fsync, MLPerf's device span). MLPerf's own
device P95 is the largest of the clients' P95s (its ranks'); ours pools every call. GiB = 2^30 B.
"""
from __future__ import annotations

import os

import numpy as np

from ...core import columns
from ...core.columns import Column
from ...kit import client_check, runs
from ...kit.client_bound import BOUND_FRACTION
from ...kit.latency import bin_edges_us, log2_bin, new_histogram, percentile
from ...report.headlines import versus_reference
from .client import Call
from .workload import GIB

CLIENT_CPU_LIMIT_PERCENT = 85      # the clients' CPU this busy: they, not the storage, set the pace
STORAGE_BUSY_PERCENT = 80          # a storage call in flight this much of the run: the storage set it

COLUMNS: tuple[Column, ...] = (
    Column("workload", "", "the workload (kv_cache.run: an MLPerf closed option or a name of kv_cache.workloads)",
           "text"),
    Column("family", "", "the workload family: mlperf (MLPerf's user model: open-loop users, one worker per user, "
                         "writes bounded by max_concurrent_allocs) or closed-loop (this study's own)", "text"),
    Column("model", "", "the model whose KV cache is written (kv_cache.workload.MODELS or kv_cache.shapes)", "text"),
    Column("kv_bytes_per_token", "bytes", "2 × layers × kv_heads × head_dim × 2 B (fp16)"),
    Column("launcher", "", "fork (processes on this host) or mpi (mpirun ranks)", "text"),
    Column("clients", "", "client processes (or MPI ranks)"),
    Column("users_per_client", "", "simulated users per client"),
    Column("concurrency", "", "requests in flight per client at most (its threads; mlperf: one worker per user)"),
    Column("max_concurrent_allocs", "", "mlperf family: writes in flight per client at most (0: unbounded)"),
    Column("cpu_tier_bytes", "bytes", "the CPU tier's budget per client (0: no CPU tier)"),
    Column("duration_s", "s", "nominal duration: requests start until then"),
    Column("elapsed_time_s", "s", "the wait for the duration as measured (MLPerf's elapsed_time: its denominator)"),
    Column("wall_s", "s", "from the start line until the last request ended"),
    Column("overrun_s", "s", "how long requests ran past the nominal duration"),
    Column("requests", "", "user requests (turns) completed"),
    Column("requests_issued", "", "mlperf family: requests the users enqueued (open loop: whether or not their "
                                  "last one finished)"),
    Column("requests_queued_at_end", "", "mlperf family: requests still waiting for a worker when the duration "
                                         "ended (never started, as in MLPerf's tool)"),
    Column("reload_misses", "", "mlperf family: reads of a cache the capacity LRU had evicted (no I/O)"),
    Column("turn_reload_lookups", "", "mlperf family: earlier turns' caches a request looked up to reload (MLPerf's "
                                      "multi_turn_stats: its hits + misses)"),
    Column("turn_reload_misses", "", "mlperf family: those lookups that found the cache evicted (MLPerf's "
                                     "multi_turn_stats cache_misses)"),
    Column("storage_reads", "", "KV entries read back from storage"),
    Column("storage_writes", "", "KV entries written to storage (requests' and evictions')"),
    Column("storage_read_bytes", "bytes", "bytes read from storage"),
    Column("storage_write_bytes", "bytes", "bytes written to storage (each file fsync'ed)"),
    Column("io_busy_s", "s", "union of the wall-clock time any client had a storage call in flight"),
    Column("io_busy_percent", "%", "io_busy_s ÷ wall_s × 100"),
    Column("snapshot_s", "s", "when MLPerf's tool would take its stats snapshot, from the start: after joining each "
                              "worker busy at the deadline for up to 2 s in turn (at the latest)"),
    Column("mlperf_read_bytes", "bytes", "storage reads started by the snapshot (MLPerf counts a read at its start)"),
    Column("mlperf_write_bytes", "bytes", "the requests' own storage writes done by the snapshot (MLPerf counts a "
                                          "write once done, and no CPU-tier demotion)"),
    Column("demotion_write_bytes_to_snapshot", "bytes", "CPU-tier demotions written to storage by the snapshot (in "
                                                        "no MLPerf figure: the tool's demotion path counts no bytes)"),
    Column("mlperf_read_gib_per_s", "GiB/s", "MLPerf's arithmetic on this study's I/O: mlperf_read_bytes ÷ "
                                             "elapsed_time_s"),
    Column("mlperf_write_gib_per_s", "GiB/s", "MLPerf's arithmetic on this study's I/O: mlperf_write_bytes ÷ "
                                              "elapsed_time_s"),
    Column("storage_write_gib_per_elapsed_s", "GiB/s", "every storage write done by the snapshot, demotions "
                                                       "included, ÷ elapsed_time_s"),
    Column("honest_read_gib_per_s", "GiB/s", "storage_read_bytes ÷ io_busy_s"),
    Column("honest_write_gib_per_s", "GiB/s", "storage_write_bytes ÷ io_busy_s"),
    Column("overstatement_ratio", "", "MLPerf's accounting ÷ the measured rate (io_busy_s ÷ elapsed_time_s; > 1: MLPerf overstates)"),
    *(Column(f"{op}_{span}_ms_{q}", "ms", f"{q} of the {span} span of every storage {op} call "
             + ("(open + advice + reads + host copy)" if (op, span) == ("read", "host") else
                "(the read() calls)" if op == "read" else "(open to close)" if span == "host" else "(the fsync)"))
      for op in ("read", "write") for span in ("host", "device") for q in ("p50", "p95", "p99")),
    Column("mlperf_device_read_p95_ms", "ms", "MLPerf's device read P95: the largest of the clients' P95s"),
    Column("mlperf_device_write_p95_ms", "ms", "MLPerf's device write P95 (fsync) of the requests' own writes "
                                               "(no demotion): the largest of the clients' P95s"),
    Column("cpu_tier_read_hit_ratio", "", "reloads served by the CPU tier ÷ all reloads (empty: no reload)"),
    Column("storage_read_hit_ratio", "", "reloads served by storage ÷ all reloads"),
    Column("cpu_tier_write_ratio", "", "request writes that went to the CPU tier ÷ all request writes"),
    Column("storage_tokens", "", "tokens whose KV cache was read back from storage"),
    Column("honest_storage_tokens_per_s", "tokens/s", "storage_tokens ÷ io_busy_s"),
    Column("storage_tokens_per_elapsed_s", "tokens/s", "storage_tokens ÷ elapsed_time_s (not MLPerf's "
                                                        "storage_throughput_tokens_per_sec: generated tokens ÷ "
                                                        "summed storage latency)"),
    Column("reload_read_gib_per_s", "GiB/s", "one request's reload rate: 1 ÷ slope of a least-squares line of read "
                                             "host time against bytes (all reads of the run), at most the bytes "
                                             "read ÷ the time any read was in flight"),
    Column("reload_latency_ms", "ms", "that line's intercept (≥ 0): a reload's fixed cost"),
    Column("client_cpu_percent", "%", "the clients' CPU time ÷ (wall_s × this host's cores) × 100"),
    Column("limited_by", "", "what set the pace: client CPU (the clients' CPU time ≥ 85 % of the host's cores, or one "
                             "client process at ≥ 85 % of the one core a Python process runs on), "
                             "storage (a storage call in flight ≥ 80 % of the run) or the workload (storage idle "
                             "the rest: CPU-tier hits, client work between requests)", "text"),
    Column("read_cold_method", "", "how each read was made cold (posix_fadvise DONTNEED per entry)", "text"),
    *client_check.COLUMNS,
)
REQUIRED = ("workload", "model", "duration_s")      # a failed run's row has these too (run._columns)
MEASURED = ("io_busy_s", "overrun_s", "mlperf_read_gib_per_s", "honest_read_gib_per_s", "mlperf_write_gib_per_s",
            "honest_write_gib_per_s", "overstatement_ratio", "reload_read_gib_per_s", "reload_latency_ms",
            "limited_by")                            # absent when every run failed: the brief says why each failed
RUNS_COLUMNS = columns.kinds(REQUIRED, COLUMNS, may_be_absent=MEASURED)
LATENCY_TABLE_COLUMNS = ["run_id", "target", "workload", "repeat", "op", "span", "bin_low_us", "bin_high_us", "count"]


def union_s(intervals) -> float:
    """Total length of the union of [start, end] intervals."""
    total, end = 0.0, -np.inf
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _pct(values_s, q) -> float | None:
    return percentile(values_s, q, 1e3)


def reload_fit(sizes, seconds, most_bytes_per_s: float | None = None) -> tuple[float | None, float]:
    """(bytes/s, latency s) of `seconds = latency + bytes / rate` by least squares over the reads; through the
    origin (latency 0) when the sizes do not vary or the free line has no positive slope and intercept. A rate
    above `most_bytes_per_s` (what the target delivered to all reads together) is one the target never showed: the
    rate is held there and the latency refitted (the mean of seconds − bytes ÷ rate, ≥ 0)."""
    b, t = np.asarray(sizes, float), np.asarray(seconds, float)
    if not len(b) or t.sum() <= 0:
        return None, 0.0
    rate, lat = float((b * b).sum() / (b * t).sum()), 0.0
    if len(set(b.tolist())) > 1:
        slope, icpt = np.polyfit(b, t, 1)
        if slope > 0 and icpt >= 0:
            rate, lat = 1 / slope, float(icpt)
    if most_bytes_per_s and rate > most_bytes_per_s:
        rate = float(most_bytes_per_s)
        lat = max(0.0, float((t - b / rate).mean()))
    return rate, lat


def _open_loop(ranks: list[dict]) -> dict:
    """The mlperf family's queue figures, summed over the clients (absent for the closed loop)."""
    keys = {"requests_issued": "issued", "requests_queued_at_end": "queued_at_end", "reload_misses": "misses",
            "turn_reload_lookups": "turn_lookups", "turn_reload_misses": "turn_misses"}
    if not ranks or "issued" not in ranks[0]:
        return {}
    return {col: sum(int(c.get(k, 0)) for c in ranks) for col, k in keys.items()}


JOIN_TIMEOUT_S = 2.0              # MLPerf's thread.join(timeout=2.0) per thread after the deadline (benchmark.py:1248)


def snapshot_time(recs, deadline: float) -> float:
    """When MLPerf's tool would snapshot its stats: at the deadline it joins its workers one after another, each for
    up to 2 s; a worker busy then finishes its request first. Busy workers here: the users (per client) with a call
    ending after the deadline, joined in the order they finish (the latest snapshot any join order gives)."""
    finish: dict = {}
    for r in recs:
        if r.end > deadline:
            finish[(r.rank, r.user)] = max(finish.get((r.rank, r.user), r.end), r.end)
    t = deadline
    for f in sorted(finish.values()):
        if f > t:
            t = min(f, t + JOIN_TIMEOUT_S)
    return t


def limited_by(client_cpu_percent: float, io_busy_percent: float, busiest: tuple[int, float] | None = None) -> str:
    """What set the pace, with the figure that says so (the Column's meaning gives the thresholds). `busiest`:
    (client, the cores it used): a Python client keeps at most one core busy (kit/client_bound), so one client at
    BOUND_FRACTION of it set the pace though the host's other cores idled."""
    if client_cpu_percent >= CLIENT_CPU_LIMIT_PERCENT:
        return f"client CPU ({client_cpu_percent:.0f} % busy)"
    if busiest is not None and busiest[1] >= BOUND_FRACTION:
        return f"client CPU (client {busiest[0]} at {busiest[1]:.2f} of its one core)"
    if io_busy_percent >= STORAGE_BUSY_PERCENT:
        return f"storage (I/O in flight {io_busy_percent:.0f} %)"
    return f"workload (I/O in flight {io_busy_percent:.0f} %)"


def _busiest(result: dict, wall: float) -> tuple[int, float] | None:
    """(client, cores used) of the client process that used the most CPU over the run."""
    ranks = [c for c in result["ranks"] if c.get("cpu_s") is not None]
    if not ranks or wall <= 0:
        return None
    top = max(ranks, key=lambda c: c["cpu_s"])
    return int(top.get("rank", 0)), top["cpu_s"] / wall


def calls(rank: dict) -> list[Call]:
    """A client's call records, named (they arrive as plain tuples or JSON lists: client.Call)."""
    return [Call(*r) for r in rank["records"]]


def run_row(spec: dict, result: dict) -> dict:
    """The run's figures from every client's records ({t_start, ranks: [{records, cpu_s, rank}]})."""
    recs = [r for c in result["ranks"] for r in calls(c)]
    t0, nominal = result["t_start"], spec["duration_s"]
    elapsed = max([c.get("elapsed_s") or nominal for c in result["ranks"]], default=nominal)
    st = [r for r in recs if r.tier == "storage"]
    reads = [r for r in st if r.op == "read"]
    writes = [r for r in st if r.op == "write"]
    busy = union_s([(r.start, r.end) for r in st])
    t_end = max([r.end for r in recs], default=t0)
    wall = max(t_end - t0, 1e-9)
    rbytes, wbytes = sum(r.nbytes for r in reads), sum(r.nbytes for r in writes)
    snap = snapshot_time(st, t0 + elapsed)
    mlperf_r = sum(r.nbytes for r in reads if r.start <= snap)
    done_w = [r for r in writes if r.end <= snap]
    mlperf_w = sum(r.nbytes for r in done_w if r.user >= 0)      # MLPerf counts no demotion (user -1)
    demoted_w = sum(r.nbytes for r in done_w if r.user < 0)
    all_reads = [r for r in recs if r.op == "read"]
    req_writes = [r for r in recs if r.op == "write" and r.user >= 0]
    cpu_s = sum(c["cpu_s"] for c in result["ranks"])
    cpu_pct = cpu_s / (wall * (os.cpu_count() or 1)) * 100
    read_busy = union_s([(r.start, r.end) for r in reads])
    rate, lat = reload_fit([r.nbytes for r in reads], [r.end - r.start for r in reads],
                           rbytes / read_busy if read_busy else None)
    tokens = sum(r.tokens for r in reads)
    row = {"duration_s": nominal, "elapsed_time_s": elapsed, "wall_s": wall,
           "overrun_s": max(0.0, t_end - (t0 + nominal)),
           "requests": len(req_writes), **_open_loop(result["ranks"]), "storage_reads": len(reads), "storage_writes": len(writes),
           "storage_read_bytes": rbytes, "storage_write_bytes": wbytes, "io_busy_s": busy,
           "io_busy_percent": busy / wall * 100,
           "snapshot_s": snap - t0, "mlperf_read_bytes": mlperf_r, "mlperf_write_bytes": mlperf_w,
           "demotion_write_bytes_to_snapshot": demoted_w,
           "mlperf_read_gib_per_s": mlperf_r / elapsed / GIB, "mlperf_write_gib_per_s": mlperf_w / elapsed / GIB,
           "storage_write_gib_per_elapsed_s": (mlperf_w + demoted_w) / elapsed / GIB,
           "honest_read_gib_per_s": rbytes / busy / GIB if busy else None,
           "honest_write_gib_per_s": wbytes / busy / GIB if busy else None,
           "overstatement_ratio": busy / elapsed if busy else None,
           "cpu_tier_read_hit_ratio": (len(all_reads) - len(reads)) / len(all_reads) if all_reads else None,
           "storage_read_hit_ratio": len(reads) / len(all_reads) if all_reads else None,
           "cpu_tier_write_ratio": (sum(1 for r in req_writes if r.tier == "cpu") / len(req_writes)
                                    if req_writes else None),
           "storage_tokens": tokens, "honest_storage_tokens_per_s": tokens / busy if busy else None,
           "storage_tokens_per_elapsed_s": tokens / elapsed,
           "reload_read_gib_per_s": rate / GIB if rate else None, "reload_latency_ms": lat * 1e3,
           "client_cpu_percent": cpu_pct, "limited_by": limited_by(cpu_pct, busy / wall * 100, _busiest(result, wall)),
           "read_cold_method": "posix_fadvise DONTNEED per entry (after its fsync and before its read)"}
    for op, done in (("read", reads), ("write", writes)):
        host = [r.end - r.start for r in done]
        dev = [r.device_s for r in done]
        for q in (50, 95, 99):
            row[f"{op}_host_ms_p{q}"] = _pct(host, q)
            row[f"{op}_device_ms_p{q}"] = _pct(dev, q)
        own = [r for r in done if r.user >= 0]                    # MLPerf's latencies: no demotion either
        per_client = [_pct([r.device_s for r in own if r.rank == c["rank"]], 95) for c in result["ranks"]]
        per_client = [p for p in per_client if p is not None]
        row[f"mlperf_device_{op}_p95_ms"] = max(per_client) if per_client else None
    return row


def latency_rows(result: dict) -> list[dict]:
    """log2 histograms (kit.latency) of every storage call's host and device span, per op."""
    hists: dict = {}
    for c in result["ranks"]:
        for r in calls(c):
            if r.tier != "storage":
                continue
            for span, s in (("host", r.end - r.start), ("device", r.device_s)):
                h = hists.setdefault((r.op, span), new_histogram())
                h[log2_bin(int(s * 1e9))] += 1
    return [{"op": op, "span": span, "bin_low_us": bin_edges_us(i)[0], "bin_high_us": bin_edges_us(i)[1],
             "count": n} for (op, span), h in sorted(hists.items()) for i, n in enumerate(h) if n]


# MLPerf's output structure (kv_cache_benchmark at 284ce72): summary, benchmark.py:1422-1466; cache_stats,
# cache.py:953-1024. Only keys whose meaning this study's I/O can carry are written.
MLPERF_SOURCE = ("MLPerf Storage kv_cache_benchmark, upstream commit 284ce72: summary = benchmark.py:1422-1466, "
                 "cache_stats = cache.py:953-1024")


def _num(r, key: str, default=0.0) -> float:
    """A row's figure; `default` where a runs.csv written before the column existed lacks it."""
    v = r.get(key, default)
    return default if v is None or v != v else float(v)


def mlperf_summary(frame) -> dict:
    """Per run (mlperf_tree.py's KV tool file and storagebrief.json): MLPerf's own key paths (summary.*, summary.cache_stats.*) with MLPerf's
    arithmetic on this study's I/O (bytes ÷ the measured wait; `_gbps` holds GiB/s, `_gb` GiB, as MLPerf's do), and
    this study's own figures under `storagebrief`, under names MLPerf does not use."""
    out: dict = {"note": "MLPerf's arithmetic on this study's I/O, not MLPerf's tool: summary.* and "
                         "summary.cache_stats.* are MLPerf's key paths (bytes ÷ elapsed_time, the measured wait; "
                         "'_gbps' = GiB/s, '_gb' = GiB); the storage write keys count the requests' own writes, no CPU-tier "
                         "demotion, as the tool's do (storagebrief.storage_write_gib_per_elapsed_s counts them). "
                         "storagebrief.* = this study's own figures (honest = bytes ÷ the time any storage call was "
                         "in flight; the device P95s span the read() calls / the fsync, the largest of the clients' "
                         "P95s: MLPerf's storage_*_device_p95_ms are one P95 of every request, its read span np.load, "
                         "allocation included, so they are not written under MLPerf's keys).",
                         "source": MLPERF_SOURCE, "runs": {}}
    ok = runs.ok_runs(client_check.unchecked(frame)) if len(frame) else frame
    for _, r in ok.iterrows():
        elapsed = float(r.elapsed_time_s)
        out["runs"][r.run_id] = {
            "target": r.target, "workload": r.workload, "model": r.model,
            "summary": {
                "total_requests": int(r.requests), "elapsed_time": elapsed,
                "requests_per_second": int(r.requests) / elapsed,
                "cache_stats": {
                    "tier_storage_kv_bytes_read_gb": r.mlperf_read_bytes / GIB,
                    "tier_storage_kv_bytes_written_gb": r.mlperf_write_bytes / GIB,
                    "tier_storage_read_bandwidth_gbps": r.mlperf_read_gib_per_s,
                    "tier_storage_write_bandwidth_gbps": r.mlperf_write_gib_per_s}},
            "storagebrief": {
                "users": int(r.users_per_client) * int(r.clients), "nominal_duration_s": r.duration_s,
                "honest_read_gib_per_s": r.honest_read_gib_per_s, "honest_write_gib_per_s": r.honest_write_gib_per_s,
                "io_busy_s": r.io_busy_s, "wall_s": r.wall_s, "overstatement_ratio": r.overstatement_ratio,
                "storage_tokens_per_elapsed_s": r.storage_tokens_per_elapsed_s,
                "read_device_p95_ms_max_of_clients": r.mlperf_device_read_p95_ms,
                "write_device_p95_ms_max_of_clients": r.mlperf_device_write_p95_ms,
                # beside MLPerf's tier_storage_write_*: the same arithmetic with the CPU tier's demotions counted
                "demotion_write_gib_to_snapshot": _num(r, "demotion_write_bytes_to_snapshot") / GIB,
                "storage_write_gib_per_elapsed_s": _num(r, "storage_write_gib_per_elapsed_s",
                                                        r.mlperf_write_gib_per_s)}}
    return out


def headlines(frame, target_names: list[str]) -> list[dict]:
    frame = client_check.unchecked(frame)
    return versus_reference(runs.ok_runs(frame) if len(frame) else frame, target_names, ["workload"],
                            [("honest_read_gib_per_s", "higher", "KV-cache reload (measured read GiB/s)"),
                             ("honest_write_gib_per_s", "higher", "KV-cache offload (measured write GiB/s)"),
                             ("read_host_ms_p95", "lower", "KV-cache reload P95 latency")])


def _per_target(g) -> dict:
    return {w: {k: float(x[k].mean()) for k in ("mlperf_read_gib_per_s", "honest_read_gib_per_s",
                                                 "mlperf_write_gib_per_s", "honest_write_gib_per_s")}
            for w, x in g.groupby("workload")}


def metrics(frame, target_names: list[str]) -> dict:
    out = runs.metrics(client_check.unchecked(frame), target_names, headlines, _per_target)
    for c in client_checks(frame):
        out.setdefault(c["target"], {}).setdefault(c["workload"], {})["client_check"] = {
            k: c[k] for k in ("client_bound", "verdict", "cpus_confined", "cpus_all", "confinement", "text")}
    return out


# --------------------------------------------------------------------------- the client check
# The figures the headline and page 1's break-even rest on, compared run by run (kit/client_check.py).
CHECK_FIGURES = {"honest_read_gib_per_s": "measured read GiB/s", "honest_write_gib_per_s": "measured write GiB/s",
                 "reload_read_gib_per_s": "reload GiB/s"}


def client_checks(frame) -> list[dict]:
    """Per workload and target re-run with the clients on half the CPUs: its confined runs against the point's
    own runs on all CPUs (its repeats and the check's unconfined re-runs)."""
    ok = runs.ok_runs(frame) if len(frame) else frame
    return client_check.verdicts(ok, ["workload", "target"],
                                 lambda rows: {w: [float(x) for x in rows[k].dropna()] for k, w in CHECK_FIGURES.items()},
                                 lambda k: f"{k[1]}, {k[0]}")
