"""The framework sweep's part of the checkpoint section: the Samsung SDC 2023 study's BERT rows rebuilt ("Summary
statistics": read %, random %, IOPS, request sizes, random / sequential operations, trace length) from
each run's block trace (characterization.csv, joined on run_id), beside what TensorFlow's
CheckpointManager did per run (runs.csv); the every-k vs default comparison in words; its limits."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...core.characterize import SEED_COLUMNS
from ...kit.files import read_csv_or_none
from ...report.display import analysis, show_md, show_table

ORDER = ("default", "every", "limited", "ingest")


def description(scenario: str, steps: int, every: int) -> str:
    """The Samsung SDC 2023 study's wording ("BERT 2000-Step With 250-Step Checkpoint Interval") at this run's numbers."""
    return {"default": f"BERT {steps}-Step Default Checkpoint Interval ({every} steps)",
            "every": f"BERT {steps}-Step With {every}-Step Checkpoint Interval",
            "limited": f"BERT {steps}-Step Limited Memory Default Checkpoint Interval",
            "ingest": f"BERT {steps}-Step With Simultaneous Data Ingestion"}.get(scenario, f"BERT {scenario}")


def _runs(frame) -> pd.DataFrame:
    if "sweep" not in frame or "framework_scenario" not in frame:     # the sweep off: no framework columns
        return frame.iloc[0:0]
    fw = frame[(frame.sweep == "framework") & (frame.status == "ok")].copy()
    fw["order"] = fw.framework_scenario.map({s: i for i, s in enumerate(ORDER)})
    return fw


def seed_table(fw: pd.DataFrame, chz: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """One row per (scenario, target), means over repeats, the Samsung SDC 2023 study's column names and order."""
    keys = [k for _, k in SEED_COLUMNS]
    j = fw.merge(chz[["run_id", *[k for k in keys if k in chz]]], on="run_id", how="inner")
    if j.empty:
        return pd.DataFrame()
    rows = []
    for (scenario, target), g in j.groupby(["framework_scenario", "target"], sort=False):
        r = g.iloc[0]
        rows.append({"Workload Description": f"{description(scenario, int(r.train_steps), int(r.checkpoint_every_steps))}"
                                             f" ({target})",
                     **{name: g[k].mean() for name, k in SEED_COLUMNS if k in g},
                     "_order": (int(r.order), names.index(target) if target in names else len(names))})
    return pd.DataFrame(sorted(rows, key=lambda x: x["_order"])).drop(columns="_order")


def tf_table(fw: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    g = fw.groupby(["framework_scenario", "target"], sort=False)
    t = pd.DataFrame({
        "every k": g.checkpoint_every_steps.first(), "saves": g.tf_checkpoints.mean(),
        "MB per save": g.tf_checkpoint_bytes_mean.mean() / 1e6, "save s": g.tf_checkpoint_s_mean.mean(),
        "longest save s": g.tf_checkpoint_s_max.mean(), "save MB/s": g.tf_checkpoint_mb_per_s.mean(),
        "% of training": g.checkpoint_time_percent.mean(), "job's own writes MB": g.job_write_bytes.mean() / 1e6,
        "job's write requests": g.job_write_ops.mean(), "job's mean write KiB": g.job_write_kib_mean.mean(),
        "limit MiB": g.memory_limit_bytes.mean() / 2**20, "peak MiB": g.memory_peak_bytes.mean() / 2**20,
        "failcnt": g.memory_failcnt.mean(), "ingest MB/s": g.ingest_mb_per_s.mean()}).reset_index()
    counts = ["every k", "saves", "job's write requests", "failcnt"]      # whole numbers: no ".0" to wrap
    t[counts] = t[counts].round().astype("Int64")
    t["_o"] = t.framework_scenario.map({s: i for i, s in enumerate(ORDER)})
    t["_t"] = t.target.map(lambda x: names.index(x) if x in names else len(names))
    return t.sort_values(["_o", "_t"]).drop(columns=["_o", "_t"]).rename(columns={"framework_scenario": "scenario"})


def _words(fw: pd.DataFrame, chz: pd.DataFrame, names: list[str]) -> list[str]:
    """Every-k vs default per target, from the rows (means over repeats)."""
    j = fw.merge(chz, on=["run_id", "target"], how="left") if chz is not None else fw
    lines = []
    for t in names:
        mine = j[j.target == t].groupby("framework_scenario").mean(numeric_only=True)
        if not {"default", "every"} <= set(mine.index):
            continue
        d, e = mine.loc["default"], mine.loc["every"]
        line = (f"- **{t}**: a save every {int(e.checkpoint_every_steps)} steps made {e.tf_checkpoints:.0f} saves "
                f"(default interval: {d.tf_checkpoints:.0f}) and wrote {e.tf_checkpoint_bytes_total / 1e6:,.0f} MB "
                f"instead of {d.tf_checkpoint_bytes_total / 1e6:,.0f} MB; saving took "
                f"{e.checkpoint_time_percent:.1f} % of training time instead of {d.checkpoint_time_percent:.1f} %")
        if "write_kib_mean" in mine and e.write_kib_mean == e.write_kib_mean:
            line += (f"; on the device, write requests of {e.write_kib_min:,.0f}–{e.write_kib_max:,.0f} KiB (median "
                     f"{e.write_kib_median:,.0f}, mean {e.write_kib_mean:,.0f}), {100 - e.read_percent:.1f} % writes, "
                     f"{e.random_percent:.1f} % random (the whole device)")
        if "job_write_kib_mean" in mine and e.job_write_kib_mean == e.job_write_kib_mean:
            line += (f"; the job's own writes: {e.job_write_ops:,.0f} requests of {e.job_write_kib_mean:,.0f} KiB on "
                     f"average (default interval: {d.job_write_ops:,.0f} of {d.job_write_kib_mean:,.0f} KiB)")
        lines.append(line + ".")
    return lines


def section(study_dir: Path, frame, names: list[str], study: dict) -> None:
    fw = _runs(frame)
    f = study.get("framework") or {}
    if fw.empty:
        tried = frame[frame.sweep == "framework"] if "sweep" in frame else frame.iloc[0:0]
        off = "framework" in study and not f.get("scenarios")
        show_md("**TensorFlow's own checkpoints (the Samsung SDC 2023 study's BERT rows)**: " + (
            f"every framework run failed ({len(tried)}; see what failed above)." if len(tried) else
            "the framework sweep did not run (checkpoint.framework.scenarios is empty)." if off else
            "no framework run in runs.csv" + ("" if study else " (study.json, which says whether the sweep was "
                                                               "on, is missing)") + "."))
        return
    r = fw.iloc[0]
    show_md(
        "**TensorFlow's own checkpoints (the Samsung SDC 2023 study's BERT rows).** A Keras transformer of BERT's shape "
        f"({int(r.bert_layers)} layers, hidden {int(r.bert_hidden)}, {int(r.bert_heads)} heads, FFN {int(r.bert_ffn)}, "
        f"sequence {int(r.bert_seq_len)}, vocabulary {int(r.bert_vocab)}: {int(r.bert_parameters):,} parameters, random "
        f"init; paper scale is BERT-base) trains {int(r.train_steps)} steps with AdamW and saves with "
        f"`tf.train.CheckpointManager` (max_to_keep {int(r.max_to_keep)}); each save counts when its files and "
        "folder are fsync'ed. Scenarios as the Samsung SDC 2023 study's rows: the default interval (BERT run_pretraining's "
        f"save_checkpoints_steps, scaled: every {f.get('default_every_steps', '?')} steps), every "
        f"{f.get('every_steps', '?')} steps, the default interval under a memory limit (the job's own memory + "
        f"{f.get('memory_headroom_mib', '?')} MiB, so its page cache is what gives), and with an ingest writer "
        f"appending BERT-shaped TFRecords at {f.get('ingest_mb_per_s', '?')} MB/s on the same target.")
    chz = read_csv_or_none(Path(study_dir) / "characterization.csv")
    seed = seed_table(fw, chz, names) if chz is not None else pd.DataFrame()
    if not seed.empty:       # in two parts, the label in each: 20 columns fit no page or notebook width
        w = list(seed.columns)
        show_table(seed[w[:10]], "The Samsung SDC 2023 study's \"Summary statistics\" columns for each run's block "
                                 "trace (the whole device, while the clock ran: TensorFlow's saves, and the ingest "
                                 "writer's appends where it ran); means over repeats. Part 1.", floatfmt="{:,.2f}")
        show_table(seed[[w[0], *w[10:]]], "Summary statistics, part 2.", floatfmt="{:,.2f}")
    t = tf_table(fw, names)
    keys = ["scenario", "target"]
    saves = ["every k", "saves", "MB per save", "save s", "longest save s", "save MB/s", "% of training"]
    show_table(t[keys + saves], "What TensorFlow's writer did per run (means over repeats): saves, size, save time "
                                "until fsync'ed, its share of training time.", floatfmt="{:,.2f}")
    show_table(t[keys + [c for c in t.columns if c not in keys + saves]],
               "The same runs on the device and in memory: the job's own writes (its cgroup's counters, unlike the "
               "trace: no one else's); memory limit, the job's peak (page cache included), how often the limit "
               "forced reclaim (failcnt); the ingest writer's rate where it ran.", floatfmt="{:,.1f}")
    analysis(_words(fw, chz, names) + [
        "- Limits: quick scale is a small BERT (a few MB per save, seconds of training) on CPU; the trace is of the "
        "whole device, so anything else using the disk during a run is in its row (the Samsung SDC 2023 study traced a dedicated "
        "drive); TensorFlow writes through the page cache and the fsync decides when the bytes reach the device."],
        title="Every k steps vs the default interval")
