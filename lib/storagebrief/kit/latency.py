"""Latency samples as the run table's columns: p50, p95, p99, mean and max."""
from __future__ import annotations

STATS = ("p50", "p95", "p99", "mean", "max")


def percentiles(values, prefix: str = "latency", unit: str = "ms") -> dict:
    """{<prefix>_<unit>_p50: ..., _p95, _p99, _mean, _max} of `values` (an array or list, already in
    `unit`); every figure None when there are no values."""
    import numpy as np

    names = {k: f"{prefix}_{unit}_{k}" for k in STATS}
    lat = np.asarray(values, dtype=np.float64)
    if not len(lat):
        return {n: None for n in names.values()}
    return {names["p50"]: float(np.percentile(lat, 50)), names["p95"]: float(np.percentile(lat, 95)),
            names["p99"]: float(np.percentile(lat, 99)), names["mean"]: float(lat.mean()),
            names["max"]: float(lat.max())}


def percentile(values, q: float, scale: float = 1.0) -> float:
    """One percentile of `values` times `scale` (e.g. seconds -> ms: 1e3)."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q) * scale)
