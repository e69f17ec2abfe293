"""preprocess arithmetic on runs.csv: headline deltas and metrics.json."""
from __future__ import annotations

from ...report.headlines import versus_reference

# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (report/inputs.py) refuses a runs.csv without them, so the code below may assume them.
RUNS_COLUMNS = {"sweep": "text", **dict.fromkeys(
    ("processes", "image_count", "input_bytes", "input_mb_per_s", "completion_time_s", "images_per_s",
     "images_skipped", "read_share_percent", "decode_resize_share_percent", "encode_write_share_percent"), "number")}


def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other: up-to deltas over matched configurations."""
    return versus_reference(frame, target_names, ["sweep", "processes", "image_count"],
                            [("input_mb_per_s", "higher", "Ingest bandwidth (input MB/s)"),
                             ("completion_time_s", "lower", "Completion time")])


def metrics(frame, target_names: list[str]) -> dict:
    """Headline figures for `dvc metrics show`."""
    out: dict = {"runs": int(len(frame))}
    for name, g in frame.groupby("target"):
        out[name] = {"max_input_mb_per_s": float(g.groupby(["sweep", "processes", "image_count"])
                                                  .input_mb_per_s.mean().max()),
                     "max_images_per_s": float(g.groupby(["sweep", "processes", "image_count"])
                                                .images_per_s.mean().max()),
                     "images_skipped": int(g.images_skipped.sum())}
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out
