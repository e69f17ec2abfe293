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


def tracefs_line(line: str, counts: ParseCounts) -> Event | None:
    """One tracefs line: its event, or None (header, lost-events line, other event, malformed:
    counted in counts). Does not count the line itself."""
    # the event name sits after the task, CPU and flags: start the regex there, not at column 0
    i = line.find(": block_rq_")
    m = _TRACEFS.match(line, line.rfind(" ", 0, i) + 1) if i > 0 else None
    if m is not None:
        t, kind, ma, mi, rwbs, sector, n = m.groups()
        return Event(float(t), _TRACEFS_ACTION[kind], _dev(ma, mi), _op(rwbs), int(sector), int(n))
    s = line.strip()
    if not s or s[0] == "#":
        counts.ignored += 1
        return None
    lm = _LOST.search(s)
    if lm is not None:
        counts.lost_events += int(lm.group(1))
    elif _TRACEFS_OTHER.search(s) is not None and "block_rq_" not in s:
        counts.ignored += 1          # another event in the same buffer
    else:
        _malformed(counts, line)
    return None


def parse_tracefs(lines: Iterable[str], counts: ParseCounts) -> Iterator[Event]:
    for line in lines:
        counts.lines += 1
        ev = tracefs_line(line, counts)
        if ev is not None:
            yield ev


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


# -- the fast path: whole chunks of the file at once, numpy ---------------------------------------
#
# Same results as Characterizer.feed() over events() (the reference, kept as the definition and
# tested against on random traces): the file is read in byte chunks cut at line ends; the lines of
# a chunk that have the kernel's exact shape are split into columns with numpy, any other line
# (headers, lost-events lines, other events, odd or malformed lines) goes through tracefs_line()
# and its event is put back in its place; a chunk that is not plain ASCII or holds a carriage
# return is read line by line. FastCharacterizer.feed_batch() computes a batch's statistics in
# bulk; a batch with a requeue (rare; its effect depends on order) is fed event by event.

CHUNK_BYTES = 2 << 20
BLKPARSE_BATCH = 65536          # events per batch of blkparse text (parsed line by line)
_A_ISSUE, _A_COMPLETE, _A_REQUEUE, _A_MERGE, _A_OTHER = range(5)
_ACT_CODE = {ISSUE: _A_ISSUE, COMPLETE: _A_COMPLETE, REQUEUE: _A_REQUEUE, MERGE: _A_MERGE, OTHER: _A_OTHER}
_OP_NAMES = ("R", "W", "F", "D", "N")
_OP_CODE = {o: i for i, o in enumerate(_OP_NAMES)}
_MAX_DEVS = 1 << 9               # devices per trace in the packed key (more: tuple keys, event by event)
_MAX_SECTOR = 1 << 50            # beyond: event by event (Python integers)
_PRE, _POST = 32, 64             # padding around a chunk so that fixed windows stay inside


def _read_chunks(path: str | Path) -> Iterator[bytes]:
    """The file's bytes in chunks that end at a line end (the last one gets a newline if missing)."""
    open_text(path).close()          # the checks and messages of open_text
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        rest = b""
        while True:
            block = fh.read(CHUNK_BYTES)
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]
        if rest:
            yield rest + b"\n"


def _text_lines(chunk: bytes) -> Iterator[str]:
    """The chunk's lines exactly as reading the file as text gives them."""
    import io
    return iter(io.TextIOWrapper(io.BytesIO(chunk), errors="replace"))


class _Batch:
    """Columns of events: t, action, device id, op, sector, sectors (numpy arrays)."""
    __slots__ = ("t", "act", "dev", "op", "sector", "n")

    def __init__(self, t, act, dev, op, sector, n):
        self.t, self.act, self.dev, self.op, self.sector, self.n = t, act, dev, op, sector, n

    def __len__(self):
        return len(self.t)


class _Devices:
    """Device tuples <-> small ids (shared by the parser and the characterizer)."""

    def __init__(self):
        self.ids: dict[tuple[int, int], int] = {}
        self.devs: list[tuple[int, int]] = []

    def id(self, dev: tuple[int, int]) -> int:
        i = self.ids.get(dev)
        if i is None:
            i = self.ids[dev] = len(self.devs)
            self.devs.append(dev)
        return i


def _batch_of_events(evs: list[Event], devices: _Devices) -> _Batch:
    import numpy as np
    dev_id, act, op = devices.id, _ACT_CODE, _OP_CODE
    return _Batch(np.array([e.t for e in evs], dtype=np.float64),
                  np.array([act[e.action] for e in evs], dtype=np.int8),
                  np.array([dev_id(e.dev) for e in evs], dtype=np.int64),
                  np.array([op[e.op] for e in evs], dtype=np.int8),
                  np.array([e.sector for e in evs], dtype=object if any(e.sector >= _MAX_SECTOR for e in evs) else np.int64),
                  np.array([e.sectors for e in evs], dtype=object if any(e.sectors >= _MAX_SECTOR for e in evs) else np.int64))


def _concat(a: _Batch, b: _Batch, order) -> _Batch:
    import numpy as np
    cols = []
    for k in _Batch.__slots__:
        x, y = getattr(a, k), getattr(b, k)
        if x.dtype != y.dtype:
            x, y = x.astype(object), y.astype(object)
        cols.append(np.concatenate([x, y])[order])
    return _Batch(*cols)


def _digits(a, start, end, width: int):
    """(ok, value) of the decimal tokens a[start:end] (1..width digits, width <= 15) of each row."""
    import numpy as np
    length = end - start
    ar = np.arange(width)
    d = a[end[:, None] - width + ar] - np.uint8(48)
    inside = ar >= (width - length)[:, None]
    ok = (length >= 1) & (length <= width) & ((d <= 9) | ~inside).all(1)
    d[~inside] = 0
    # float64 through BLAS: exact, every partial sum is below 10**15 < 2**53
    val = (d.astype(np.float64) @ (10.0 ** np.arange(width - 1, -1, -1))).astype(np.int64)
    return ok, val


_MARK = b" block_rq_"


def _tracefs_chunk(chunk: bytes, counts: ParseCounts, devices: _Devices) -> _Batch | None:
    """A chunk of whole lines -> its events in line order; counts lines, lost, malformed, ..."""
    import numpy as np
    if not chunk.isascii() or b"\r" in chunk:
        evs = []
        for line in _text_lines(chunk):
            counts.lines += 1
            ev = tracefs_line(line, counts)
            if ev is not None:
                evs.append(ev)
        return _batch_of_events(evs, devices) if evs else None
    a = np.frombuffer(b"\n" * _PRE + chunk + b"\0" * _POST, dtype=np.uint8)
    body = a[_PRE:_PRE + len(chunk)]
    nl = np.flatnonzero(body == 10) + _PRE               # line i ends at nl[i]
    nlines = len(nl)
    counts.lines += nlines
    # ": block_rq_" markers (at their colon), the first and only one of their line
    col = np.flatnonzero(body == 58) + _PRE
    mark = np.frombuffer(_MARK, dtype=np.uint8)
    col = col[(a[col[:, None] + np.arange(1, 1 + len(mark))] == mark).all(1)]
    li = np.searchsorted(nl, col)
    per_line = np.bincount(li, minlength=nlines)
    keep = per_line[li] == 1
    mk, li = col[keep], li[keep]
    lend = nl[li]
    # action: "issue: " / "complete: " / "requeue: "
    c0 = a[mk + 11]
    act = np.full(len(mk), -1, dtype=np.int8)
    f0 = np.zeros(len(mk), dtype=np.int64)
    for word, code in ((b"issue: ", _A_ISSUE), (b"complete: ", _A_COMPLETE), (b"requeue: ", _A_REQUEUE)):
        w = np.frombuffer(word, dtype=np.uint8)
        hit = (c0 == w[0])
        hit[hit] = (a[mk[hit][:, None] + 11 + np.arange(len(w))] == w).all(1)
        act[hit], f0[hit] = code, mk[hit] + 11 + len(w)
    ok = act >= 0
    # timestamp: the token of digits and one dot right before the colon, after a space
    W = 20
    g = a[mk[:, None] - W + np.arange(W)]
    dot = g == 46
    notok = ~(((g - np.uint8(48)) <= 9) | dot)
    tl = np.argmax(notok[:, ::-1], axis=1)                  # token length
    rows = np.arange(len(mk))
    ok &= notok.any(1) & (g[rows, W - 1 - tl] == 32)
    frac = np.argmax(dot[:, ::-1], axis=1)                  # digits after the (last) dot
    dpos = mk - 1 - frac
    oki, ip = _digits(a, mk - tl, dpos, 10)                 # digits only: exactly one dot
    okf, fp = _digits(a, dpos + 1, mk, 9)
    ok &= oki & okf
    whole = ip * (10 ** frac) + fp
    ok &= whole < (1 << 53)
    t = whole / (10.0 ** frac)                               # exact: float(text), correctly rounded
    # the fields after the action: tokens between single spaces
    sp = np.flatnonzero(body == 32) + _PRE
    j = np.searchsorted(sp, f0)
    K = 7
    idx = j[:, None] + np.arange(K)
    ends = np.where(idx < len(sp), sp[np.minimum(idx, len(sp) - 1)] if len(sp) else 0, lend[:, None])
    ends = np.minimum(ends, lend[:, None])
    starts = np.concatenate([f0[:, None], ends[:, :-1] + 1], axis=1)
    # dev "maj,min" (up to 8 characters) and rwbs
    ok &= (ends[:, 0] < lend) & (ends[:, 1] < lend) & (ends[:, 1] > starts[:, 1])
    dl = ends[:, 0] - starts[:, 0]
    ok &= (dl >= 3) & (dl <= 8)
    dg = np.where(np.arange(8) < dl[:, None], a[starts[:, 0][:, None] + np.arange(8)], 0)
    dkey = np.ascontiguousarray(dg).view(np.uint64)[:, 0]
    off = (a[starts[:, 2]] != 40).astype(np.int64)         # the bytes field of issue lines
    okb, _ = _digits(a, starts[:, 2], ends[:, 2], 12)
    ok &= (off == 0) | (okb & (ends[:, 2] < lend))
    p = 2 + off
    ps, pe = starts[rows, p], ends[rows, p]
    ok &= (pe - ps == 2) & (a[ps] == 40) & (a[ps + 1] == 41) & (pe < lend)
    ss, se = starts[rows, p + 1], ends[rows, p + 1]
    oks, sector = _digits(a, ss, se, 15)
    ok &= oks & (se < lend)
    qs, qe = starts[rows, p + 2], ends[rows, p + 2]
    ok &= (qe - qs == 1) & (a[qs] == 43) & (qe < lend)
    ns, ne = starts[rows, p + 3], ends[rows, p + 3]
    okn, n = _digits(a, ns, ne, 12)
    ok &= okn
    # op from the rwbs string (op_of: a leading F before R W D N F is the preflush flag)
    r0, r1 = a[starts[:, 1]], a[starts[:, 1] + 1]
    long_ = ends[:, 1] - starts[:, 1] > 1
    shift = long_ & (r0 == 70) & np.isin(r1, np.frombuffer(b"RWDNF", dtype=np.uint8))
    c = np.where(shift, r1, r0)
    op = np.full(len(mk), 4, dtype=np.int8)
    for code, ch_ in enumerate(b"RWFD"):
        op[c == ch_] = code
    # devices: each distinct token once
    dev = np.zeros(len(mk), dtype=np.int64)
    if len(mk):
        uniq, inv = np.unique(dkey[ok], return_inverse=True) if not (dkey[ok] == dkey[ok][:1]).all() or not ok.any() \
            else (dkey[ok][:1], np.zeros(int(ok.sum()), dtype=np.int64))
        ids = np.empty(len(uniq), dtype=np.int64)
        for i, k in enumerate(uniq.tolist()):
            txt = np.array([k], dtype=np.uint64).view(np.uint8).tobytes().rstrip(b"\0")
            m = re.fullmatch(rb"(\d+),(\d+)", txt)
            ids[i] = devices.id(_dev(m.group(1).decode(), m.group(2).decode())) if m else -1
        dev[ok] = ids[inv]
        ok &= dev >= 0
    fast = _Batch(t[ok], act[ok], dev[ok], op[ok], sector[ok], n[ok])
    # every other line, read as text, event put back in its place
    done = np.zeros(nlines, dtype=bool)
    done[li[ok]] = True
    odd = np.flatnonzero(~done)
    if len(odd) == 0:
        return fast
    evs, where = [], []
    starts_l = np.concatenate([[_PRE], nl[:-1] + 1])
    for i in odd.tolist():
        line = a[starts_l[i]:nl[i] + 1].tobytes().decode("ascii")
        ev = tracefs_line(line, counts)
        if ev is not None:
            evs.append(ev)
            where.append(i)
    if not evs:
        return fast
    order = np.argsort(np.concatenate([li[ok], np.array(where, dtype=np.int64)]), kind="stable")
    return _concat(fast, _batch_of_events(evs, devices), order)


def _blkparse_batches(chunks: Iterable[bytes], counts: ParseCounts, devices: _Devices) -> Iterator[_Batch]:
    def lines():
        for chunk in chunks:
            yield from _text_lines(chunk)
    evs = []
    for ev in parse_blkparse(lines(), counts):
        evs.append(ev)
        if len(evs) >= BLKPARSE_BATCH:
            yield _batch_of_events(evs, devices)
            evs = []
    if evs:
        yield _batch_of_events(evs, devices)


def batches(path: str | Path, fmt: str, counts: ParseCounts, devices: _Devices) -> Iterator[_Batch]:
    """The trace's events in order, as column batches (the fast path of events())."""
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")
    chunks = _read_chunks(path)
    if fmt == "blkparse":
        yield from _blkparse_batches(chunks, counts, devices)
        return
    for chunk in chunks:
        b = _tracefs_chunk(chunk, counts, devices)
        if b is not None and len(b):
            yield b


class FastCharacterizer(Characterizer):
    """Characterizer.feed() in bulk: the same state, a batch of events at a time."""

    def __init__(self, capacity_sectors: int | None = None, sample_points: int = SAMPLE_POINTS,
                 devices: _Devices | None = None):
        import numpy as np
        super().__init__(capacity_sectors, sample_points)
        self.devices = devices or _Devices()
        self._np_bins: dict[int, "np.ndarray"] = {}        # dev id -> 2 x BINS (reads, writes)
        self._last: dict[int, int] = {}                     # dev id -> end sector of its last read/write
        self._pend: dict = {}                               # key -> [(t, sectors, seq, bin, prev_end), ...]
        self._keys = np.random.default_rng(0)               # sample: the smallest random keys win
        self._sample_cols = None                            # (key, t, sector, sectors, op, seq)

    # keys of the in-flight table: (sector, device, op) packed in an integer
    @staticmethod
    def _key(sector: int, dev: int, op: int):
        return ((sector << 9 | dev) << 3 | op) if dev < _MAX_DEVS else (sector, dev, op)

    def _bins_of(self, dev: int):
        import numpy as np
        b = self._np_bins.get(dev)
        if b is None:
            b = self._np_bins[dev] = np.zeros((2, BINS), dtype=np.int64)
        return b

    def _cap_of(self, dev: int) -> int | None:
        return self.capacity(self.devices.devs[dev])

    def feed_batch(self, b: _Batch) -> None:
        import numpy as np
        if not len(b):
            return
        if self.first_t is None:
            self.first_t = float(b.t[0])
        self.last_t = float(b.t[-1])
        if ((b.act == _A_REQUEUE).any() or b.sector.dtype == object or b.n.dtype == object
                or int(b.dev.max()) >= _MAX_DEVS or int(b.sector.max()) >= _MAX_SECTOR
                or int(b.n.max()) >= _MAX_SECTOR):
            self._feed_each(b)
            return
        self.counts["merges"] += int((b.act == _A_MERGE).sum())
        iss = b.act == _A_ISSUE
        for code, k in enumerate(np.bincount(b.op[iss], minlength=5).tolist()):
            if k:
                self.counts[_OP_NAMES[code]] += k
        n_ev = len(b)
        seq_all = np.zeros(n_ev, dtype=np.int8)             # -1 not data, 0 random, 1 sequential
        bin_all = np.full(n_ev, -1, dtype=np.int64)
        prev_all = np.full(n_ev, -1, dtype=np.int64)
        data = np.flatnonzero(iss & (b.op <= 1))
        seq_all[:] = -1
        if len(data):
            if self.first_issue_t is None:
                self.first_issue_t = float(b.t[data[0]])
            dd, s, nn, op = b.dev[data], b.sector[data], b.n[data], b.op[data]
            end = s + nn
            prev = np.empty(len(data), dtype=np.int64)
            devs = np.unique(dd).tolist()
            for d in devs:
                sel = np.flatnonzero(dd == d) if len(devs) > 1 else slice(None)
                e = end[sel]
                pv = np.empty(len(e), dtype=np.int64)
                pv[0] = self._last.get(d, -1)
                pv[1:] = e[:-1]
                prev[sel] = pv
                self._last[d] = int(e[-1])
            seq = prev == s
            seq_all[data], prev_all[data] = seq, prev
            for o in (0, 1):
                for q in (False, True):
                    m = (op == o) & (seq == q)
                    if m.any():
                        k, c = np.unique(nn[m], return_counts=True)
                        h = self.sizes[(_OP_NAMES[o], q)]
                        for kk, cc in zip(k.tolist(), c.tolist()):
                            h[kk] += cc
            for d in devs:
                m = dd == d
                self.per_dev[self.devices.devs[d]] += int(m.sum())
                cap = self._cap_of(d)
                if cap:
                    bi = s[m] * BINS // cap
                    over = bi >= BINS
                    self.beyond_capacity += int(over.sum())
                    bi[over] = BINS - 1
                    bins = self._bins_of(d)
                    om = op[m]
                    bins[0] += np.bincount(bi[om == 0], minlength=BINS)
                    bins[1] += np.bincount(bi[om == 1], minlength=BINS)
                    bin_all[data[m]] = bi
            self._sample_add(b.t[data], s, nn, op, seq)
        self._match(b, iss, seq_all, bin_all, prev_all)

    def _match(self, b: _Batch, iss, seq_all, bin_all, prev_all) -> None:
        """FIFO issue <-> completion per (device, sector, op), the in-flight table carried over."""
        import numpy as np
        comp = b.act == _A_COMPLETE
        ev = np.flatnonzero(iss | comp)
        if not len(ev):
            return
        keys = ((b.sector[ev] << 9 | b.dev[ev]) << 3) | b.op[ev].astype(np.int64)
        carried_keys, carried_t, carried_entries = [], [], []
        pend = self._pend
        if pend:
            for k in set(filter(pend.__contains__, keys[comp[ev]].tolist())):
                for e in pend.pop(k):
                    carried_keys.append(k)
                    carried_t.append(e[0])
                    carried_entries.append(e)
        nc = len(carried_keys)
        allk = np.concatenate([np.array(carried_keys, dtype=np.int64), keys])
        is_i = np.concatenate([np.ones(nc, dtype=bool), iss[ev]])
        tt = np.concatenate([np.array(carried_t, dtype=np.float64), b.t[ev]])
        src = np.concatenate([-1 - np.arange(nc), ev])      # < 0: carried entry, else batch position
        order = np.argsort(allk, kind="stable")
        ks, ii = allk[order], is_i[order]
        L = len(ks)
        start = np.empty(L, dtype=bool)
        start[0] = True
        start[1:] = ks[1:] != ks[:-1]
        gid = np.cumsum(start) - 1
        x = np.where(ii, 1, -1)
        X = np.cumsum(x)
        base = (X - x)[start]
        Xw = X - base[gid]
        big = L + 1
        pm = np.minimum.accumulate(Xw - gid * big) + gid * big
        z = np.minimum(pm, 0)
        zprev = np.empty(L, dtype=np.int64)
        zprev[0] = 0
        zprev[1:] = z[:-1]
        zprev[start] = 0
        pops = ~ii
        unmatched = pops & (z < zprev)
        matched = pops & ~unmatched
        self.counts["unmatched_completions"] += int(unmatched.sum())
        m_per_group = np.bincount(gid[matched], minlength=int(gid[-1]) + 1)
        icum = np.cumsum(ii)
        rank = icum - 1 - (icum - ii)[start][gid]
        took = ii & (rank < m_per_group[gid])
        pi, ci = order[np.flatnonzero(took)], order[np.flatnonzero(matched)]
        if len(ci):
            lat = np.rint((tt[ci] - tt[pi]) * 1e6).astype(np.int64)
            lop = allk[ci] & 7
            for o in range(4):
                sel = lat[lop == o]
                if len(sel):
                    k, c = np.unique(sel, return_counts=True)
                    h = self.latency_us[_OP_NAMES[o]]
                    for kk, cc in zip(k.tolist(), c.tolist()):
                        h[kk] += cc
        left = order[np.flatnonzero(ii & ~took)]
        for r, k in zip(left.tolist(), allk[left].tolist()):
            sr = int(src[r])
            if sr < 0:
                entry = carried_entries[-1 - sr]
            else:
                q = int(seq_all[sr])
                entry = (float(b.t[sr]), int(b.n[sr]), None if q < 0 else bool(q),
                         None if bin_all[sr] < 0 else int(bin_all[sr]),
                         None if q < 0 or prev_all[sr] < 0 else int(prev_all[sr]))
            pend.setdefault(k, []).append(entry)

    def _sample_add(self, t, s, n, op, seq) -> None:
        import numpy as np
        if not self._sample_cap:
            return
        keys = self._keys.random(len(t))
        cols = (keys, np.asarray(t, dtype=np.float64), np.asarray(s, dtype=object if s.dtype == object else np.int64),
                np.asarray(n, dtype=object if n.dtype == object else np.int64), np.asarray(op, dtype=np.int8),
                np.asarray(seq, dtype=bool))
        if self._sample_cols is not None:
            cols = tuple(np.concatenate([x, y]) if x.dtype == y.dtype else np.concatenate([x.astype(object), y.astype(object)])
                         for x, y in zip(self._sample_cols, cols))
        if len(cols[0]) > self._sample_cap:
            keep = np.argsort(cols[0], kind="stable")[:self._sample_cap]
            cols = tuple(c[keep] for c in cols)
        self._sample_cols = cols

    def _feed_each(self, b: _Batch) -> None:
        """Event by event (a batch with a requeue, huge sectors or many devices)."""
        import numpy as np
        pend, last, devs = self._pend, self._last, self.devices.devs
        smp = []
        for t, act, dev, op, sector, n in zip(b.t.tolist(), b.act.tolist(), b.dev.tolist(), b.op.tolist(),
                                              b.sector.tolist(), b.n.tolist()):
            opn = _OP_NAMES[op]
            if act == _A_ISSUE:
                self.counts[opn] += 1
                key = self._key(sector, dev, op)
                if op > 1:
                    pend.setdefault(key, []).append((t, n, None, None, None))
                    continue
                if self.first_issue_t is None:
                    self.first_issue_t = t
                prev_end = last.get(dev)
                seq = prev_end == sector
                last[dev] = sector + n
                self.sizes[(opn, seq)][n] += 1
                self.per_dev[devs[dev]] += 1
                cap = self._cap_of(dev)
                bi = None
                if cap:
                    bi = sector * BINS // cap
                    if bi >= BINS:
                        self.beyond_capacity += 1
                        bi = BINS - 1
                    self._bins_of(dev)[op, bi] += 1
                pend.setdefault(key, []).append((t, n, seq, bi, prev_end))
                smp.append((t, sector, n, op, seq))
            elif act == _A_COMPLETE or act == _A_REQUEUE:
                key = self._key(sector, dev, op)
                q = pend.get(key)
                issued = q.pop(0) if q else None
                if q is not None and not q:
                    del pend[key]
                if act == _A_COMPLETE:
                    if issued is None:
                        self.counts["unmatched_completions"] += 1
                    elif op < 4:
                        self.latency_us[opn][round((t - issued[0]) * 1e6)] += 1
                    continue
                self.counts["requeues"] += 1
                if issued is None:
                    continue
                _, n0, seq, bi, prev_end = issued
                self.counts[opn] -= 1
                if seq is None:
                    continue
                if last.get(dev) == sector + n0:
                    if prev_end is None:
                        last.pop(dev, None)
                    else:
                        last[dev] = prev_end
                h = self.sizes[(opn, seq)]
                h[n0] -= 1
                if not h[n0]:
                    del h[n0]
                self.per_dev[devs[dev]] -= 1
                if bi is not None:
                    self._bins_of(dev)[op, bi] -= 1
            elif act == _A_MERGE:
                self.counts["merges"] += 1
        if smp:
            obj = any(p[1] >= _MAX_SECTOR or p[2] >= _MAX_SECTOR for p in smp)
            dt = object if obj else np.int64
            self._sample_add(np.array([p[0] for p in smp]), np.array([p[1] for p in smp], dtype=dt),
                             np.array([p[2] for p in smp], dtype=dt), np.array([p[3] for p in smp], dtype=np.int8),
                             np.array([p[4] for p in smp], dtype=bool))

    def _materialize(self) -> None:
        self._inflight = self._pend
        self.bins = {self.devices.devs[d]: {"R": b[0].tolist(), "W": b[1].tolist()} for d, b in self._np_bins.items()}
        for h in self.sizes.values():
            for k in [k for k, v in h.items() if not v]:
                del h[k]
        c = self._sample_cols
        self.sample = [] if c is None else [
            (t, s, n, _OP_NAMES[o], q) for t, s, n, o, q in zip(c[1].tolist(), c[2].tolist(), c[3].tolist(),
                                                                 c[4].tolist(), c[5].tolist())]

    def summary(self, parse: ParseCounts | None = None) -> dict:
        self._materialize()
        return super().summary(parse)

    def distributions(self) -> dict:
        self._materialize()
        return super().distributions()


def characterize(path: str | Path, fmt: str, capacity_sectors: int | None = None,
                 sample_points: int = SAMPLE_POINTS, require_requests: bool = True,
                 reference: bool = False) -> tuple[dict, dict, ParseCounts]:
    """(summary row, distributions, parse counts) of a trace file. Raises TraceError on a
    missing file, an unknown format, or (require_requests) a trace without any request.

    The fast path (numpy, whole chunks) gives the same statistics as the reference
    (reference=True: event by event through Characterizer.feed, the definitions as code); the
    plot sample is a uniform sample of the data requests either way, not the same one.

    Without a capacity (argument or sysfs) the address space is the highest end sector seen,
    found by a first pass over the file (the summary says which: capacity_source)."""
    if capacity_sectors is not None and capacity_sectors <= 0:
        raise TraceError(f"--capacity-sectors must be > 0, got {capacity_sectors}")
    source = "given" if capacity_sectors else "sysfs"
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")
    if capacity_sectors is None:
        devs, top = set(), 0
        if reference:
            for ev in events(path, fmt, ParseCounts()):
                if ev.action == ISSUE:
                    devs.add(ev.dev)
                    top = max(top, ev.sector + ev.sectors)
        else:
            devices = _Devices()
            for b in batches(path, fmt, ParseCounts(), devices):
                iss = b.act == _A_ISSUE
                if iss.any():
                    devs.update(devices.devs[d] for d in set(b.dev[iss].tolist()))
                    top = max(top, int((b.sector[iss] + b.n[iss]).max()))
        if devs and not all(device_capacity_sectors(d) for d in devs):
            capacity_sectors, source = top or None, "highest sector in the trace"
    counts = ParseCounts()
    if reference:
        ch = Characterizer(capacity_sectors, sample_points)
        feed = ch.feed
        for ev in events(path, fmt, counts):
            feed(ev)
    else:
        import gc
        ch = FastCharacterizer(capacity_sectors, sample_points)
        was = gc.isenabled()
        gc.disable()          # the parser makes no cycles; collections would rescan big lists for nothing
        try:
            for b in batches(path, fmt, counts, ch.devices):
                ch.feed_batch(b)
        finally:
            if was:
                gc.enable()
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
