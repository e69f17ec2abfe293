"""The preprocess section of the brief: paper Tables 2 and 4, their figures, the time split, analysis."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ...kit.figures import metric_vs
from ...kit.files import read_csv_or_none, read_json_or
from ...kit.history import earlier
from ...kit.runs import ok_runs
from ...report.display import analysis, fmt_s, show_figure, show_md, show_table, style
from ...report.words import plural, spread, spread_cell


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    ps = frame[frame.sweep == "processes"]
    _what_ran(frame, ps)
    _output_check(study_dir)     # short: kept beside what ran, not left alone on a last page
    _process_sweep(frame, ps, names)
    _time_split(ps)
    _process_analysis(ps, names)
    _image_count_sweep(frame, names)
    _device_table(frame, ps)
    _skipped_files(study_dir, frame)


def _what_ran(frame, ps) -> None:
    n_images = int(ps.image_count.iloc[0]) if not ps.empty else 0
    mb_each = ps.input_bytes.mean() / max(1, n_images) / 1e6 if not ps.empty else 0
    show_md(
        f"**What ran.** {n_images} TIFF images of {mb_each:.1f} MB each were read with OpenCV, resized and "
        "appended as `tf.train.Example` records to TFRecord files by P concurrent processes, cold cache before "
        f"every run, {int(frame.repeat.max())} repeats, on every target. *Input MB/s* is the paper's bandwidth: "
        "bytes of the input images ÷ completion time (MB = 10⁶ bytes). Device MB/s comes from the block-device "
        "counters sampled during the run.")


def _process_sweep(frame, ps, names: list[str]) -> None:
    """Paper Table 2 and Figure 1."""
    import matplotlib.pyplot as plt

    show_table(process_table(frame, names), "Bandwidth and completion time by process count (means over repeats; "
                                            "read share = share of per-image time spent reading the file).")
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
    metric_vs(axes[0], ps, "processes", "input_mb_per_s", names)
    axes[0].set(xlabel="processes", ylabel="input MB/s", title="Throughput vs processes")
    metric_vs(axes[1], ps, "processes", "completion_time_s", names, legend=False)
    axes[1].set(xlabel="processes", ylabel="seconds", title="Completion time vs processes")
    for ax in axes:
        ax.set_xticks(sorted(ps.processes.unique()))
    show_figure(fig, "TFRecord creation: throughput and completion time vs processes (error bars: ±1 sd over repeats).")


def _time_split(ps) -> None:
    import matplotlib.pyplot as plt

    split = ps.groupby(["target", "processes"])[["read_share_percent", "decode_resize_share_percent",
                                                 "encode_write_share_percent"]].mean().reset_index()
    fig, ax = plt.subplots(figsize=(8, 3.0))
    labels = [f"{t}\nP={p}" for t, p in zip(split.target, split.processes)]
    bottom = np.zeros(len(split))
    for col, name in (("read_share_percent", "read"), ("decode_resize_share_percent", "decode + resize"),
                      ("encode_write_share_percent", "encode + write")):
        ax.bar(labels, split[col], bottom=bottom, label=name)
        bottom += split[col].to_numpy()
    ax.set(ylabel="% of per-image time", ylim=(0, 100), title="Where each image's time went")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    show_figure(fig, "Split of per-image time (summed over processes): a large read share means the run "
                     "waited on storage; a large decode/resize share means it was CPU-bound.")


def _process_analysis(ps, names: list[str]) -> None:
    lines = []
    means = ps.groupby(["target", "processes"]).input_mb_per_s.mean()
    for n in names:
        if n not in means.index.get_level_values(0):
            continue
        m = means[n]
        best_p, best_v = int(m.idxmax()), float(m.max())
        one = float(m.iloc[0])
        read = float(ps[(ps.target == n) & (ps.processes == best_p)].read_share_percent.mean())
        bound = "storage-bound (most time in reads)" if read >= 50 else "CPU-bound (most time decoding and resizing)"
        lines.append(f"- **{n}**: {one:.0f} MB/s at {plural(int(m.index[0]), 'process')}, best {best_v:.0f} MB/s at "
                     f"{best_p} processes (×{best_v / one:.1f} speedup from parallelism); at its best it was "
                     f"{bound}, read share {read:.0f} %.")
    cpus = os.cpu_count() or 1
    lines.append(f"- This machine has {cpus} logical CPUs: process counts beyond that compete for cores, so "
                 "gains past it come from overlapping I/O waits, not from more compute.")
    analysis(lines)


def _image_count_sweep(frame, names: list[str]) -> None:
    """Paper Table 4 and completion time vs image count."""
    import matplotlib.pyplot as plt

    ic = frame[frame.sweep == "image_count"]
    if ic.empty:
        return
    ref = names[0]
    t4 = image_count_table(frame, names)
    if not t4.empty:
        show_table(t4, "Completion time by image count at each target's best process count; speedup = "
                       f"{names[1]} time ÷ {ref} time.")
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    metric_vs(ax, ic, "image_count", "completion_time_s", names)
    ax.set(xlabel="images", ylabel="seconds", title="Completion time vs image count")
    show_figure(fig, "Completion time vs number of images at the best process count per target.")
    if not t4.empty:
        last = t4.iloc[-1]
        show_md(f"**Analysis.** At {int(last.Images)} images ({last['Dataset MB']:.0f} MB) {ref} finished in "
                f"{fmt_s(last[f'{ref}: time s'])} and {names[1]} in {fmt_s(last[f'{names[1]}: time s'])}: "
                f"×{last['Speedup ×']:.1f}, {fmt_s(abs(last['Time saved s']))} "
                f"{'saved' if last['Time saved s'] >= 0 else 'lost'}. Small image counts are dominated by "
                "process start-up and fit in memory; the paper isolates storage with datasets larger than RAM.")


def _device_table(frame, ps) -> None:
    if "device_read_mb_per_s_avg" not in frame:
        return
    dev = ps.groupby(["target", "processes"])[["device_read_mb_per_s_avg", "device_read_mb_per_s_max",
                                               "device_write_mb_per_s_avg", "device_util_percent_avg",
                                               "cpu_busy_percent", "cpu_iowait_percent"]].mean().reset_index()
    dev.columns = ["Target", "Processes", "Device read MB/s avg", "Device read MB/s max",
                   "Device write MB/s avg", "Device util %", "CPU busy %", "CPU iowait %"]
    show_table(dev, "Device counters and CPU measured during the process sweep (means over repeats; max = "
                    "largest sampling interval).")


def _skipped_files(study_dir: Path, frame) -> None:
    sk = read_csv_or_none(study_dir / "skipped_files.csv") if int(frame.images_skipped.sum()) else None
    if sk is None:
        return
    sk = sk.drop_duplicates(["target", "file", "reason"])
    show_md(f"**Skipped input files.** {len(sk)} distinct files could not be ingested and were skipped "
            "(counted per run in `images_skipped`):")
    show_table(sk[["target", "file", "reason"]].head(30))


def _output_check(study_dir: Path) -> None:
    outputs = read_json_or(study_dir / "outputs.json")     # {} when absent
    if not outputs:
        return
    ver = outputs.get("verification", {})
    ok = ", ".join(f"{n}: {v['records']} records, shapes {v['shapes']}, labels {v['labels']}"
                   for n, v in ver.items())
    show_md(f"**Output check.** The last TFRecord set per target was read back with `tf.data`: {ok}.")


def process_table(frame, names: list[str]):
    """Paper Table 2: bandwidth and time per process count, per target (means over repeats)."""
    ps = frame[frame.sweep == "processes"]
    g = ps.groupby(["processes", "target"]).agg(mb=("input_mb_per_s", "mean"), t=("completion_time_s", "mean"),
                                                 dev=("device_read_mb_per_s_max", "mean")
                                                 if "device_read_mb_per_s_max" in ps else ("input_mb_per_s", "size"),
                                                 read=("read_share_percent", "mean"))
    out = pd.DataFrame({"Processes": sorted(ps.processes.unique())})
    for n in names:
        sub = g.xs(n, level="target") if n in g.index.get_level_values("target") else None
        if sub is None:
            continue
        out[f"{n}: input MB/s"] = out.Processes.map(sub.mb)
        out[f"{n}: time s"] = out.Processes.map(sub.t)
        out[f"{n}: read share %"] = out.Processes.map(sub.read)
    return out


def image_count_table(frame, names: list[str]):
    """Paper Table 4: per image count, each target's bandwidth and time, speedup and time saved."""
    ic = frame[frame.sweep == "image_count"]
    if ic.empty or len(names) < 2:
        return pd.DataFrame()
    g = ic.groupby(["image_count", "target"]).agg(mb=("input_mb_per_s", "mean"), t=("completion_time_s", "mean"),
                                                   p=("processes", "first"), size=("input_bytes", "mean"))
    ref, other = names[0], names[1]
    rows = []
    for n in sorted(ic.image_count.unique()):
        if (n, ref) not in g.index or (n, other) not in g.index:
            continue
        a, b = g.loc[(n, ref)], g.loc[(n, other)]
        rows.append({"Images": int(n), "Dataset MB": a["size"] / 1e6,
                     f"{ref}: processes": int(a.p), f"{ref}: MB/s": a.mb, f"{ref}: time s": a.t,
                     f"{other}: processes": int(b.p), f"{other}: MB/s": b.mb, f"{other}: time s": b.t,
                     "Speedup ×": b.t / a.t, "Time saved s": b.t - a.t})
    return pd.DataFrame(rows)


def trace_workloads(frame, names: list[str]) -> list[tuple[str, str]]:
    """The run the brief's block-level characterization shows: the most processes on the reference
    target, first repeat (label, run_id)."""
    ps = frame[(frame.sweep == "processes") & (frame.target == names[0])]
    if ps.empty:
        return []
    top = ps[ps.processes == ps.processes.max()].sort_values("repeat").iloc[0]
    return [(f"Preprocess, {int(top.processes)} processes", top.run_id)]


MEASURE = "ingest MB/s at the best process count"     # kit/history: earlier studies' runs of this answer


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: the best ingest bandwidth per target and the process count that gave it."""
    ok = ok_runs(frame)
    ok = ok[ok.sweep == "processes"] if "sweep" in ok else ok
    out = []
    for t in names:
        mine = ok[ok.target == t]
        g = mine.groupby("processes").input_mb_per_s.mean()
        if len(g):
            best = int(g.idxmax())
            runs = mine[mine.processes == best].input_mb_per_s
            # other process counts whose runs reach the best one's slowest: the best P is not settled among them
            near = [int(p) for p, x in mine.groupby("processes").input_mb_per_s if int(p) != best and x.max() >= runs.min()]
            tied = f"; P = {', '.join(str(p) for p in near)} within that range" if near and len(runs) > 1 else ""
            before = earlier(study_dir, MEASURE, t)
            out.append({"question": "Ingest bandwidth (TIFF → OpenCV → TFRecord), best process count",
                        "target": t, "answer": f"{g.max():,.1f} MB/s at P = {best} ({spread(runs, earlier=before)}){tied}",
                        "short": f"{g.max():,.1f} MB/s at P = {best} ({spread_cell(runs, earlier=before)})",
                        "measures": {MEASURE: list(runs)},
                        "note": tied.removeprefix("; "),
                        "basis": f"mean over repeats, P in {', '.join(str(int(x)) for x in g.index)}; preprocessing study"})
    return out

