"""The idle device's read latency, measured once per target before the emulate sweep."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from ...core.monitor import snapshot


# --------------------------------------------------------------------------- idle device
# The idle device's read latency, measured once per target before the sweep: the figure a run's
# device latency is held against (limits.py: a device whose reads take several times longer is queueing).
# 
# A probe file of PROBE_READS blocks of `block` bytes is written and synced in the target's study folder,
# read back block by block with O_DIRECT, one read at a time, with the device's own counters
# (/proc/diskstats) read around the reads: the mean per device request, the unit of the runs'
# `device_read_latency_us`. Its own file: O_DIRECT reads of the dataset would drop the dataset's pages from
# the page cache (measured: 8 MiB cached -> 0 after one 64 KiB O_DIRECT read), changing runs made with
# `run.cold_cache: false`. The file is removed at once. Unthrottled: a throttled target's bound is the throttle's.
PROBE_READS = 32   # O_DIRECT reads of read_block_kib


def idle_read_latency_us(target, directory: Path, block: int) -> float | None:
    """Mean device read latency (µs per request) of a few idle O_DIRECT reads; None when not measurable."""
    dev = target.device.name if target.device is not None else None
    if not dev:
        return None
    path = Path(directory) / ".storagebrief-idle-probe"
    buf = mmap.mmap(-1, block)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(os.urandom(block) * PROBE_READS)
            fh.flush()
            os.fsync(fh.fileno())
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        try:
            a = snapshot(dev)
            for k in range(PROBE_READS):
                os.preadv(fd, [buf], k * block)
            b = snapshot(dev)
        finally:
            os.close(fd)
    except OSError:
        return None                          # no O_DIRECT on this file system: no idle figure
    finally:
        path.unlink(missing_ok=True)
    reads = b.reads - a.reads
    return (b.read_ms - a.read_ms) * 1000 / reads if reads > 0 and b.read_ms > a.read_ms else None
