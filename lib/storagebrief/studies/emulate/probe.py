"""The idle device's read latency, measured once per target before the sweep: the figure a run's
device latency is held against (limits.py: a device whose reads take several times longer is queueing).

O_DIRECT reads of `block` bytes at the start of up to PROBE_READS dataset files, one at a time, with
the device's own counters (/proc/diskstats) read around them: the mean per device request, the unit
of the runs' `device_read_latency_us`. Unthrottled: a throttled target's bound is the throttle's.
"""
from __future__ import annotations

import mmap
import os

from ...core.monitor import snapshot

PROBE_READS = 32


def idle_read_latency_us(target, files: list[str], block: int) -> float | None:
    """Mean device read latency (µs per request) of a few idle O_DIRECT reads; None when not measurable."""
    dev = target.device.name if target.device is not None else None
    if not dev or not files:
        return None
    buf = mmap.mmap(-1, block)
    a = snapshot(dev)
    for path in files[:PROBE_READS]:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:
            return None                      # no O_DIRECT on this file system: no idle figure
        try:
            os.preadv(fd, [buf], 0)
        except OSError:
            return None
        finally:
            os.close(fd)
    b = snapshot(dev)
    reads = b.reads - a.reads
    return (b.read_ms - a.read_ms) * 1000 / reads if reads > 0 and b.read_ms > a.read_ms else None
