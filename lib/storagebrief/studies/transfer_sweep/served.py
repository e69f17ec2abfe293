"""Whether a read point measured the storage: the device's own bytes against the bytes the path delivered.

fio's cpu path reads with O_DIRECT, and so do legacy-pread and GDS; kvikio's compat (legacy) mode reads
through the page cache, and random reads of a file smaller than the machine's memory hit pages an earlier
read brought in. On an H200 machine (128 GiB) the legacy path reported 8,369 MB/s at 1M × 8 while the device
read 781 MB/s (docs/performance-history.md): a memory figure under a storage label. So every read row compares
the device's bytes over the run (the monitor's diskstats, ramp included) with the bytes the path delivered
(measured + ramp where the path reports its ramp): below CACHE_RATIO the row says how much came from memory,
and its ratio to fio and the brief's GPU figures say it too. The device counters are device-wide and span the
whole run (the worker's start-up after a cold cache, anything else reading the disk): those only raise the
ratio, so they can hide a cache hit but never invent one.
"""
from __future__ import annotations

import math

CACHE_RATIO = 0.9          # the device read less than 90 % of what was delivered: the rest was memory


def columns(row: dict, monitor: dict) -> dict:
    """device_bytes_per_delivered_byte and, when memory served part of a read point, not_the_storage."""
    delivered = _num(row.get("io_bytes")) + _num(row.get("ramp_io_bytes"))
    device = monitor.get("device_read_bytes")
    if "read" not in str(row.get("rw", "")) or delivered <= 0 or device is None:
        return {}
    ratio = device / delivered
    out = {"device_bytes_per_delivered_byte": ratio}
    if ratio < CACHE_RATIO:
        out["not_the_storage"] = (f"page cache: the device read {device / 1e6:,.0f} MB of the {delivered / 1e6:,.0f} "
                                  f"MB this path delivered ({ratio:.0%}); the rest came from memory")
    return out


def _num(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v
