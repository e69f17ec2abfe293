"""Block-level I/O characterization of a trace (the seed's btt-style summary statistics).

Reads block traces as text, streaming, in bounded memory:
  tracefs   lines of the kernel's block:block_rq_issue / block_rq_complete / block_rq_requeue
            events (trace_pipe or trace), with or without the kernel 6.x ioprio field
            (`be,0,4`) after the sector range; `CPU:N [LOST M EVENTS]` lines count as lost events
  blkparse  blkparse's default text output: D = issued to the device, C = completed,
            M / F = back / front merges, R = requeue; other actions (Q G I P U A X S T m ...)
            are valid but not needed; the per-CPU summary at the end is skipped

Definitions (also in the README and the brief):
  * An I/O is one request as issued to the device (D / block_rq_issue): issue time, start
    sector, sectors, and its operation: read, write, flush or discard. It is matched to its
    completion by (device, start sector, operation), first issued first completed, for a
    per-request latency. A request the driver requeues (the device did not take it, e.g. its
    queue was full) is taken back and counts once, at its last issue; requeues have their
    own column (the sequence point goes back to before it when nothing was issued since).
  * Sequential: its start sector equals the end sector (start + sectors) of the previous read
    or write of the same device in issue order; otherwise random; the first is random.
    Flushes and discards neither count nor break a sequence.
  * Sizes in KiB (1 KiB = 2 sectors); min / median / max / mean / standard deviation
    (population) over requests. Sizes are whole sectors, so a histogram of sizes in sectors
    is exact: the median (mean of the two middle values for an even count) is exact too.
  * Address space: the device's capacity in sectors (sysfs, or given) in 1,000 equal bins; a
    request falls in the bin of its start sector. Locality = share of requests in the 100
    busiest bins (the hottest 10 % of the address space). A locality band = a maximal run of
    adjacent bins each holding more than LOCALITY_BAND_SHARE of the requests (0.1 % = the share
    every bin would hold if requests were spread evenly). Reads, writes and both.
  * Flushes and discards are counted in their own columns, left out of sizes, read/random
    percentages and IOPS (which count reads and writes only).
  * Trace length: first to last event of the trace (any action); average IOPS = reads and
    writes issued / trace length.
"""
from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

SECTOR_BYTES = 512
BINS = 1000
HOT_BINS = 100                      # the hottest 10 % of the address space
LOCALITY_BAND_SHARE = 1.0 / BINS    # a band's bins each hold more than an even spread's share
SAMPLE_POINTS = 4000                # LBA-vs-time points kept for plots (reservoir, fixed seed)
FORMATS = ("tracefs", "blkparse")

# tracefs: "<comm>-<pid> [cpu] flags 1234.567890: block_rq_issue: 254,0 WS 65536 () 319433096 + 128 be,0,4 [dd]"
_TRACEFS = re.compile(
    r"(\d+\.\d+): block_rq_(issue|complete|requeue): (\d+),(\d+) (\S+) (?:\d+ )?\([^)]*\) (\d+) \+ (\d+)")
_TRACEFS_OTHER = re.compile(r"\d+\.\d+: \w+: ")
_LOST = re.compile(r"CPU:\d+ \[LOST (\d+) EVENTS\]")
# blkparse: "  8,0    3        4     0.000003000  1234  D   R 12345 + 8 [dd]"
_BLKPARSE = re.compile(r"\s*(\d+),(\d+)\s+\d+\s+\d+\s+(\d+\.\d+)\s+\d+\s+([A-Za-z])\s+(\S+)(?:\s+(\d+) \+ (\d+))?")
_BLKPARSE_SUMMARY = re.compile(r"(CPU\d+|Total) \(")

# normalised actions
ISSUE, COMPLETE, REQUEUE, MERGE, OTHER = "D", "C", "R", "M", "-"
_TRACEFS_ACTION = {"issue": ISSUE, "complete": COMPLETE, "requeue": REQUEUE}
_BLKPARSE_ACTION = {"D": ISSUE, "C": COMPLETE, "R": REQUEUE, "M": MERGE, "F": MERGE}


class TraceError(ValueError):
    """The trace cannot be characterized (missing file, unknown format, no requests)."""


def op_of(rwbs: str) -> str:
    """'R', 'W', 'F' (flush), 'D' (discard) or 'N' (other) from the kernel's rwbs string.

    A leading F before another operation letter is the preflush flag (FWS: a write with a
    preflush); the flush request the block layer sends to the device shows as FF or F."""
    s = rwbs
    if len(s) > 1 and s[0] == "F" and s[1] in "RWDNF":
        s = s[1:]
    c = s[:1]
    return c if c in ("R", "W", "F", "D") else "N"


class Event(NamedTuple):
    t: float          # seconds
    action: str       # ISSUE / COMPLETE / REQUEUE / MERGE / OTHER
    dev: tuple[int, int]
    op: str           # R W F D N
    sector: int
    sectors: int


@dataclass
class ParseCounts:
    lines: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    lost_events: int = 0
    ignored: int = 0          # valid lines of events we do not use (other actions, headers, summary)


def open_text(path: str | Path):
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace file '{path}' does not exist")
    if not path.is_file():
        raise TraceError(f"trace '{path}' is not a file")
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", errors="replace")
    return open(path, "rt", errors="replace")


def _malformed(counts: ParseCounts, line: str) -> None:
    counts.malformed += 1
    if len(counts.malformed_examples) < 5:
        counts.malformed_examples.append(line.rstrip("\n")[:200])


_OPS: dict[str, str] = {}
_DEVS: dict[tuple[str, str], tuple[int, int]] = {}


def _op(rwbs: str) -> str:
    op = _OPS.get(rwbs)
    if op is None:
        op = _OPS[rwbs] = op_of(rwbs)
    return op


def _dev(ma: str, mi: str) -> tuple[int, int]:
    d = _DEVS.get((ma, mi))
    if d is None:
        d = _DEVS[(ma, mi)] = (int(ma), int(mi))
    return d


def parse_tracefs(lines: Iterable[str], counts: ParseCounts) -> Iterator[Event]:
    match, other, lost = _TRACEFS.match, _TRACEFS_OTHER.search, _LOST.search
    actions = _TRACEFS_ACTION
    n_lines = 0
    for line in lines:
        n_lines += 1
        # the event name sits after the task, CPU and flags: start the regex there, not at column 0
        i = line.find(": block_rq_")
        m = match(line, line.rfind(" ", 0, i) + 1) if i > 0 else None
        if m is not None:
            t, kind, ma, mi, rwbs, sector, n = m.groups()
            yield Event(float(t), actions[kind], _dev(ma, mi), _op(rwbs), int(sector), int(n))
            continue
        counts.lines = n_lines
        s = line.strip()
        if not s or s[0] == "#":
            counts.ignored += 1
            continue
        lm = lost(s)
        if lm is not None:
            counts.lost_events += int(lm.group(1))
        elif other(s) is not None and "block_rq_" not in s:
            counts.ignored += 1          # another event in the same buffer
        else:
            _malformed(counts, line)
    counts.lines = n_lines


def parse_blkparse(lines: Iterable[str], counts: ParseCounts) -> Iterator[Event]:
    match = _BLKPARSE.match
    summary = False
    for line in lines:
        counts.lines += 1
        if summary:
            counts.ignored += 1
            continue
        m = match(line)
        if m is not None:
            ma, mi, t, action, rwbs, sector, n = m.groups()
            act = _BLKPARSE_ACTION.get(action, OTHER)
            if act != OTHER and sector is None and op_of(rwbs) not in ("F", "N"):
                _malformed(counts, line)      # a data request without its sector range
                continue
            yield Event(float(t), act, _dev(ma, mi), _op(rwbs),
                        int(sector) if sector else 0, int(n) if n else 0)
            continue
        s = line.strip()
        if not s:
            counts.ignored += 1
        elif _BLKPARSE_SUMMARY.match(s):
            summary = True                    # blkparse's per-CPU / total summary follows
            counts.ignored += 1
        else:
            _malformed(counts, line)


def events(path: str | Path, fmt: str, counts: ParseCounts) -> Iterator[Event]:
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")
    parse = parse_tracefs if fmt == "tracefs" else parse_blkparse
    with open_text(path) as fh:
        yield from parse(fh, counts)


def device_capacity_sectors(dev: tuple[int, int]) -> int | None:
    """A block device's size in sectors from sysfs (/sys/dev/block/MAJ:MIN/size), if present."""
    try:
        n = int(Path(f"/sys/dev/block/{dev[0]}:{dev[1]}/size").read_text())
    except (OSError, ValueError):
        return None
    return n or None


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

    def __init__(self, capacity_sectors: int | None = None, sample_points: int = SAMPLE_POINTS):
        self.capacity_override = capacity_sectors
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
            self.capacities[dev] = self.capacity_override or device_capacity_sectors(dev)
        return self.capacities[dev]

    def feed(self, ev: Event) -> None:
        t = ev.t
        if self.first_t is None:
            self.first_t = t
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
            b = ev.sector * BINS // cap
            if b >= BINS:
                self.beyond_capacity += 1
                b = BINS - 1
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
        """The seed's summary statistics plus counts, locality and latency (units in names)."""
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


def characterize(path: str | Path, fmt: str, capacity_sectors: int | None = None,
                 sample_points: int = SAMPLE_POINTS, require_requests: bool = True
                 ) -> tuple[dict, dict, ParseCounts]:
    """(summary row, distributions, parse counts) of a trace file. Raises TraceError on a
    missing file, an unknown format, or (require_requests) a trace without any request.

    Without a capacity (argument or sysfs) the address space is the highest end sector seen,
    found by a first pass over the file (the summary says which: capacity_source)."""
    if capacity_sectors is not None and capacity_sectors <= 0:
        raise TraceError(f"--capacity-sectors must be > 0, got {capacity_sectors}")
    source = "given" if capacity_sectors else "sysfs"
    if capacity_sectors is None:
        devs, top = set(), 0
        for ev in events(path, fmt, ParseCounts()):
            if ev.action == ISSUE:
                devs.add(ev.dev)
                top = max(top, ev.sector + ev.sectors)
        if devs and not all(device_capacity_sectors(d) for d in devs):
            capacity_sectors, source = top or None, "highest sector in the trace"
    counts = ParseCounts()
    ch = Characterizer(capacity_sectors, sample_points)
    feed = ch.feed
    for ev in events(path, fmt, counts):
        feed(ev)
    row = ch.summary(counts)
    if row["events"] == 0 and require_requests:
        why = (f"{counts.malformed} malformed line(s), e.g. {counts.malformed_examples[0]!r}"
               if counts.malformed else f"{counts.lines} line(s), none a block request")
        raise TraceError(f"trace '{path}' holds no block requests ({fmt} format): {why}; "
                         + ("is --format right?" if counts.malformed else "the traced device had no I/O"))
    row["capacity_source"] = source
    row["format"] = fmt
    return row, ch.distributions(), counts


# The seed's "Summary statistics" columns, in its order, and what this package calls them.
SEED_COLUMNS = (
    ("Read Percentage", "read_percent"), ("Random Percentage", "random_percent"), ("Average IOPS", "avg_iops"),
    ("Minimum Read Request (KiB)", "read_kib_min"), ("Median Read Request (KiB)", "read_kib_median"),
    ("Maximum Read Request (KiB)", "read_kib_max"), ("Mean Read Request (KiB)", "read_kib_mean"),
    ("Standard Deviation (KiB)", "read_kib_stdev"),
    ("Minimum Write Request (KiB)", "write_kib_min"), ("Median Write Request (KiB)", "write_kib_median"),
    ("Maximum Write Request (KiB)", "write_kib_max"), ("Mean Write Request (KiB)", "write_kib_mean"),
    ("Standard Deviation (KiB) ", "write_kib_stdev"),
    ("Random Read Operations", "random_read_ops"), ("Random Write Operations", "random_write_ops"),
    ("Sequential Read Operations", "sequential_read_ops"), ("Sequential Write Operations", "sequential_write_ops"),
    ("Trace Length Seconds", "trace_length_s"),
)
CSV_COLUMNS = tuple(k for _, k in SEED_COLUMNS) + (
    "read_ops", "write_ops", "flush_ops", "discard_ops", "other_ops", "merges", "requeues",
    "read_bytes", "write_bytes", "locality_percent", "locality_bands", "read_locality_percent",
    "read_locality_bands", "write_locality_percent", "write_locality_bands",
    "read_latency_us_mean", "read_latency_us_median", "read_latency_us_p99",
    "write_latency_us_mean", "write_latency_us_median", "write_latency_us_p99",
    "device", "devices", "capacity_sectors", "capacity_source", "requests_beyond_capacity",
    "unmatched_issues", "unmatched_completions", "events", "lines", "malformed_lines", "lost_events", "format")


def write_outputs(row: dict, dists: dict, counts: ParseCounts, out_dir: str | Path, trace: str | Path) -> dict:
    """characterization.json (summary, distributions, malformed examples) and characterization.csv."""
    import pandas as pd

    from . import results
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    row = {"trace_file": str(trace), **row}
    results.write_json(out / "characterization.json",
                       {"summary": _jsonable(row), "malformed_examples": counts.malformed_examples,
                        "definitions": __doc__.split("Definitions (also in the README and the brief):")[1].strip(),
                        **{k: v for k, v in dists.items() if k != "sample"}})
    cols = ["trace_file", *CSV_COLUMNS]
    results.write_csv(out / "characterization.csv", pd.DataFrame([{k: row.get(k) for k in cols}], columns=cols))
    return {"json": out / "characterization.json", "csv": out / "characterization.csv"}


def _jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def describe(row: dict) -> str:
    """The seed's one-line analysis: 'nearly 100 % read, 84 % random, 4–256 KiB'."""
    rp, rnd = row.get("read_percent"), row.get("random_percent")
    if rp is None or (isinstance(rp, float) and math.isnan(rp)):
        return "no read or write requests"
    if rp >= 99.5:
        mix = "nearly 100 % read" if rp < 100 else "100 % read"
    elif rp <= 0.5:
        mix = "nearly 100 % write" if rp > 0 else "100 % write"
    else:
        mix = f"{rp:.0f} % read" if rp >= 50 else f"{100 - rp:.0f} % write"
    lo = [row.get(f"{k}_kib_min") for k in ("read", "write")]
    hi = [row.get(f"{k}_kib_max") for k in ("read", "write")]
    lo = [v for v in lo if v is not None and not math.isnan(v)]
    hi = [v for v in hi if v is not None and not math.isnan(v)]
    sizes = f", {_kib(min(lo))}–{_kib(max(hi))} KiB" if lo and hi else ""
    return f"{mix}, {rnd:.0f} % random{sizes}"


def _kib(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def main_characterize(trace: str, fmt: str, capacity_sectors: int | None, out_dir: str) -> dict:
    """The `storagebrief characterize` command: returns the summary row and writes the outputs."""
    row, dists, counts = characterize(trace, fmt, capacity_sectors)
    paths = write_outputs(row, dists, counts, out_dir, trace)
    return {"row": row, "paths": paths, "counts": counts}


if __name__ == "__main__":   # pragma: no cover - convenience for a quick look
    import sys
    r, _, _ = characterize(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tracefs")
    print(json.dumps(_jsonable(r), indent=2))
