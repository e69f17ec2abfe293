"""A run's characterization row without a block trace: what the monitor's diskstats give (averages
over the run, no request sizes' spread, no randomness, no locality). A leaf: imports nothing."""
from __future__ import annotations


def from_diskstats(summary: dict, span_s: float) -> dict:
    """The characterization.csv columns diskstats can fill, from the monitor's summary (its
    device_* averages) over span_s seconds; the other columns stay empty."""
    r_iops, w_iops = summary.get("device_read_iops_avg", 0.0), summary.get("device_write_iops_avg", 0.0)
    return {"read_percent": 100 * r_iops / (r_iops + w_iops) if r_iops + w_iops else float("nan"),
            "avg_iops": r_iops + w_iops, "read_kib_mean": summary.get("device_avg_read_kib"),
            "write_kib_mean": summary.get("device_avg_write_kib"), "trace_length_s": span_s,
            "read_ops": round(r_iops * span_s), "write_ops": round(w_iops * span_s),
            "read_bytes": summary.get("device_read_bytes"), "write_bytes": summary.get("device_write_bytes")}
