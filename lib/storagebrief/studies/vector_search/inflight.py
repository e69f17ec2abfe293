"""How many reads a search really keeps in flight, and the device's IOPS at that depth.

A search with beam width W submits up to W reads per hop and waits for all of them, then computes: it keeps W
in flight only at the start of each hop's wait, fewer as they complete, none while it computes (measured on
`local`: W 8 gave 3.4 reads in flight per waiting query, not 8). Probing fio at beam x threads predicted
1.35-3.18x the QPS (issue 59). So the probe's depth is measured:

- **block layer** (an unthrottled target with the run's block trace, tracefs as root): the mean number of the
  search's reads in flight at the device, sum(complete - issue) / the point's wall time, over the block
  requests inside the index file's extents (FIEMAP) only, so no other process on a shared disk counts;
- **per-query timing** (a throttled target, whose throttle queue the block layer does not see, or no trace):
  the queries waiting on I/O at once, sum of the engine's I/O time / wall time (each has at least one read
  queued; an emulated profile's cap serves that at the same IOPS as any deeper queue).

fio reads in the search's own pattern (probe.py: `threads` jobs, each submitting `beam_width` reads at once and
waiting for all of them, as a hop does): a burst of W reads costs the device more per read than W reads kept in
flight steadily (measured on `local`: W 4 reads 95-130 us at the block layer, fio at a steady depth 3-5 60-80 us).
The device's IOPS at the search's depth D is D / the block-layer latency of fio's reads in that pattern (Little's
law); without a block-layer depth, fio's IOPS x the share of the time the device had the search's work.
"""
from __future__ import annotations

import array
import fcntl
import math
import struct
from pathlib import Path

import numpy as np

FS_IOC_FIEMAP = 0xC020660B
_HEAD = struct.Struct("=QQIIII")                 # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count
_EXTENT = struct.Struct("=QQQQQIIII")            # fe_logical, fe_physical, fe_length, 2 reserved, fe_flags, 3 reserved
FIEMAP_EXTENT_LAST = 0x1
SECTOR = 512


def extents(path: Path, partition: str | None = None, per_call: int = 256) -> list[tuple[int, int]]:
    """The file's extents as [start, end) 512-byte sectors of the whole disk (a partition's start added)."""
    offset = 0
    if partition:
        offset = int(Path(f"/sys/class/block/{partition}/start").read_text())
    out, start = [], 0
    with open(path, "rb") as fh:
        while True:
            buf = array.array("B", _HEAD.pack(start, 2**64 - 1 - start, 0, 0, per_call, 0)
                              + bytes(_EXTENT.size * per_call))
            fcntl.ioctl(fh.fileno(), FS_IOC_FIEMAP, buf, True)
            mapped = _HEAD.unpack_from(buf, 0)[3]
            last = False
            for j in range(mapped):
                logical, physical, length, _, _, flags, *_ = _EXTENT.unpack_from(buf, _HEAD.size + j * _EXTENT.size)
                out.append((offset + physical // SECTOR, offset + (physical + length) // SECTOR))
                start, last = logical + length, bool(flags & FIEMAP_EXTENT_LAST)
            if mapped == 0 or last:
                return sorted(out)


def traced_reads(trace: Path, spans: list[tuple[int, int]]) -> dict:
    """The block-layer reads inside `spans` (sectors) in a raw block trace: their count and summed latency (s),
    issue to completion (a requeued request from its next issue)."""
    from ...core.characterize import tracefs_raw
    from ...core.characterize.model import A_COMPLETE, A_ISSUE, A_REQUEUE, OP_CODE, ParseCounts

    lo = np.array([s for s, _ in spans], dtype=np.int64)
    hi = np.array([e for _, e in spans], dtype=np.int64)
    issued: dict[int, list[int]] = {}
    n, total_ns, first, last = 0, 0, None, None
    for cols in tracefs_raw.columns(trace, ParseCounts()):
        keep = cols["op"] == OP_CODE["R"]
        sec = cols["sector"]
        j = np.searchsorted(lo, sec, side="right") - 1
        keep &= (j >= 0) & (sec < hi[np.clip(j, 0, None)])
        for t, act, s in zip(cols["t"][keep].tolist(), cols["act"][keep].tolist(), sec[keep].tolist()):
            if act == A_ISSUE:
                issued.setdefault(s, []).append(t)
                first = t if first is None else first
            elif act == A_COMPLETE and issued.get(s):
                total_ns += t - issued[s].pop(0)
                n, last = n + 1, t
            elif act == A_REQUEUE and issued.get(s):     # the device did not take it: timed from its next issue
                issued[s].pop(0)
    span = (last - first) / 1e9 if n else 0.0
    return {"reads": n, "latency_s": total_ns / 1e9, "span_s": span,
            "depth": total_ns / 1e9 / span if span > 0 else math.nan,
            "latency_us": total_ns / 1e3 / n if n else math.nan}


def measured_depth(result: dict, wall_s: float, trace: Path | None, spans, throttled: bool) -> dict:
    """The reads the point kept in flight on average, and where the figure comes from."""
    stats = np.asarray(result["stats"], dtype=float)
    waiting = float(stats[:, 3].sum() / 1e6 / wall_s) if wall_s > 0 and len(stats) else math.nan
    if not throttled and trace is not None and spans:
        got = traced_reads(trace, spans)
        if got["reads"]:
            return {"reads_in_flight": got["latency_s"] / wall_s, "inflight_source": "block layer (trace)",
                    "read_latency_us_block": 1e6 * got["latency_s"] / got["reads"], "queries_waiting_on_io": waiting,
                    "traced_reads": got["reads"]}
    why = "throttled: the block layer does not see the throttle's queue" if throttled else "no block trace"
    return {"reads_in_flight": waiting, "inflight_source": f"per-query timing ({why})",
            "read_latency_us_block": math.nan, "queries_waiting_on_io": waiting, "traced_reads": 0}


def device_iops(depth: dict, probes: list[dict], threads: int) -> float:
    """The device's IOPS for the point: with the block-layer depth D, D / the block-layer latency of fio's reads in
    the search's pattern at D (Little's law, like with like: `latency_at` over the probes' own block-layer depths);
    else fio's IOPS in that pattern x the share of the time the device had work: under a throttle, whose cap
    serves one waiting query as fast as several, min(1, the queries waiting on I/O) (measured: 3 queries waiting
    2.72 of the time kept a 150-IOPS profile at its cap, and their share, 0.91, predicted 0.86x); elsewhere the
    share of its `threads` jobs the search kept waiting (fio keeps every job waiting all the time)."""
    traced = {p["block_depth"]: p["block_latency_us"] for p in probes if p.get("block_latency_us", 0) > 0}
    source = depth["inflight_source"]
    if source.startswith("block layer") and traced:
        return depth["reads_in_flight"] / (latency_at(depth["reads_in_flight"], traced) / 1e6)
    waiting = depth["queries_waiting_on_io"]
    return probes[0]["iops"] * min(1.0, waiting if "throttled" in source else waiting / threads)


def latency_at(depth: float, points: dict[float, float]) -> float:
    """A read's latency at `depth`, interpolated linearly between the probes' (depth -> us); outside them, the
    nearest one's."""
    known = sorted(points.items())
    lo = max(((d, v) for d, v in known if d <= depth), default=known[0])
    hi = min(((d, v) for d, v in known if d >= depth), default=known[-1])
    return lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (depth - lo[0]) / (hi[0] - lo[0])


def second_jobs(depth: float, probe: dict, threads: int, near: float = 0.25) -> int | None:
    """fio's job count for a second probe when the first (`threads` jobs) kept a block-layer depth more than `near`
    away from the search's (fio has no CPU time between beams: with 4 jobs of beams of 7 it kept about twice the
    search's 7.7, and its latency there predicted 0.69x): the jobs that bring it near, or None."""
    got = probe.get("block_depth")
    if not got or not depth > 0 or abs(got / depth - 1) <= near:
        return None
    jobs = max(1, round(threads * depth / got))
    return None if jobs == threads else jobs
