"""transfer_sweep arithmetic: per-point tables (repeats merged), headline deltas, metrics.json.

Headlines, as the seed states them:
  reference vs other target on the busy system (the seed's "9400 vs Competitor A", busy GDS system):
    throughput, mean latency and p99 latency; matched on (rw, transfer size, queue depth);
  idle vs busy on each target (the seed's "busy system shows 50 % lower performance, 2x response time"):
    throughput and p99 latency, the idle run as the reference.
Each card carries the spread over repeats at the configuration where the delta is largest
(repeat r of one side against repeat r of the other).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ...report.headlines import compare
from . import fio

POINT_KEYS = ["target", "load", "path", "rw", "block_size_bytes", "queue_depth"]
MATCH = ["rw", "block_size_bytes", "queue_depth"]
# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (report/inputs.py) refuses a runs.csv without them, so the code below may assume them.
RUNS_COLUMNS = {"load": "text", "path": "text", "rw": "text", **dict.fromkeys(
    ("block_size_bytes", "queue_depth", "iodepth", "numjobs", "throughput_mb_per_s", "iops", "lat_us_mean",
     "clat_us_p99"), "number")}
TARGET_METRICS = [("throughput_mb_per_s", "higher", "Throughput, busy system (MB/s)"),
                  ("lat_us_mean", "lower", "Mean latency, busy system (µs)"),
                  ("clat_us_p99", "lower", "p99 latency, busy system (µs)")]
LOAD_METRICS = [("throughput_mb_per_s", "higher", "Throughput idle vs busy (MB/s)"),
                ("clat_us_p99", "lower", "p99 latency idle vs busy (µs)")]


def _cpu(frame: pd.DataFrame) -> pd.DataFrame:
    ok = frame[frame.status == "ok"] if "status" in frame else frame
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
            "text": f"{h['text']} (repeats {lo:+.0f} … {hi:+.0f}%)"}


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


def metrics(frame, target_names: list[str]) -> dict:
    cpu = _cpu(frame)
    out: dict = {"runs": int(len(frame))}
    for (name, load), g in cpu.groupby(["target", "load"]):
        m = g.groupby(MATCH).agg(bw=("throughput_mb_per_s", "mean"), iops=("iops", "mean"))
        out.setdefault(name, {})[load] = {"max_throughput_mb_per_s": float(m.bw.max()),
                                          "max_iops": float(m.iops.max())}
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out


# --------------------------------------------------------------------------- per point
def points(frame: pd.DataFrame, fio_dir: Path | None) -> pd.DataFrame:
    """One row per point (target, load, path, rw, size, QD): means and sd over repeats, and fio
    latency percentiles recomputed from the repeats' merged histogram bins (fio's rule)."""
    ok = frame[frame.status == "ok"] if "status" in frame else frame
    rows = []
    for key, g in ok.groupby(POINT_KEYS, sort=False):
        row = dict(zip(POINT_KEYS, key))
        row.update(repeats=int(len(g)), iodepth=int(g.iodepth.iloc[0]), numjobs=int(g.numjobs.iloc[0]))
        for col in ("throughput_mb_per_s", "iops", "lat_us_mean", "clat_us_p99"):
            row[f"{col}_mean"] = float(g[col].mean())
            row[f"{col}_sd"] = float(g[col].std(ddof=1)) if len(g) > 1 else 0.0
        ios = g.total_ios if "total_ios" in g else None
        if ios is not None and ios.notna().all() and ios.sum() > 0:
            row["lat_us_mean_all_ios"] = float((g.lat_us_mean * ios).sum() / ios.sum())
        for c in ("cpu_busy_percent", "load_cpu_percent", "load_memory_share_percent"):
            if c in g:
                row[f"{c}_mean"] = float(pd.to_numeric(g[c], errors="coerce").mean())
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
        f = Path(fio_dir) / f"{run_id}.json"
        if not f.exists():
            return None
        many.append(fio.bins(json.loads(f.read_text()), rw))
    return fio.merge_bins(many)
