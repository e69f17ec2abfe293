"""What the object path costs and what limited it, one rule for every study on S3 targets (the object
sweep, checkpoint, emulate): the local gateway's CPU time, the CPU rule behind `limited_by`, and the
(directory, S3) target pairs on one device whose difference is the object path alone."""
from __future__ import annotations

import os
from pathlib import Path

CLIENT_LIMIT_PERCENT = 80     # the client used this share of all CPUs or more: it, not the store, limited
MACHINE_BUSY_PERCENT = 90     # every CPU this busy (monitor, /proc/stat) during the batch: the CPU limited


def gateway_cpu_seconds(store) -> float | None:
    """The local gateway process's user + system CPU seconds so far (/proc clock ticks, 10 ms), or None
    (an external store, or no gateway process)."""
    if store is None or store.gateway is None or store.gateway.proc is None:
        return None
    try:
        f = Path(f"/proc/{store.gateway.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def limited_by(row: dict, machine_busy_percent: float | None = None) -> str:
    """'client CPU' when the client alone used CLIENT_LIMIT_PERCENT of all CPUs, 'client + gateway CPU'
    when the two together did, 'machine CPU' when every CPU was busy (MACHINE_BUSY_PERCENT: the busy load,
    or other work on the machine): then the figure is the CPU's, not the storage's. '' otherwise."""
    ncpu, wall = os.cpu_count() or 1, row.get("wall_seconds") or 0
    if not wall:
        return ""
    client = 100 * row["client_cpu_seconds"] / (wall * ncpu)
    both = 100 * (row["client_cpu_seconds"] + (row.get("gateway_cpu_seconds") or 0)) / (wall * ncpu)
    if client >= CLIENT_LIMIT_PERCENT:
        return "client CPU"
    if both >= CLIENT_LIMIT_PERCENT:
        return "client + gateway CPU"
    if machine_busy_percent is not None and machine_busy_percent >= MACHINE_BUSY_PERCENT:
        return f"machine CPU ({machine_busy_percent:.0f} % busy)"
    return ""


def same_device_pairs(targets) -> list[tuple[str, str]]:
    """(directory target, local-gateway S3 target) on one block device with one profile: the pairs whose
    difference is the object path's cost alone."""
    dirs = [t for t in targets if t.s3 is None and t.device and t.device.major is not None]
    out = []
    for s in targets:
        if s.s3 is None or s.s3.external or not s.device or s.device.major is None:
            continue
        for d in dirs:
            if d.device.majmin == s.device.majmin and d.profile_name == s.profile_name:
                out.append((d.name, s.name))
                break
    return out
