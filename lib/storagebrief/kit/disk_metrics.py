"""The Samsung SDC 2023 study's disk-metrics tables: IOPS, MiB/s, mean block sizes, response time and read
share of a device, from the monitor's summary columns (core.columns.MONITOR_COLUMNS), and the table
the brief shows (metrics as rows, one column per configuration).

The monitor counts in MB/s (10^6); the Samsung SDC 2023 study's tables are in MiB/s (2^20)."""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

MIB = 1 << 20


def mib_per_s(mb_per_s: float) -> float:
    """MB/s (the monitor's unit) as MiB/s (the Samsung SDC 2023 study's)."""
    return mb_per_s * 1e6 / MIB


def profile(summary: dict) -> dict:
    """Reads and writes together: IOPS, MiB/s, response time (read and write latency weighted by their
    IOPS) and the read share of the device bytes; {} without device counters (no monitored device)."""
    if "device_write_bytes" not in summary:
        return {}
    s = summary
    r_iops, w_iops = s["device_read_iops_avg"], s["device_write_iops_avg"]
    ops = r_iops + w_iops
    resp = ((s["device_read_latency_us"] * r_iops + s["device_write_latency_us"] * w_iops) / ops) if ops else 0.0
    total = s["device_read_bytes"] + s["device_write_bytes"]
    return {"device_iops_avg": ops,
            "device_mib_per_s_avg": mib_per_s(s["device_read_mb_per_s_avg"] + s["device_write_mb_per_s_avg"]),
            "device_response_time_us": resp,
            "device_read_percent": 100.0 * s["device_read_bytes"] / total if total else 0.0}


def cell(r, key: str):
    """A figure of a (grouped-mean) row, NaN where the column is absent or None."""
    v = r.get(key, np.nan)
    return np.nan if v is None else v


def table(groups, rows: Iterable[tuple[str, Callable]], header: str, column: Callable = str):
    """The Samsung SDC 2023 study's layout: one row per (label, row -> figure) of `rows`, one column per row of `groups`
    (a grouped-mean frame: index = configuration), headed column(index key)."""
    import pandas as pd

    rows = list(rows)
    out = {header: [label for label, _ in rows]}
    for key, r in groups.iterrows():
        out[column(key)] = [f(r) for _, f in rows]
    return pd.DataFrame(out)


def cpu_text(r) -> str:
    """'user / sys / iowait' CPU percent of a row, as the Samsung SDC 2023 study's tables show it."""
    return f"{cell(r, 'cpu_user_percent'):.0f} / {cell(r, 'cpu_system_percent'):.0f} / {cell(r, 'cpu_iowait_percent'):.1f}"
