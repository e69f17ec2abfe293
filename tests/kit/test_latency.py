"""kit.latency: percentile columns of latency samples, and log2 per-call histograms."""
from __future__ import annotations

import math

import numpy as np

from storagebrief.kit.latency import (LOG2_BINS, add_histograms, bin_edges_us, histogram_percentile_us, log2_bin,
                                      new_histogram, percentile, percentiles)


def test_percentile_columns_are_named_by_prefix_and_unit_and_none_without_samples():
    values = list(range(1, 101))
    out = percentiles(values, prefix="read_latency", unit="us")
    assert out == {"read_latency_us_p50": float(np.percentile(values, 50)),
                   "read_latency_us_p95": float(np.percentile(values, 95)),
                   "read_latency_us_p99": float(np.percentile(values, 99)),
                   "read_latency_us_mean": 50.5, "read_latency_us_max": 100.0}
    assert set(percentiles([]).values()) == {None} and len(percentiles([])) == 5
    assert percentile([0.001, 0.002, 0.003], 50, scale=1e3) == 2.0


def test_log2_histogram_bins_and_percentiles():
    assert [log2_bin(ns) for ns in (0, 999, 1000, 1999, 2000, 1_000_000)] == [0, 0, 1, 1, 2, 10]
    assert bin_edges_us(0) == (0.0, 1.0) and bin_edges_us(10) == (512.0, 1024.0)
    assert log2_bin(10**18) == LOG2_BINS - 1 and math.isinf(bin_edges_us(LOG2_BINS - 1)[1])
    h = new_histogram()
    for us in [600] * 90 + [3000] * 10:                 # 90 calls in [512, 1024) µs, 10 in [2048, 4096)
        h[log2_bin(us * 1000)] += 1
    assert 512 <= histogram_percentile_us(h, 50) < 1024
    assert 2048 <= histogram_percentile_us(h, 99) < 4096
    assert histogram_percentile_us(new_histogram(), 50) is None


def test_histograms_add_bin_by_bin_and_the_open_last_bin_reports_its_low_edge():
    a, b = new_histogram(), new_histogram()
    a[3], b[3], b[5] = 2, 3, 1
    assert add_histograms(a, b)[3] == 5 and a[5] == 1 and sum(a) == 6
    top = new_histogram()
    top[LOG2_BINS - 1] = 4
    assert histogram_percentile_us(top, 99) == bin_edges_us(LOG2_BINS - 1)[0]
