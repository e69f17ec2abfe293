"""Histogram statistics (exact median, nearest-rank percentile, locality) and the reference
Characterizer: the definitions of the package docstring as code, fed one event at a time."""
from __future__ import annotations

import math
import random
from collections import Counter

from .model import COMPLETE, ISSUE, MERGE, REQUEUE, Event, ParseCounts

SECTOR_BYTES = 512
BINS = 1000
HOT_BINS = 100                      # the hottest 10 % of the address space
LOCALITY_BAND_SHARE = 1.0 / BINS    # a band's bins each hold more than an even spread's share
SAMPLE_POINTS = 4000                # LBA-vs-time points kept for plots (reservoir, fixed seed)


# -- statistics ---------------------------------------------------------------------------------

def hist_stats(hist: Counter, scale: float = 1.0) -> dict:
    """count, min, median (exact), max, mean, population stdev of a histogram value -> count."""
    n = sum(hist.values())
    if n == 0:
        return {"count": 0, "min": math.nan, "median": math.nan, "max": math.nan, "mean": math.nan,
                "stdev": math.nan}
    keys = sorted(hist)
    total = sum(k * c for k, c in hist.items())
    mean = total / n
    var = sum(c * (k - mean) ** 2 for k, c in hist.items()) / n
    return {"count": n, "min": keys[0] * scale, "median": _quantile_exact(keys, hist, n) * scale,
            "max": keys[-1] * scale, "mean": mean * scale, "stdev": math.sqrt(var) * scale}


def _quantile_exact(keys: list, hist: Counter, n: int) -> float:
    """The median: the middle value, or the mean of the two middle values."""
    lo_rank, hi_rank = (n - 1) // 2, n // 2
    seen, lo = 0, None
    for k in keys:
        seen += hist[k]
        if lo is None and seen > lo_rank:
            lo = k
        if seen > hi_rank:
            return (lo + k) / 2
    return float(keys[-1])


def hist_percentile(hist: Counter, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a histogram."""
    n = sum(hist.values())
    if n == 0:
        return math.nan
    rank, seen = max(1, math.ceil(q / 100 * n)), 0
    for k in sorted(hist):
        seen += hist[k]
        if seen >= rank:
            return float(k)
    return float(max(hist))


def locality(bins: list[int]) -> tuple[float, int]:
    """(percent of requests in the HOT_BINS busiest bins, number of locality bands)."""
    total = sum(bins)
    if total == 0:
        return math.nan, 0
    hot = sum(sorted(bins, reverse=True)[:HOT_BINS])
    bands, inside = 0, False
    for c in bins:
        above = c / total > LOCALITY_BAND_SHARE
        if above and not inside:
            bands += 1
        inside = above
    return 100.0 * hot / total, bands


class Characterizer:
    """Consumes events (in trace order) and keeps only bounded state: histograms, per-device
    counters, the requests in flight and a fixed-size sample for plots."""

    def __init__(self, capacity_sectors: int | None = None, sample_points: int = SAMPLE_POINTS,
                 capacities: dict[tuple[int, int], int] | None = None):
        self.capacity_override = capacity_sectors          # every device (--capacity-sectors)
        self._known = dict(capacities or {})                # per device (header, sysfs, highest sector)
        self.capacities: dict[tuple[int, int], int | None] = {}
        self.sizes = {(op, seq): Counter() for op in "RW" for seq in (False, True)}   # sectors -> n
        self.latency_us = {"R": Counter(), "W": Counter(), "F": Counter(), "D": Counter()}
        self.counts = Counter()          # R W F D N, merges, requeues, unmatched completions
        self.bins: dict[tuple[int, int], dict[str, list[int]]] = {}
        self.per_dev = Counter()
        self._last_end: dict[tuple[int, int], int] = {}
        self._inflight: dict[tuple, list[float]] = {}
        self.first_t = self.last_t = None
        self.first_issue_t = None
        self.sample: list[tuple] = []
        self._sample_cap = sample_points
        self._seen_data = 0
        self._rng = random.Random(0)
        self.beyond_capacity = 0

    def capacity(self, dev) -> int | None:
        if dev not in self.capacities:
            self.capacities[dev] = self.capacity_override or self._known.get(dev)
        return self.capacities[dev]

    def feed(self, ev: Event) -> None:
        t = ev.t
        # earliest and latest: the screen lets time step back by its small tolerance
        if self.first_t is None or t < self.first_t:
            self.first_t = t
        if self.last_t is None or t > self.last_t:
            self.last_t = t
        act = ev.action
        if act == ISSUE:
            self._issue(ev)
        elif act == COMPLETE:
            issued = self._pop_inflight(ev)
            if issued is not None:
                if ev.op in self.latency_us:
                    self.latency_us[ev.op][round((t - issued[0]) * 1e6)] += 1
            else:
                self.counts["unmatched_completions"] += 1
        elif act == REQUEUE:
            self.counts["requeues"] += 1
            issued = self._pop_inflight(ev)
            if issued is not None:      # the device did not take it: it counts at its next issue
                self._uncount(ev.dev, ev.op, ev.sector, *issued[1:])
        elif act == MERGE:
            self.counts["merges"] += 1

    def _pop_inflight(self, ev: Event):
        key = (ev.dev, ev.sector, ev.op)
        q = self._inflight.get(key)
        if not q:
            return None
        issued = q.pop(0)
        if not q:
            del self._inflight[key]
        return issued

    def _uncount(self, dev, op: str, sector: int, sectors: int, seq: bool | None, b: int | None,
                 prev_end: int | None) -> None:
        self.counts[op] -= 1
        if seq is None:
            return
        if self._last_end.get(dev) == sector + sectors:
            if prev_end is None:
                self._last_end.pop(dev, None)
            else:
                self._last_end[dev] = prev_end
        self.sizes[(op, seq)][sectors] -= 1
        if not self.sizes[(op, seq)][sectors]:
            del self.sizes[(op, seq)][sectors]
        self.per_dev[dev] -= 1
        if b is not None:
            self.bins[dev][op][b] -= 1

    def _issue(self, ev: Event) -> None:
        op, dev = ev.op, ev.dev
        self.counts[op] += 1
        if op not in ("R", "W"):
            self._inflight.setdefault((dev, ev.sector, op), []).append((ev.t, ev.sectors, None, None, None))
            return
        if self.first_issue_t is None:
            self.first_issue_t = ev.t
        prev_end = self._last_end.get(dev)
        seq = prev_end == ev.sector
        self._last_end[dev] = ev.sector + ev.sectors
        self.sizes[(op, seq)][ev.sectors] += 1
        self.per_dev[dev] += 1
        cap = self.capacity(dev)
        b = None
        if cap:
            if ev.sector + ev.sectors > cap:      # a device has no such sector: the capacity is wrong
                self.beyond_capacity += 1
            b = min(ev.sector * BINS // cap, BINS - 1)
            bins = self.bins.get(dev)
            if bins is None:
                bins = self.bins[dev] = {"R": [0] * BINS, "W": [0] * BINS}
            bins[op][b] += 1
        self._inflight.setdefault((dev, ev.sector, op), []).append((ev.t, ev.sectors, seq, b, prev_end))
        # reservoir sample of data requests for the LBA-vs-time plot
        if not self._sample_cap:
            return
        self._seen_data += 1
        point = (ev.t, ev.sector, ev.sectors, op, seq)
        if len(self.sample) < self._sample_cap:
            self.sample.append(point)
        else:
            j = self._rng.randrange(self._seen_data)
            if j < self._sample_cap:
                self.sample[j] = point

    # -- results ---------------------------------------------------------------------------
    def summary(self, parse: ParseCounts | None = None) -> dict:
        """The Samsung SDC 2023 study's summary statistics plus counts, locality and latency (units in names)."""
        c = self.counts
        reads, writes = c["R"], c["W"]
        data = reads + writes
        rand = {op: sum(self.sizes[(op, False)].values()) for op in "RW"}
        seqn = {op: sum(self.sizes[(op, True)].values()) for op in "RW"}
        length = (self.last_t - self.first_t) if self.first_t is not None else math.nan
        row: dict = {
            "events": sum(c[k] for k in ("R", "W", "F", "D", "N")) + c["unmatched_completions"],
            "read_percent": 100.0 * reads / data if data else math.nan,
            "random_percent": 100.0 * (rand["R"] + rand["W"]) / data if data else math.nan,
            "avg_iops": data / length if data and length > 0 else math.nan,
        }
        for op, name in (("R", "read"), ("W", "write")):
            st = hist_stats(self.sizes[(op, False)] + self.sizes[(op, True)], scale=SECTOR_BYTES / 1024)
            for k in ("min", "median", "max", "mean", "stdev"):
                row[f"{name}_kib_{k}"] = st[k]
        row.update({
            "random_read_ops": rand["R"], "random_write_ops": rand["W"],
            "sequential_read_ops": seqn["R"], "sequential_write_ops": seqn["W"],
            "trace_length_s": length,
            "read_ops": reads, "write_ops": writes, "flush_ops": c["F"], "discard_ops": c["D"],
            "other_ops": c["N"], "merges": c["merges"], "requeues": c["requeues"],
            "read_bytes": sum(k * n for k, n in (self.sizes[("R", False)] + self.sizes[("R", True)]).items()) * SECTOR_BYTES,
            "write_bytes": sum(k * n for k, n in (self.sizes[("W", False)] + self.sizes[("W", True)]).items()) * SECTOR_BYTES,
        })
        for op, name in (("R", "read"), ("W", "write")):
            st = hist_stats(self.latency_us[op])
            row[f"{name}_latency_us_mean"] = st["mean"]
            row[f"{name}_latency_us_median"] = st["median"]
            row[f"{name}_latency_us_p99"] = hist_percentile(self.latency_us[op], 99)
        dev = max(self.per_dev, key=self.per_dev.get) if self.per_dev else None
        bins = self.bins.get(dev)
        row["device"] = f"{dev[0]}:{dev[1]}" if dev else ""
        row["devices"] = len(self.per_dev)
        row["capacity_sectors"] = self.capacities.get(dev) if dev else None
        if bins:
            both = [r + w for r, w in zip(bins["R"], bins["W"])]
            for key, b in (("", both), ("read_", bins["R"]), ("write_", bins["W"])):
                share, bands = locality(b)
                row[f"{key}locality_percent"] = share
                row[f"{key}locality_bands"] = bands
        else:
            for key in ("", "read_", "write_"):
                row[f"{key}locality_percent"] = math.nan
                row[f"{key}locality_bands"] = math.nan
        row["unmatched_issues"] = sum(len(q) for q in self._inflight.values())
        row["unmatched_completions"] = c["unmatched_completions"]
        row["requests_beyond_capacity"] = self.beyond_capacity
        if parse is not None:
            row["lines"] = parse.lines
            row["malformed_lines"] = parse.malformed
            row["lost_events"] = parse.lost_events
        return row

    def distributions(self) -> dict:
        """Histograms for plots: request sizes (KiB -> n) by op and randomness, locality bins."""
        kib = SECTOR_BYTES / 1024
        sizes = {f"{'read' if op == 'R' else 'write'}_{'sequential' if seq else 'random'}":
                 {str(k * kib): n for k, n in sorted(h.items())} for (op, seq), h in self.sizes.items()}
        dev = max(self.per_dev, key=self.per_dev.get) if self.per_dev else None
        bins = self.bins.get(dev, {})
        return {"sizes_kib": sizes, "locality_bins": {"read": bins.get("R", []), "write": bins.get("W", [])},
                "sample": sorted(self.sample), "t0": self.first_t}
