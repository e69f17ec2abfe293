"""emulate arithmetic: AU and timing from per-step timestamps, read latencies, the throttle's bound,
and on runs.csv the MLPerf Storage rule, headlines, metrics.json and mlperf_results.json.

AU % = compute time ÷ wall time over the measured steps (the AU window), nothing
subtracted, as MLPerf Storage and DLIO define it: an accelerator that is late
because the client machine is saturated is late. The emulator's own delays (the
sleep overshoot of the accelerator that closed each step and the barrier's release
latency) are measured per step and reported beside it (`emulator_overhead_s`,
`au_percent_overhead_removed`), never taken out of `au_percent`. What limited each
run (storage, the client, neither) is classified in limits.py. A storage system
supports the largest number of accelerators whose AU stays at or above the
workload's threshold (MLPerf Storage). MB = 10^6 bytes, MiB = 2^20 bytes.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...core import columns
from ...core.columns import Column
from ...kit import client_check, runs
from ...kit.latency import stats
from ...report.headlines import versus_reference
from .mlperf import verdicts as mlperf_verdicts
from .limits import client_checks, client_cpu_columns, plain_records, supported
from .plan import measured
from .window import au_window, bytes_in_window

LAT_BINS_PER_DECADE = 20
LAT_EDGES_US = np.logspace(0, 8, 8 * LAT_BINS_PER_DECADE + 1)   # 1 us .. 100 s
# Every column this study's rows can hold, beyond the engine's and the monitor's (core.columns).
COLUMNS: tuple[Column, ...] = (
    Column("workload", "", "DLIO workload (unet3d, resnet50, cosmoflow, ... or a custom one)", "text"),
    Column("accelerator_type", "", "emulated accelerator (v100, a100, h100): its compute time per batch", "text"),
    Column("accelerators", "", "emulated accelerators in the run (N)"),
    Column("search_step", "", "accelerators: auto: the search's probe this run belongs to (1-based); empty: a fixed list"),
    Column("search_phase", "", "accelerators: auto: doubling (1, 2, 4, ...) or bisect (between pass and fail)", "text"),
    Column("search_elapsed_s", "s", "accelerators: auto: seconds of this search's runs so far, this one included"),
    Column("search_budget_s", "s", "accelerators: auto: the search's time budget (emulate.search_budget_s)"),
    Column("search_max", "", "accelerators: auto: the largest N the search probes on this target (emulate.search_max, "
                             "or fewer: search_max_by)"),
    Column("search_max_by", "", "what set search_max: search_max (the parameter) or memory (the most accelerators "
                                "whose reads fit the page-cache cap, emulate/memory.py)", "text"),
    Column("launcher", "", "fork: processes on this host; mpi: MPI ranks on mpirun's hosts", "text"),
    Column("hosts", "", "client hosts the accelerators ran on"),
    Column("host_roles", "", "every host of the run and its role: 'launcher <host>; ranks <host> ×N, …'", "text"),
    Column("dataset_sizing", "", "how the page cache was kept out of the measurement", "text"),
    Column("memory_limit_bytes", "bytes", "the page-cache cap (memory cgroup limit); empty: not capped"),
    Column("odirect", "", "reads bypassed the page cache (O_DIRECT)", "bool"),
    Column("num_files", "", "files in the workload's dataset"),
    Column("dataset_bytes", "bytes", "bytes of the workload's dataset"),
    Column("sample_bytes_mean", "bytes", "mean bytes of one sample"),
    Column("batch_size", "", "samples per batch per accelerator"),
    Column("compute_s", "s", "emulated compute time per batch"),
    Column("epochs", "", "passes over the dataset"),
    Column("steps_per_epoch", "", "synchronous steps per epoch"),
    Column("steps", "", "synchronous steps in the run"),
    Column("read_threads", "", "loader read threads per accelerator"),
    Column("prefetch", "", "batches prefetched per read thread"),
    Column("read_block_bytes", "bytes", "size of one read call"),
    Column("readahead", "", "kernel readahead left on for the dataset files", "bool"),
    Column("demand_mb_per_s_per_accelerator", "MB/s", "read rate one accelerator needs to stay busy"),
    Column("demand_samples_per_s", "samples/s", "samples per second N accelerators consume when never waiting"),
    Column("cgroup_read_kib_per_request_au_window", "KiB", "mean device request of the run's cgroup in the AU window"),
    Column("cgroup_read_mb_per_s_au_window", "MB/s", "the run's own device reads in the AU window (cgroup counters)"),
    Column("throttle_cap_mb_per_s", "MB/s", "read rate the throttle allows at that request size; empty: unthrottled"),
    Column("throttle_au_bound_percent", "%", "AU the throttle allows: min(100, cap / (N x demand))"),
    Column("au_threshold_percent", "%", "the workload's AU threshold (MLPerf Storage)"),
    Column("au_pass", "", "au_percent at or above the threshold", "bool"),
    Column("au_percent", "%", "accelerator utilization: compute / wall time over the AU window"),
    Column("au_percent_overhead_removed", "%", "AU with the emulator's own delays removed (not the figure)"),
    Column("au_window_steps", "", "steps AU covers"),
    Column("au_window_min_steps", "", "the fewest steps AU's window needs to be a measurement: 2 x read_threads x "
                                      "(prefetch + 1) (window.py)"),
    Column("loader_bytes_au_window", "bytes", "bytes the loaders read inside the AU window (each batch's read "
                                              "prorated by its part inside it)"),
    Column("au_claimed_bytes_au_window", "bytes", "bytes AU says the accelerators consumed in the window: AU x N x "
                                                  "demand x the window's seconds"),
    Column("au_read_support_ratio", "", "loader_bytes_au_window / au_claimed_bytes_au_window"),
    Column("au_supported_by_reads", "", "the loaders read what AU claims in the window, within 10 % (window.py)",
           "bool"),
    Column("au_measured", "", "AU is a measurement: window >= au_window_min_steps and supported by reads; false: it "
                              "cannot pass (limited_by unmeasured)", "bool"),
    Column("au_warmup_steps", "", "steps left out of AU at the start"),
    Column("au_drain_steps", "", "steps left out of AU at the end"),
    Column("au_own_percent_min", "%", "lowest per-accelerator AU from its own data waits"),
    Column("au_own_percent_mean", "%", "mean per-accelerator AU from its own data waits"),
    Column("total_time_s", "s", "time from the start to the last step's end"),
    Column("measured_time_s", "s", "wall time of the AU window"),
    Column("samples", "", "samples consumed by all accelerators"),
    Column("samples_per_s", "samples/s", "training sample throughput over the AU window"),
    Column("compute_overshoot_s_total", "s", "sleep overshoot of the emulated compute, all accelerators"),
    Column("compute_overshoot_us_mean", "µs", "mean sleep overshoot per step and accelerator"),
    Column("barrier_release_s_total", "s", "barrier release latency, all steps"),
    Column("emulator_overhead_s", "s", "the emulator's own delays in the AU window (counted in AU)"),
    Column("data_wait_s_total", "s", "time the accelerators waited for a batch, summed"),
    Column("loader_bytes", "bytes", "bytes the loaders read"),
    Column("loader_read_mb_per_s", "MB/s", "loader read rate (10^6 B) over the run"),
    Column("loader_read_mib_per_s", "MiB/s", "loader read rate (2^20 B) over the run"),
    Column("reads", "", "read calls of the loaders"),
    Column("read_latency_us_*", "µs", "per read call latency as the loaders saw it: _mean, _p50, _p90, _p99, _max"),
    Column("checkpoints", "", "checkpoints written"),
    Column("checkpoint_s_total", "s", "time spent writing checkpoints, all accelerators"),
    Column("client_cpu_s", "s", "user + system CPU seconds of the accelerator processes and, on S3, "
                                         "their compiled clients (objects.py)"),
    Column("client_cpu_s_per_step", "s", "client CPU seconds per synchronous step"),
    Column("client_cpu_s_per_gb", "s", "client CPU seconds per 10^9 bytes read"),
    Column("client_cores", "", "CPUs the accelerators may run on"),
    Column("client_cpu_percent_of_cores", "%", "client CPU time as a share of those CPUs over the run"),
    Column("client_cpu_cores_busiest_accelerator", "", "the busiest accelerator process's own CPU seconds (its "
                                                        "compiled S3 client's not counted) over the run's time (cores; "
                                                        "a Python process runs on one: kit/client_bound)"),
    Column("client_busiest_accelerator", "", "that accelerator's rank"),
    Column("access", "", "how the loaders read: files, S3 local gateway or S3 external (GETs: objects.py)", "text"),
    Column("gateway_cpu_s", "s", "S3 local gateway: its user + system CPU seconds over the run"),
    Column("gateway_cpu_s_per_gb", "s", "S3 local gateway: its CPU seconds per 10^9 bytes the loaders read"),
    Column("client_gateway_cpu_percent_of_machine", "%", "S3 local gateway: client + gateway CPU, share of all CPUs"),
    Column("limited_by", "", "what limited the run: none, storage, client, unexplained (limits.py); unmeasured: "
           "a passing AU that was no measurement (window.py); "
           "object store failed: a failed S3 run", "text"),
    Column("limited_by_reason", "", "the evidence for limited_by, in words", "text"),
    Column("cpu_busy_percent_max_core", "%", "busiest core's busy share over the run (all processes)"),
    Column("cpu_busy_percent_min_core", "%", "least busy core's busy share over the run"),
    Column("device_read_latency_us_idle", "µs", "the idle device's mean read latency per request, before the sweep"),
    *client_check.COLUMNS,
    Column("mlperf_run", "", "emulate.mlperf_rules: warm-up (left out of every figure) or scored; empty otherwise", "text"),
    Column("cgroup_read_bytes", "bytes", "the run's own device reads (cgroup counters)"),
    Column("cgroup_read_requests", "", "the run's own device read requests"),
    Column("cgroup_read_kib_per_request", "KiB", "mean device request of the run's cgroup"),
    Column("cgroup_read_mb_per_s", "MB/s", "the run's own device read rate over the run"),
    Column("cgroup_read_mb_per_s_max", "MB/s", "largest sampling interval of that rate"),
    Column("device_bytes_per_loader_byte", "", "cgroup device bytes per byte the loaders read"),
    Column("memory_peak_bytes", "bytes", "peak memory of the run's cgroup (page cache included)"),
    Column("memory_failcnt", "", "times the cgroup hit its memory limit"),
    Column("oom_kills", "", "processes of the cgroup killed for memory"),
)
# The runs.csv columns this study's brief and arithmetic use unconditionally (kind: text / number); the
# brief's gate (brief/inputs.py) refuses a runs.csv without them, so the code below may assume them.
REQUIRED = ("workload", "accelerators", "steps", "epochs", "num_files", "dataset_bytes", "batch_size", "compute_s",
            "read_threads", "prefetch", "au_percent", "au_threshold_percent", "samples_per_s", "total_time_s",
            "demand_mb_per_s_per_accelerator", "loader_read_mb_per_s")
RUNS_COLUMNS = columns.kinds(REQUIRED, COLUMNS)


# --------------------------------------------------------------------------- one run
def job_metrics(times: np.ndarray, compute_s: float, batch: int, t_start: float,
                window: tuple[int, int] | None = None) -> dict:
    """AU and timing from per-step timestamps, shape (accelerators, steps, 5).

    Columns per step: t0 batch wanted, t1 batch in hand, t2 compute done,
    t3 at barrier, t4 released. Step boundaries are the barrier releases (the
    same instant for every accelerator up to release latency). AU and samples/s
    cover the steps in `window` ([first, stop); default: all but the first step).
    """
    n, steps, _ = times.shape
    first, stop = window if window is not None else ((1, steps) if steps > 1 else (0, steps))
    release = times[:, :, 4].max(axis=0)                 # step ends (last accelerator out)
    last_in = times[:, :, 3].max(axis=0)                 # last arrival at the barrier
    closer = times[:, :, 3].argmax(axis=0)               # accelerator that closed each step
    overshoot = (times[:, :, 2] - times[:, :, 1]) - compute_s
    release_lat = np.clip(release - last_in, 0, None)
    crit_overshoot = np.clip(overshoot[closer, np.arange(steps)], 0, None)
    bounds = np.concatenate([[t_start], release])
    wall = np.diff(bounds)                               # step wall time, job view
    overhead = np.minimum(crit_overshoot + release_lat, wall)
    data_wait = times[:, :, 1] - times[:, :, 0]
    peer_wait = times[:, :, 4] - times[:, :, 3]
    m = slice(first, stop)
    k = stop - first
    measured = float(wall[m].sum())
    removed = measured - float(overhead[m].sum())
    compute = compute_s * k
    own = 100.0 * compute / (compute + data_wait[:, m].sum(axis=1))
    return {
        "total_time_s": float(release[-1] - t_start),
        "measured_time_s": measured,
        "au_percent": min(100.0, 100.0 * compute / measured) if measured > 0 else 0.0,
        "au_percent_overhead_removed": min(100.0, 100.0 * compute / removed) if removed > 0 else 0.0,
        "au_window_steps": int(k),
        "au_warmup_steps": int(first),                    # left out at the start ...
        "au_drain_steps": int(steps - stop),              # ... and at the end
        "au_own_percent": own,                            # per accelerator: compute / (compute + own data wait)
        "samples": int(n * batch * steps),
        "samples_per_s": n * batch * k / measured if measured > 0 else float("nan"),
        "steps": int(steps),
        "compute_overshoot_s_total": float(np.clip(overshoot, 0, None).sum()),
        "compute_overshoot_us_mean": float(overshoot.mean() * 1e6),
        "barrier_release_s_total": float(release_lat.sum()),
        "emulator_overhead_s": float(overhead[m].sum()),  # measured, not subtracted from au_percent
        "window_t": (float(bounds[first]), float(bounds[stop])),   # perf_counter instants of the window
        "data_wait_s": data_wait.sum(axis=1),             # per accelerator
        "peer_wait_s": peer_wait.sum(axis=1),
        "overshoot_s": np.clip(overshoot, 0, None).sum(axis=1),
    }


def latency_stats(lat_s: np.ndarray, prefix: str = "read_latency_us") -> dict:
    return stats(lat_s, prefix, ("mean", "p50", "p90", "p99", "max"), 1e6, empty=float("nan"))


def latency_histogram(lat_s: np.ndarray) -> list[dict]:
    counts, _ = np.histogram(np.clip(lat_s.astype(np.float64) * 1e6, 1, 1e8 - 1), bins=LAT_EDGES_US)
    return [{"bin_lo_us": float(LAT_EDGES_US[i]), "bin_hi_us": float(LAT_EDGES_US[i + 1]), "count": int(c)}
            for i, c in enumerate(counts) if c]


def throttle_cap_mb_per_s(profile, request_bytes: float | None = None) -> float:
    """Read rate the throttle allows: min(bandwidth cap, IOPS cap x request size); NaN if uncapped.

    The IOPS cap binds when requests are small: a 1 MiB read split by the
    device's segment limit counts as two requests.
    """
    if profile is None:
        return float("nan")
    caps = []
    if profile.read_mb_per_s:
        caps.append(float(profile.read_mb_per_s))
    if profile.read_iops and request_bytes:
        caps.append(profile.read_iops * request_bytes / 1e6)
    return min(caps) if caps else float("nan")


def throttle_au_bound(cap_mb_per_s: float, accelerators: int, demand_mb_per_s: float) -> float:
    """AU the throttle allows: min(100, cap / (N x demand)); NaN when not capped."""
    if not cap_mb_per_s or math.isnan(cap_mb_per_s) or demand_mb_per_s <= 0:
        return float("nan")
    return min(100.0, 100.0 * cap_mb_per_s / (accelerators * demand_mb_per_s))


def summarize(raw: dict, cfg: dict, accelerators: int) -> tuple[dict, list[dict], np.ndarray]:
    """Run-level metrics, per-accelerator rows and all read latencies (seconds).

    The row carries `window_t` (the AU window's start and end, perf_counter
    seconds) for the caller to pick the throttle's request size in it; it is not
    a column.
    """
    times = np.stack([r["times"] for r in raw["ranks"]])
    window = au_window(times.shape[1], cfg["read_threads"], cfg["prefetch"])
    jm = job_metrics(times, cfg["compute_s"], cfg["batch"], raw["t_start"], window)
    lat = np.concatenate([r["latencies"] for r in raw["ranks"]])
    loader_bytes = sum(r["bytes"] for r in raw["ranks"])
    spans = [r.get("read_spans") for r in raw["ranks"]]
    in_window = (sum(bytes_in_window(s, *jm["window_t"]) for s in spans)
                 if all(s is not None for s in spans) else None)
    total = jm["total_time_s"]
    row = {k: v for k, v in jm.items() if not isinstance(v, np.ndarray)}
    row.update({
        "au_own_percent_min": float(jm["au_own_percent"].min()),
        "au_own_percent_mean": float(jm["au_own_percent"].mean()),
        "data_wait_s_total": float(jm["data_wait_s"].sum()),
        "demand_samples_per_s": accelerators * cfg["batch"] / cfg["compute_s"],
        "loader_bytes": int(loader_bytes),
        "loader_bytes_au_window": in_window,
        "loader_read_mb_per_s": loader_bytes / total / 1e6,
        "loader_read_mib_per_s": loader_bytes / total / 2**20,
        "reads": int(lat.size),
        **latency_stats(lat),
        "checkpoints": int(sum(r["checkpoints"] for r in raw["ranks"])),
        "checkpoint_s_total": float(sum(r["checkpoint_s"] for r in raw["ranks"])),
        **client_cpu_columns(raw["ranks"], total, int(jm["steps"]), loader_bytes),
    })
    per = []
    for r, rk in enumerate(raw["ranks"]):
        per.append({"accelerator": r, "host": rk.get("host", ""), "steps": int(jm["steps"]), "samples": int(jm["steps"] * cfg["batch"]),
                    "au_own_percent": float(jm["au_own_percent"][r]),
                    "data_wait_s": float(jm["data_wait_s"][r]), "peer_wait_s": float(jm["peer_wait_s"][r]),
                    "compute_overshoot_s": float(jm["overshoot_s"][r]), "cpu_s": float(rk.get("cpu_s", float("nan"))),
                    "loader_bytes": int(rk["bytes"]), "loader_read_mb_per_s": rk["bytes"] / total / 1e6,
                    "reads": int(rk["latencies"].size), **latency_stats(rk["latencies"])})
    row["hosts"] = len({p["host"] for p in per})
    return row, per, lat


def host_roles(per: list[dict], launch_host: str) -> str:
    """'launcher h0; ranks h0 ×2, h1 ×2': where the run was started and where its accelerators ran."""
    counts: dict[str, int] = {}
    for p in per:
        counts[p["host"] or launch_host] = counts.get(p["host"] or launch_host, 0) + 1
    return f"launcher {launch_host}; ranks " + ", ".join(f"{h} ×{n}" for h, n in counts.items())


def per_host(per: list[dict], total_time_s: float) -> list[dict]:
    """The per-accelerator rows summed per client host (hosts.csv): where the load came from."""
    hosts: dict[str, list[dict]] = {}
    for p in per:
        hosts.setdefault(p["host"], []).append(p)
    out = []
    for host, ps in hosts.items():
        nbytes = sum(p["loader_bytes"] for p in ps)
        cpu = sum(p["cpu_s"] for p in ps)
        out.append({"host": host, "accelerators": len(ps), "loader_bytes": int(nbytes),
                    "loader_read_mb_per_s": nbytes / total_time_s / 1e6 if total_time_s > 0 else float("nan"),
                    "client_cpu_s": cpu, "client_cpu_s_per_gb": cpu / (nbytes / 1e9) if nbytes else float("nan"),
                    "au_own_percent_mean": float(np.mean([p["au_own_percent"] for p in ps])),
                    "data_wait_s": float(sum(p["data_wait_s"] for p in ps)),
                    "reads": int(sum(p["reads"] for p in ps))})
    return out


# --------------------------------------------------------------------------- runs.csv
def drive_columns(frame) -> tuple[str, str, str]:
    """(average, maximum, source) columns for the drive-throughput tests.

    Prefer the run's own device reads (cgroup blkio counters, sampled like the
    monitor) when every run has them: the monitor's counters are device-wide and
    count other work on a shared disk too.
    """
    own = ("cgroup_read_mb_per_s", "cgroup_read_mb_per_s_max")
    if all(c in frame and frame[c].notna().all() for c in own):
        return own[0], own[1], "the run's own device reads (cgroup blkio counters)"
    return "device_read_mb_per_s_avg", "device_read_mb_per_s_max", "device-wide counters (/proc/diskstats)"


def headline_metrics(frame) -> list[tuple[str, str, str]]:
    avg, mx, _ = drive_columns(frame)
    return [("total_time_s", "lower", "Total time to complete training"),
            ("au_percent", "higher", "Average accelerator utilization"),
            ("samples_per_s", "higher", "Training sample throughput"),
            (avg, "higher", "Average drive read throughput (MB/s)"),
            (mx, "higher", "Maximum drive read throughput (MB/s)"),
            ("read_latency_us_mean", "lower", "Average read latency (loader, per read call)")]


def headlines(frame, target_names: list[str]) -> list[dict]:
    """The six KIOXIA tests: reference (first target) vs each other, over matched workload x N."""
    frame = measured(frame)
    return versus_reference(frame, target_names, ["workload", "accelerators"], headline_metrics(frame))


def metrics(frame, target_names: list[str]) -> dict:
    """metrics.json: per workload and target, accelerators supported (a number the storage earned — a floor
    when a search stopped at its budget or cap —, or "client-limited at N"), what limited it (storage |
    client | none, or for a search storage | client | budget | cap) and its text; the headlines."""
    checked = client_checks(runs.ok_runs(frame))
    frame = measured(frame)
    sup = supported(runs.ok_runs(frame))

    def entry(g) -> dict:
        cols = [c for c in ("au_percent", "samples_per_s", "loader_read_mb_per_s") if c in g]
        means = g.groupby("accelerators")[cols].mean()
        s = sup[(sup.workload == g.workload.iloc[0]) & (sup.target == g.target.iloc[0])].iloc[0]
        n = s.accelerators_supported
        out = {"accelerators_supported": int(n) if not pd.isna(n) else str(s.accelerators_supported_text),
               "supported_limited_by": str(s.supported_limited_by),
               "au_percent_at_max_accelerators": float(means.au_percent.iloc[-1]),
               "max_samples_per_s": float(means.samples_per_s.max()),
               "max_loader_read_mb_per_s": float(means.loader_read_mb_per_s.max())}
        if s.searched:      # accelerators: auto: what stopped the search (storage | client | budget | cap)
            out.update({"accelerators_supported_text": str(s.accelerators_supported_text),
                        "search_probes": str(s.search_probes), "search_elapsed_s": float(s.search_elapsed_s),
                        "search_budget_s": float(s.search_budget_s)})
        if "client_cpu_s_per_gb" in g:
            out["client_cpu_s_per_gb"] = float(g.client_cpu_s_per_gb.mean())
        if "limited_by" in g:
            out["runs_limited_by_client"] = int((g.limited_by == "client").sum())
        for c in checked:
            if (c["workload"], c["target"]) == (g.workload.iloc[0], g.target.iloc[0]):
                out["client_check"] = {k: c[k] for k in ("accelerators", "client_bound", "cpus_confined", "cpus_all",
                                                         "confinement", "text")}
        return out

    return runs.metrics(frame, target_names, headlines, entry, by=["workload", "target"])


def mlperf_results(frame) -> dict:
    """MLPerf-Storage-like summary per workload, target and accelerator count (means over repeats).

    MLPerf Storage / DLIO report I/O as MB/s computed with 2^20 bytes; here the
    key says MiB. AU = compute ÷ wall over the AU window, nothing subtracted, as there.
    """
    checked, rules = client_checks(frame), mlperf_verdicts(frame)
    frame = measured(frame)
    out = {"benchmark": "storagebrief emulate (DLIO / MLPerf Storage style)", "results": [], "client_checks": checked,
           "mlperf_rules": rules,
           "accelerators_supported": plain_records(supported(frame))}
    for (w, t, n), g in frame.groupby(["workload", "target", "accelerators"]):
        thr = float(g.au_threshold_percent.iloc[0])
        first = g.iloc[0]
        has = set(g.columns)
        out["results"].append({
            "workload": w, "target": t, "accelerator_type": str(first.accelerator_type),
            "num_accelerators": int(n), "repeats": int(len(g)),
            "launcher": str(first.launcher) if "launcher" in has else "fork",
            "num_client_hosts": int(g.hosts.max()) if "hosts" in has else 1,
            "train_au_percentage": [round(float(x), 3) for x in g.au_percent],
            "train_au_mean_percentage": float(g.au_percent.mean()),
            "train_au_stdev_percentage": float(g.au_percent.std(ddof=0)),
            "train_au_threshold_percentage": thr,
            "train_au_meet_expectation": "success" if g.au_percent.mean() >= thr else "fail",
            "au_window": (f"steps {int(first.au_warmup_steps) + 1}..{int(first.steps) - int(first.au_drain_steps)} "
                           f"of {int(first.steps)}") if "au_warmup_steps" in has else None,
            "limited_by": [str(x) for x in g.limited_by] if "limited_by" in has else None,
            "au_measured": [str(x) != "False" for x in g.au_measured] if "au_measured" in has else None,
            "train_throughput_mean_samples_per_second": float(g.samples_per_s.mean()),
            "demand_samples_per_second": float(first.demand_samples_per_s) if "demand_samples_per_s" in has else None,
            "train_io_mean_MiB_per_second": float(g.loader_read_mib_per_s.mean()),
            "train_io_mean_MB_per_second_1e6": float(g.loader_read_mb_per_s.mean()),
            "client_cpu_s_per_gb": float(g.client_cpu_s_per_gb.mean()) if "client_cpu_s_per_gb" in has else None,
            "num_files": int(first.num_files), "sample_bytes_mean": float(first.sample_bytes_mean),
            "batch_size": int(first.batch_size), "compute_s_per_batch": float(first.compute_s),
            "epochs": int(first.epochs), "dataset_sizing": str(first.dataset_sizing),
        })
    return out


# Per-year figures are extrapolated only from runs in steady state: at least this long and at least two
# epochs each (the first epoch's start-up and cache warm-up, the last step's drain, are then a small part).
STEADY_MIN_S = 60.0
PER_YEAR = ("Days saved / year", "models / year")


def extrapolation_refused(frame, workload: str) -> str | None:
    """Why this workload's runs are too short to extrapolate to a year, or None when they hold."""
    g = frame[frame.workload == workload]
    shortest, epochs = float(g.total_time_s.min()), int(g.epochs.min())
    if shortest < STEADY_MIN_S or epochs < 2:
        return (f"not extrapolated to a year: the shortest run took {shortest:.1f} s over {epochs} epoch(s); "
                f"per-year figures need runs of at least {STEADY_MIN_S:.0f} s and 2 epochs (steady state)")
    return None


def days_saved_table(frame, ref: str, other: str, workload: str):
    """KIOXIA-style extrapolation: % faster, days saved per year, 100-epoch hours, models per year."""
    g = frame[frame.workload == workload].groupby(["accelerators", "target"]).total_time_s.mean().unstack("target")
    if ref not in g or other not in g:
        return pd.DataFrame()
    epochs = int(frame[frame.workload == workload].epochs.iloc[0])
    rows = []
    for n, r in g[[ref, other]].dropna().iterrows():
        faster = (r[other] - r[ref]) / r[other] * 100
        h_ref, h_other = r[ref] * 100 / epochs / 3600, r[other] * 100 / epochs / 3600
        rows.append({"Accelerators": int(n), f"{ref}: s": r[ref], f"{other}: s": r[other],
                     f"{ref} faster %": faster, "Days saved / year": 365 * faster / 100,
                     f"{ref}: 100-epoch h": h_ref, f"{other}: 100-epoch h": h_other,
                     f"{ref}: models / year": 8760 / h_ref if h_ref else float("nan"),
                     f"{other}: models / year": 8760 / h_other if h_other else float("nan")})
    table = pd.DataFrame(rows)
    if extrapolation_refused(frame, workload) and not table.empty:
        table = table[[c for c in table.columns if not c.endswith(PER_YEAR) and "100-epoch" not in c]]
    return table


def figures(frame) -> list[tuple[str, str, str, str]]:
    """The six KIOXIA tests: (column, unit, title, hint)."""
    avg, mx, _ = drive_columns(frame)
    return [("total_time_s", "seconds", "Total time to complete training", "lower is better"),
            ("au_percent", "AU %", "Average accelerator utilization", "higher is better"),
            ("samples_per_s", "samples/s", "Training sample throughput", "higher is better"),
            (avg, "MB/s (10⁶ B)", "Average drive read throughput", "higher is better"),
            (mx, "MB/s (10⁶ B)", "Maximum drive read throughput", "higher is better"),
            ("read_latency_us_mean", "µs", "Average read latency (loader)", "lower is better")]
