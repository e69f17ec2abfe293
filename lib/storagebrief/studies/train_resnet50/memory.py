"""Memory of a training job: the ratio's page-cache cap, the job's need, cold dataset, capability.

Memory limit from a ratio (documented choice): the ratio caps the dataset's page cache at
dataset_bytes x (memory / dataset) (cachecap.py). A pure 2.5:1 ratio of a 100 MB dataset would
be 40 MB, far below TensorFlow's own ~1.5 GB, and TensorFlow's own memory swings by 200+ MB
while it trains (as tf.data fills and frees buffers, measured), so a fixed limit on the whole
job hands whatever the job does not use at the moment to the page cache (a 96 MB dataset stayed
83 % cached under a fixed 2.5:1 limit), and a limit that follows the job's need lets a buffer
spike fail a read with ENOMEM (measured). An absolute size limits the whole job
from its start, as `docker run -m` would; exceeding it is an OOM kill and a failed row.

A job without a cgroup (no root, no memory controller: only unlimited runs then) has no
memory statistics: every helper here takes group=None and returns nothing for it.
"""
from __future__ import annotations

import os
from pathlib import Path

from .params import MIB


def memory_need(group) -> int | None:
    """What the job holds that reclaim cannot take: usage minus unmapped page cache (None: no group).

    Unmapped cache (library files read once at import, the dataset) is reclaimable; anonymous
    memory, mapped code and kernel memory are what the job needs to keep running.
    """
    if group is None:
        return None
    usage = group.memory_usage()
    if usage is None:
        return None
    b = group.memory_breakdown()
    return usage - max(0, b.get("cache_bytes", 0) - b.get("mapped_file_bytes", 0))


def anon_bytes(group) -> int:
    """The group's anonymous memory now (0: no group)."""
    return group.memory_breakdown().get("anon_bytes", 0) if group is not None else 0


def reset_peak(group) -> None:
    """Start the group's peak counter at the measured phase (nothing to reset without a group)."""
    if group is not None:
        group.reset_memory_peak()


def final_stats(group) -> dict:
    """Peak, failcnt, OOM kills and the breakdown at the end of a run ({}: no group)."""
    if group is None:
        return {}
    stats = group.memory_stats()
    stats.update(group.memory_breakdown())
    return stats


def safe_stats(group) -> dict:
    """memory_stats() of a failed job's group, {} when there is none or it cannot be read."""
    if group is None:
        return {}
    try:
        return group.memory_stats()
    except (OSError, ValueError):
        return {}


def foreign_cache_drops() -> int:
    """Kernel count of drop_caches writes (another process dropping caches mid-run spoils hits)."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("drop_pagecache "):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def breakdown(group) -> dict | None:
    """The job cgroup's memory breakdown, or None without a cgroup or when it is gone."""
    if group is None:
        return None
    try:
        return group.memory_breakdown()
    except (OSError, ValueError):
        return None
