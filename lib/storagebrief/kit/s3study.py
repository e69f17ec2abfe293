"""What the object path costs (the `limited_by` rule, per client process through kit/client_bound; the
gateway's CPU in words): shared by the object sweep, emulate and checkpoint. Each target's store is the
engine's (sweep.store, core/stores.py); the (directory, local gateway) pairs on one device are core.targets'.
"""
from __future__ import annotations

import os

from . import client_bound

CLIENT_LIMIT_PERCENT = 80     # the client used this share of all CPUs or more: it, not the store, limited
MACHINE_BUSY_PERCENT = client_bound.MACHINE_BUSY_PERCENT


def limited_by(row: dict, machine_busy_percent: float | None = None) -> str:
    """The label of `judge_row` alone (emulate and checkpoint read this)."""
    return judge_row(row, machine_busy_percent)[0]


def gateway_words(row: dict) -> str:
    """The gateway's CPU in words: measured for the local gateway, 'not measured (external)' for an external
    endpoint, nothing for a directory (no server)."""
    if row.get("access") == "S3 external":
        return "gateway CPU not measured (external)"
    gw, wall = row.get("gateway_cpu_seconds"), row.get("wall_seconds") or 0
    if gw is None or gw != gw or not wall:
        return "" if row.get("access") in (None, "files") else "gateway CPU not measured"
    return f"gateway {gw:.2f} CPU-s = {gw / wall:.2f} cores"


def judge_row(row: dict, machine_busy_percent: float | None = None) -> tuple[str, str]:
    """(limited_by, its evidence), judged on the client's own budget first. 'client CPU' when a client process, or
    the pool of them, used or was ready to use ≥ 85 % of the cores it can use (kit/client_bound: `client_processes`
    in the row), however busy the machine was, or the client alone used CLIENT_LIMIT_PERCENT of all CPUs;
    'client + gateway CPU' when the two together did (the client counted as it wanted the CPU: used or ready
    for); 'machine CPU' only for a client below its own ceiling while every CPU was busy (MACHINE_BUSY_PERCENT:
    the busy load, or other work on the machine): then the figure is the CPU's, not the storage's. '' otherwise;
    the evidence names each process's share and the gateway's either way."""
    ncpu, wall = os.cpu_count() or 1, row.get("wall_seconds") or 0
    if not wall:
        return "", ""
    processes = client_bound.from_row(row)
    bound, words = client_bound.judge(processes)
    client = 100 * row["client_cpu_seconds"] / (wall * ncpu)
    # with the gateway: the client's CPU as it wanted it (used, or ready for: a share it did not get went to
    # the gateway or the kernel), so a client held back by the gateway's CPU on the same machine counts whole
    wanted = sum(p.cores_wanted * p.wall_seconds for p in processes) or row["client_cpu_seconds"]
    both = 100 * (max(wanted, row["client_cpu_seconds"]) + (row.get("gateway_cpu_seconds") or 0)) / (wall * ncpu)
    words = "; ".join(x for x in (words or f"client {client:.0f} % of {ncpu} CPUs", gateway_words(row)) if x)
    if bound:
        return "client CPU", words
    if client >= CLIENT_LIMIT_PERCENT:
        return "client CPU", f"{words}: the client ≥ {CLIENT_LIMIT_PERCENT} % of all {ncpu} CPUs"
    if both >= CLIENT_LIMIT_PERCENT:
        return "client + gateway CPU", f"{words}: together {both:.0f} % of all {ncpu} CPUs"
    if machine_busy_percent is not None and machine_busy_percent >= MACHINE_BUSY_PERCENT:
        return f"machine CPU ({machine_busy_percent:.0f} % busy)", f"{words}; every CPU {machine_busy_percent:.0f} % busy"
    return "", words
