"""stream_inference arithmetic on runs.csv: headline deltas and metrics.json."""
from __future__ import annotations

from ...report.headlines import versus_reference

KEYS = ["streams", "video", "topics", "partitions", "replication_factor"]
# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (report/inputs.py) refuses a runs.csv without them, so the code below may assume them.
RUNS_COLUMNS = {"sweep": "text", "video": "text", **dict.fromkeys(
    ("streams", "topics", "partitions", "replication_factor", "classified_frames_per_s", "latency_ms_p99",
     "frames_dropped", "streams_below_fps", "produce_mb_per_s"), "number")}


def ok_runs(frame):
    return frame[frame.status == "ok"] if "status" in frame else frame


def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other, over matched configurations."""
    return versus_reference(ok_runs(frame), target_names, KEYS,
                            [("classified_frames_per_s", "higher", "Frames classified per second"),
                             ("latency_ms_p99", "lower", "End-to-end frame latency, p99"),
                             ("device_response_time_us", "lower", "Brokers' device response time")])


def metrics(frame, target_names: list[str]) -> dict:
    """Headline figures for `dvc metrics show`."""
    out: dict = {"runs": int(len(frame))}
    ok = ok_runs(frame)
    for name, g in ok.groupby("target"):
        out[name] = {"max_classified_frames_per_s": float(g.classified_frames_per_s.max()),
                     "max_device_iops_avg": float(g.device_iops_avg.max()) if "device_iops_avg" in g else None,
                     "max_produce_mb_per_s": float(g.produce_mb_per_s.max()),
                     "latency_ms_p99_max": float(g.latency_ms_p99.max()),
                     "frames_dropped": int(g.frames_dropped.sum()),
                     "streams_below_fps": int(g.streams_below_fps.sum())}
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out
