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


# --------------------------------------------------------------------------- per-call histograms
# Bin i holds latencies in [2^(i-1), 2^i) µs (bin 0: below 1 µs); the last bin is open above 2^(BINS-2) µs
# (~18 min). Counting into a fixed list costs one bit_length per call, so every call is recorded without
# keeping a list of them (fio's histograms have the same purpose; these bins are coarser: ×2 apart).
LOG2_BINS = 32


def log2_bin(ns: int) -> int:
    """The bin of a latency of `ns` nanoseconds."""
    return min(LOG2_BINS - 1, (ns // 1000).bit_length())


def bin_edges_us(i: int) -> tuple[float, float]:
    """[low, high) of bin i in µs (high is inf for the last bin)."""
    low = 0.0 if i == 0 else float(1 << (i - 1))
    return low, float("inf") if i == LOG2_BINS - 1 else float(1 << i)


def new_histogram() -> list[int]:
    return [0] * LOG2_BINS


def add_histograms(into: list[int], other) -> list[int]:
    for i, c in enumerate(other):
        into[i] += c
    return into


def histogram_percentile_us(counts, q: float) -> float | None:
    """The q-th percentile (0-100) of a log2 histogram, interpolated linearly inside its bin (so within a
    factor of 2 of the true value); None for an empty histogram. The open last bin reports its low edge."""
    total = sum(counts)
    if not total:
        return None
    rank = q / 100 * total
    seen = 0
    for i, c in enumerate(counts):
        if c and seen + c >= rank:
            low, high = bin_edges_us(i)
            if high == float("inf"):
                return low
            return low + (high - low) * max(0.0, rank - seen) / c
        seen += c
    return bin_edges_us(LOG2_BINS - 1)[0]
