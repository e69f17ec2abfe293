"""preprocess arithmetic on runs.csv: headline deltas and metrics.json."""
from __future__ import annotations

from ...core import columns
from ...core.columns import Column
from ...kit import runs
from ...report.headlines import versus_reference

# Every column this study's rows can hold, beyond the engine's and the monitor's (core.columns).
COLUMNS: tuple[Column, ...] = (
    Column("sweep", "", "which sweep the run belongs to: processes (Table 2) or image_count (Table 4)", "text"),
    Column("processes", "", "concurrent ingest processes (P)"),
    Column("image_count", "", "images ingested in the run"),
    Column("output_mode", "", "sharded: one TFRecord file per process; single: one file written by the parent",
           "text"),
    Column("images_ok", "", "images ingested (written as records)"),
    Column("images_skipped", "", "input files that could not be ingested (skipped_files.csv says why)"),
    Column("input_bytes", "bytes", "bytes of the ingested input images"),
    Column("skipped_bytes", "bytes", "bytes of the skipped files that were read"),
    Column("output_bytes", "bytes", "bytes of the TFRecord files written"),
    Column("records_written", "", "records in the TFRecord output, counted back"),
    Column("completion_time_s", "s", "time from the first image handed out to the last record written"),
    Column("input_mb_per_s", "MB/s", "ingest bandwidth: input bytes / completion time (the paper's)"),
    Column("images_per_s", "images/s", "images ingested per second"),
    Column("output_mb_per_s", "MB/s", "TFRecord bytes written per second"),
    Column("read_s_total", "s", "time the workers spent reading files, summed"),
    Column("decode_resize_s_total", "s", "time spent decoding and resizing, summed"),
    Column("encode_write_s_total", "s", "time spent encoding and writing records, summed"),
    Column("read_share_percent", "%", "share of per-image time spent reading"),
    Column("decode_resize_share_percent", "%", "share of per-image time spent decoding and resizing"),
    Column("encode_write_share_percent", "%", "share of per-image time spent encoding and writing"),
    Column("dominant_stage", "", "the stage with the largest share: read, decode_resize or encode_write", "text"),
)
# The runs.csv columns this study's brief and arithmetic use unconditionally (kind: text / number); the
# brief's gate (brief/inputs.py) refuses a runs.csv without them, so the code below may assume them.
REQUIRED = ("sweep", "processes", "image_count", "input_bytes", "input_mb_per_s", "completion_time_s", "images_per_s",
            "images_skipped", "read_share_percent", "decode_resize_share_percent", "encode_write_share_percent")
RUNS_COLUMNS = columns.kinds(REQUIRED, COLUMNS)


def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other: up-to deltas over matched configurations."""
    return versus_reference(frame, target_names, ["sweep", "processes", "image_count"],
                            [("input_mb_per_s", "higher", "Ingest bandwidth (input MB/s)"),
                             ("completion_time_s", "lower", "Completion time")])


def _per_target(g) -> dict:
    means = g.groupby(["sweep", "processes", "image_count"])
    return {"max_input_mb_per_s": float(means.input_mb_per_s.mean().max()),
            "max_images_per_s": float(means.images_per_s.mean().max()),
            "images_skipped": int(g.images_skipped.sum())}


def metrics(frame, target_names: list[str]) -> dict:
    """Headline figures for `dvc metrics show`."""
    return runs.metrics(frame, target_names, headlines, _per_target)
