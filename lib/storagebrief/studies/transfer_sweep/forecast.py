"""How many accelerators can this target feed? A forecast from the measured fio curve.

For each target, load (idle/busy) and workload (core.workloads):
  demand D   = batch x record bytes / compute time per batch (one accelerator never kept waiting);
  request    = min(record bytes, the loader's read size `request_kib`): the size one read asks for;
  curve      = the worse repeat's throughput (MB/s) at the measured transfer size nearest to the
               request (log scale), random reads when measured, per queue depth (a mean of noisy short
               points is inflated by one fast repeat: local 1M QD 1 read 672 and 1,624 MB/s), capped at
               what the target's emulated profile allows (bandwidth cap, IOPS cap x transfer size): a
               0.6 s point can overshoot a blkio throttle (hdd-emulated read 154 MB/s under a 150 cap);
  N accelerators keep AU >= threshold when N x D x threshold/100 <= B(N), where B(N) is the best
               throughput measured at a queue depth N x read_threads can fill (N accelerators each
               keep `read_threads` reads in flight); beyond the largest QD measured, B stays at the
               best measured (assumed flat). The forecast is the largest such N.
  busy <= idle: a busy system's forecast is capped at the idle one's, and the row says so (on this VM
               a loaded vCPU can complete small reads sooner; that is no extra capacity to feed).
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


def profile_cap_mb_per_s(profile, transfer_bytes: int) -> float | None:
    """What an emulated profile lets reads reach at this transfer size (MB/s): min(bandwidth cap, IOPS cap x
    size); None where it caps nothing. `profile`: {read_mb_per_s, read_iops} (a DeviceProfile dump) or None."""
    profile = profile or {}
    caps = [float(profile["read_mb_per_s"])] if profile.get("read_mb_per_s") else []
    if profile.get("read_iops"):
        caps.append(float(profile["read_iops"]) * transfer_bytes / 1e6)
    return min(caps) if caps else None


def curve_column(g: pd.DataFrame) -> tuple[str, str]:
    """The points.csv column the curve takes and its name: the worse repeat (the mean where points.csv
    predates it)."""
    return (("throughput_mb_per_s_min", "worse repeat") if "throughput_mb_per_s_min" in g
            else ("throughput_mb_per_s_mean", "mean of repeats"))


def curve_of(g: pd.DataFrame, cap: float | None) -> dict[int, float]:
    """{QD: MB/s} of one transfer size (curve_column), capped at the profile's allowance."""
    curve = g.set_index("queue_depth")[curve_column(g)[0]].astype(float).to_dict()
    return {q: min(v, cap) for q, v in curve.items()} if cap is not None else curve


def _busy_not_above_idle(rows: list[dict]) -> None:
    """A busy system never forecasts more than the idle one: cap it there and say why, in the row."""
    idle = {(r["target"], r["workload"]): r for r in rows if r["load"] == "idle"}
    for r in rows:
        i = idle.get((r["target"], r["workload"]))
        r["accelerators_forecast_uncapped"] = r["accelerators_forecast"]
        r["forecast_note"] = ""
        if r["load"] != "busy" or i is None or r["accelerators_forecast"] <= i["accelerators_forecast"]:
            continue
        r["forecast_note"] = (f"busy measured {r['throughput_used_mb_per_s']:,.0f} MB/s vs idle "
                              f"{i['throughput_used_mb_per_s'] or 0:,.0f} (worse repeats; on a VM a loaded vCPU "
                              "notices completions sooner): capped at the idle forecast, since a busy system has no "
                              "more capacity to feed accelerators")
        if r.get("forecast_minus_emulated") is not None:
            r["forecast_minus_emulated"] -= r["accelerators_forecast"] - i["accelerators_forecast"]
        r["accelerators_forecast"] = i["accelerators_forecast"]


def forecast(points: pd.DataFrame, fp, emulate: dict | None = None, profiles: dict | None = None) -> pd.DataFrame:
    """One row per target, load and workload (points: merged per-point table from metrics.points;
    profiles: target name -> its emulated profile {read_mb_per_s, read_iops}, None when unthrottled)."""
    emulate, profiles = emulate or {}, profiles or {}
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
            at = g[g.block_size_bytes == size]
            cap = profile_cap_mb_per_s(profiles.get(target), size)
            col, stat = curve_column(at)
            curve = curve_of(at, cap)
            res = accelerators_supported(curve, demand, spec.au_threshold_percent, threads)
            used = at[at.queue_depth == res["queue_depth_used"]]
            spread = (float((used.throughput_mb_per_s_max - used.throughput_mb_per_s_min).iloc[0]
                            / used.throughput_mb_per_s_mean.iloc[0] * 100)
                      if len(used) and "throughput_mb_per_s_max" in used else None)
            measured = float(used[col].iloc[0]) if len(used) else None
            emu = emulate.get("supported", {}).get((name, target)) if from_emulate else None
            emu_n = emu.get("accelerators_supported") if emu else None
            # a floor ("≥ N": every count passed, or the search ran out of budget or hit a cap) is no answer
            # to subtract from; the text column still shows it
            floor = emu is not None and emu.get("supported_limited_by") in ("none", "budget", "cap", "memory", "scale")
            rows.append({
                "target": target, "load": load, "workload": name, "accelerator_type": acc,
                "workload_spec_source": "emulate study.json" if from_emulate else "params (core.workloads)",
                "record_bytes": spec.record_bytes, "batch_size": spec.batch_for(acc),
                "compute_s_per_batch": spec.compute_s[acc], "read_threads": threads,
                "request_bytes": request, "demand_mb_per_s_per_accelerator": demand,
                "au_threshold_percent": spec.au_threshold_percent, "rw": rw, "transfer_size_bytes": size,
                **res, "curve_statistic": stat, "profile_cap_mb_per_s": cap,
                "throughput_measured_mb_per_s": measured,
                "capped_by_profile": bool(cap is not None and measured is not None and measured > cap),
                "repeat_spread_percent": spread,
                "emulated_accelerators_supported": emu_n,
                "emulated_supported_text": emu.get("accelerators_supported_text") if emu else None,
                "emulated_max_accelerators_tested": emu.get("max_accelerators_tested") if emu else None,
                "emulated_passed_at_least": emu.get("accelerators_supported_at_least") if emu else None,
                "emulated_first_failing": emu.get("first_failing_accelerators") if emu else None,
                "emulated_limited_by": emu.get("supported_limited_by") if emu else None,
                "forecast_minus_emulated": (res["accelerators_forecast"] - emu_n)
                if emu_n is not None and not floor else None})
    _busy_not_above_idle(rows)
    return pd.DataFrame(rows)
