"""Latency samples as the run table's columns: p50, p95, p99, mean and max."""
from __future__ import annotations

STATS = ("p50", "p95", "p99", "mean", "max")


def percentiles(values, prefix: str = "latency", unit: str = "ms") -> dict:
    """{<prefix>_<unit>_p50: ..., _p95, _p99, _mean, _max} of `values` (an array or list, already in
    `unit`); every figure None when there are no values."""
    return stats(values, f"{prefix}_{unit}")


def stats(values, prefix: str, which=STATS, scale: float = 1.0, empty=None) -> dict:
    """{<prefix>_<stat>: ...} for each of `which` (pNN percentiles, mean, max) of `values` times `scale`; every
    figure `empty` when there are no values. The one place latency samples become columns."""
    import numpy as np

    lat = np.asarray(values, dtype=np.float64) * scale
    if not len(lat):
        return {f"{prefix}_{k}": empty for k in which}
    qs = [float(k[1:]) for k in which if k.startswith("p")]
    got = dict(zip([k for k in which if k.startswith("p")], np.percentile(lat, qs) if qs else []))
    got.update({"mean": lat.mean(), "max": lat.max()})
    return {f"{prefix}_{k}": float(got[k]) for k in which}


def percentile(values, q: float, scale: float = 1.0, empty=None) -> float | None:
    """One percentile of `values` times `scale` (e.g. seconds -> ms: 1e3); `empty` when there are none."""
    import numpy as np

    if not len(values):
        return empty
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
