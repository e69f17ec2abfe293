"""How many accelerators can this target feed? A forecast from the measured fio curve.

For each target, load (idle/busy) and workload (core.workloads):
  demand D   = batch x record bytes / compute time per batch (one accelerator never kept waiting);
  request    = min(record bytes, the loader's read size `request_kib`): the size one read asks for;
  curve      = mean throughput (MB/s) over repeats at the measured transfer size nearest to the
               request (log scale), random reads when measured, per queue depth;
  N accelerators keep AU >= threshold when N x D x threshold/100 <= B(N), where B(N) is the best
               throughput measured at a queue depth N x read_threads can fill (N accelerators each
               keep `read_threads` reads in flight); beyond the largest QD measured, B stays at the
               best measured (assumed flat). The forecast is the largest such N.
Assumptions (also in the brief): the accelerators' reads look like fio's (same size, random, direct);
AU falls as B / (N x D) once storage is the limit (the bound the emulate study uses); the client
has CPU for N loaders; the page cache serves nothing (fio runs with O_DIRECT).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ...core.workloads import WorkloadSpec, merged_spec

MAX_N = 100_000


def nearest_size(sizes, request_bytes: float) -> int:
    return int(min(sizes, key=lambda s: (abs(math.log(s / request_bytes)), -s)))


def accelerators_supported(curve: dict[int, float], demand_mb_per_s: float, threshold_percent: float,
                           read_threads: int) -> dict:
    """The largest N with N x D x thr/100 <= B(N); curve = {queue depth: MB/s}."""
    if not curve or demand_mb_per_s <= 0:
        return {"accelerators_forecast": 0, "throughput_used_mb_per_s": None, "queue_depth_used": None,
                "forecast_limited_by": "no curve"}
    need = demand_mb_per_s * threshold_percent / 100
    qds = sorted(curve)

    def best_at(n: int) -> tuple[int, float]:
        fits = [q for q in qds if q <= n * read_threads] or qds[:1]
        q = max(fits, key=lambda x: curve[x])
        return q, curve[q]

    n, used = 0, (None, None)
    for m in range(1, MAX_N + 1):
        q, b = best_at(m)
        if m * need > b:
            break
        n, used = m, (q, b)
    beyond = n and n * read_threads > qds[-1]
    return {"accelerators_forecast": n, "throughput_used_mb_per_s": used[1], "queue_depth_used": used[0],
            "forecast_limited_by": "beyond the largest QD measured (curve assumed flat)" if beyond
            else "storage throughput at the workload's concurrency"}


def emulate_context(emulate_dir: str | Path) -> dict:
    """What the emulate study ran: its merged workload specs, accelerator type, read size and
    threads, and its accelerators supported per (workload, target); {} when it has not run."""
    d = Path(emulate_dir)
    try:
        study = json.loads((d / "study.json").read_text())
        mlperf = json.loads((d / "mlperf_results.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {"accelerator_type": study.get("accelerator_type"), "specs": {}, "supported": {}, "io": {}}
    for name, w in (study.get("workloads") or {}).items():
        try:
            out["specs"][name] = WorkloadSpec.model_validate(w["spec"])
        except Exception:
            continue
    for rec in mlperf.get("accelerators_supported") or []:
        out["supported"][(rec["workload"], rec["target"])] = rec
    try:
        runs = pd.read_csv(d / "runs.csv")
        for name, g in runs.groupby("workload"):
            out["io"][name] = {"read_block_bytes": int(g.read_block_bytes.iloc[0]),
                               "read_threads": int(g.read_threads.iloc[0])}
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    return out


def forecast(points: pd.DataFrame, fp, emulate: dict | None = None) -> pd.DataFrame:
    """One row per target, load and workload (points: merged per-point table from metrics.points)."""
    emulate = emulate or {}
    rows = []
    if points.empty:
        return pd.DataFrame()
    cpu = points[points.path == "cpu"] if "path" in points else points
    rw = "randread" if "randread" in set(cpu.rw) else sorted(set(cpu.rw))[0]
    cpu = cpu[cpu.rw == rw]
    for name in fp.workloads:
        from_emulate = name in emulate.get("specs", {})
        spec = emulate["specs"][name] if from_emulate else merged_spec(name, fp.workload_overrides)
        acc = emulate.get("accelerator_type") if from_emulate else fp.accelerator_type
        if acc not in spec.compute_s:
            acc = fp.accelerator_type
        io = emulate.get("io", {}).get(name, {}) if from_emulate else {}
        read_size = io.get("read_block_bytes", fp.request_kib * 1024)
        threads = io.get("read_threads", spec.read_threads)
        request = min(spec.record_bytes, read_size)
        demand = spec.demand_bytes_per_s(acc) / 1e6
        for (target, load), g in cpu.groupby(["target", "load"], sort=False):
            size = nearest_size(sorted(g.block_size_bytes.unique()), request)
            curve = g[g.block_size_bytes == size].set_index("queue_depth").throughput_mb_per_s_mean.to_dict()
            res = accelerators_supported(curve, demand, spec.au_threshold_percent, threads)
            emu = emulate.get("supported", {}).get((name, target)) if from_emulate else None
            emu_n = emu.get("accelerators_supported") if emu else None
            # a floor ("≥ N": every count passed, or the search ran out of budget or hit its cap) is no answer
            # to subtract from; the text column still shows it
            floor = emu is not None and emu.get("supported_limited_by") in ("none", "budget", "cap")
            rows.append({
                "target": target, "load": load, "workload": name, "accelerator_type": acc,
                "workload_spec_source": "emulate study.json" if from_emulate else "params (core.workloads)",
                "record_bytes": spec.record_bytes, "batch_size": spec.batch_for(acc),
                "compute_s_per_batch": spec.compute_s[acc], "read_threads": threads,
                "request_bytes": request, "demand_mb_per_s_per_accelerator": demand,
                "au_threshold_percent": spec.au_threshold_percent, "rw": rw, "transfer_size_bytes": size,
                **res,
                "emulated_accelerators_supported": emu_n,
                "emulated_supported_text": emu.get("accelerators_supported_text") if emu else None,
                "emulated_max_accelerators_tested": emu.get("max_accelerators_tested") if emu else None,
                "forecast_minus_emulated": (res["accelerators_forecast"] - emu_n)
                if emu_n is not None and not floor else None})
    return pd.DataFrame(rows)
