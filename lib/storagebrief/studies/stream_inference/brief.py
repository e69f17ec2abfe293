"""The stream_inference section of the brief: the Samsung SDC 2023 study's 'Data Ingestion Disk Metrics' table (one column
per streams x FPS x topics configuration), the streams sweep, the pipeline (frames, FPS, latency), a figure
and the generated analysis."""
from __future__ import annotations

from pathlib import Path

from ...kit import disk_metrics
from ...kit.disk_metrics import cell as _g
from ...kit.files import read_json_or
from ...kit.history import earlier
from ...kit.runs import ok_runs
from ...report.display import analysis, show_figure, show_md, show_table, style, target_colors
from ...report.words import plural, spread, spread_cell


def disk_table(frame, target: str):
    """The Samsung SDC 2023 study's table for one target: metrics as rows, one column per (streams, video, topics, P, RF)."""
    import pandas as pd

    ok = ok_runs(frame)
    sel = ok[ok.target == target]
    if sel.empty:
        return pd.DataFrame()
    g = sel.groupby(["streams", "video", "topics", "partitions", "replication_factor"], sort=True).mean(numeric_only=True)
    rows = [("Avg. IOPS", lambda r: _g(r, "device_iops_avg")),
            ("Avg. throughput MiB/s", lambda r: _g(r, "device_mib_per_s_avg")),
            ("Avg. block size KiB, read / write",
             lambda r: f"{_g(r, 'device_avg_read_kib'):.1f} / {_g(r, 'device_avg_write_kib'):.1f}"),
            ("Avg. response time µs", lambda r: _g(r, "device_response_time_us")),
            ("Read % of device bytes", lambda r: _g(r, "device_read_percent")),
            ("Device writes ÷ (bytes produced × RF)", lambda r: f"{_g(r, 'write_amplification'):.2f}"),
            ("Bytes on brokers' disks ÷ (produced × RF)", lambda r: f"{_g(r, 'log_overhead_ratio'):.2f}"),
            ("CPU user / sys / iowait %", disk_metrics.cpu_text)]

    def column(key) -> str:
        s, v, t, p, rf = key
        return f"{s}, {v} FPS, RF {rf} ({p} partitions), {t} topic{'s' if t > 1 else ''}"
    return disk_metrics.table(g, rows, "Metric / concurrent streams", column)


def pipeline_table(frame):
    ok = ok_runs(frame)
    cols = {"target": "Target", "streams": "Streams", "video": "Video", "topics": "Topics",
            "frames_produced": "Frames produced", "frames_classified": "Classified", "frames_dropped": "Dropped",
            "fps_achieved_min": "Slowest stream FPS", "streams_below_fps": "Streams below FPS",
            "produce_mb_per_s": "Produced MB/s", "classified_frames_per_s": "Classified frames/s",
            "consumer_lag_frames_max": "Max lag (frames)", "latency_ms_p50": "Latency p50 ms",
            "latency_ms_p99": "Latency p99 ms"}
    g = ok.groupby(["target", "streams", "video", "topics"], sort=False).mean(numeric_only=True).reset_index()
    return g[[c for c in cols if c in g]].rename(columns=cols)


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    ok = ok_runs(frame)
    info = read_json_or(study_dir / "study.json", {})
    _what_ran(ok, info)
    for n in names:
        t = disk_table(frame, n)
        if not t.empty:
            show_table(t, f"{n}: Data Ingestion Disk Metrics, the Samsung SDC 2023 study's table rebuilt — the brokers' device during "
                          "each run (means over repeats; response time = read and write latency weighted by "
                          "their IOPS; device-wide counters).")
    if not ok.empty:
        show_table(pipeline_table(frame), "The pipeline: frames through Kafka into ResNet50 (means over repeats). "
                                          "Dropped = frames the streams decoded that were never classified.")
    _figure(ok, names)
    _analysis(ok, names, info)


def _what_ran(ok, info: dict) -> None:
    if ok.empty:
        show_md("**What ran.** No run completed.")
        return
    r = ok.iloc[0]
    k = info.get("kafka") or {}
    cluster = (f"an Apache Kafka {k.get('version', '')} cluster of {int(r.brokers)} combined broker+controller "
               "nodes (KRaft) started by the study on each target, their `log.dirs` on the target"
               if k.get("mode") == "started" else
               f"the external Kafka cluster {k.get('bootstrap', '')} (the device columns are this host's target "
               "devices, not the brokers' disks)")
    flush = (f"brokers fsync every {plural(int(r.flush_messages), 'message')} so a run's frames reach the device within it"
             if r.get("flush_messages") == r.get("flush_messages") and r.get("flush_messages") is not None
             else "brokers leave writeback to the OS (Kafka's default)")
    startups = info.get("cluster_startup_s") or []
    show_md(
        f"**What ran.** Each of S concurrent streams decodes a generated video with OpenCV at its frame rate, "
        f"JPEG-encodes every frame (quality {int(r.jpeg_quality)}) and publishes it with confluent-kafka "
        f"(acks={r.acks}) to {cluster}; {flush}. A consumer group of {plural(int(r.consumers), 'process')} classifies "
        f"the frames with ResNet50 (weights=None) at {int(r.input_size)}×{int(r.input_size)} input, batch "
        f"{int(r.batch_size)}, on {r.tf_device}. Each stream plays {r.duration_s:g} s of video; latency runs from "
        "the producer's timestamp just before publishing to the moment the frame's class is known. "
        + (f"Cluster start-up took {', '.join(f'{s:.1f}' for s in startups)} s per target. " if startups else ""))


def _span(values, fmt: str) -> str:
    """'1.22–1.51', or '1.22' where every run gave the same (not '1.22–1.22')."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _figure(ok, names: list[str]) -> None:
    import matplotlib.pyplot as plt
    import seaborn as sns

    sweep = ok[ok.sweep == "streams"]
    if sweep.streams.nunique() < 2:
        return
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.1))
    for ax, (col, label, unit) in zip(axes, [("device_iops_avg", "brokers' device IOPS", "IOPS"),
                                              ("device_mib_per_s_avg", "brokers' device MiB/s", "MiB/s"),
                                              ("latency_ms_p99", "frame latency p99 (ms)", "ms")]):
        if col in sweep:
            sns.lineplot(sweep, x="streams", y=col, hue="target", hue_order=names, marker="o", ax=ax,
                         errorbar=None, legend=ax is axes[0], palette=target_colors(names))
        ax.set(xlabel="concurrent streams", ylabel=unit, title=label)
    show_figure(fig, "Streams sweep (first video, first topic count): the brokers' disk load and the "
                     "end-to-end latency as streams are added.")


def _analysis(ok, names: list[str], info: dict) -> None:
    if ok.empty:
        return
    lines = []
    for n in names:
        g = ok[ok.target == n]
        if g.empty:
            continue
        top = g.loc[g.device_iops_avg.idxmax()] if "device_iops_avg" in g and g.device_iops_avg.notna().any() else None
        if top is not None:
            lines.append(f"- **{n}**: up to {top.device_iops_avg:,.0f} IOPS and {top.device_mib_per_s_avg:,.1f} MiB/s "
                         f"on the brokers' device at {plural(int(top.streams), 'stream')} of {top.video}, "
                         f"{plural(int(top.topics), 'topic')}; write requests average {top.device_avg_write_kib:,.1f} KiB, "
                         f"{100 - top.device_read_percent:.1f} % of device bytes are writes (the Samsung SDC 2023 study: nearly 100 %).")
        wa = g.write_amplification.dropna() if "write_amplification" in g else []
        if len(wa):
            lines.append(f"- **{n}**: the device wrote {_span(wa, '{:.2f}')} × the replicated bytes "
                         "(bytes produced × RF); above 1 is log-index, metadata and filesystem-journal overhead, "
                         "below 1 means data had not reached the device when the run ended.")
        slow = int(g.streams_below_fps.sum())
        kept = "every stream kept its frame rate" if slow == 0 else plural(slow, "stream run") + " fell below their frame rate"
        lines.append(f"- **{n}**: {kept}; "
                     f"{plural(int(g.frames_dropped.sum()), 'frame')} decoded but not classified; latency p99 "
                     f"{_span(g.latency_ms_p99, '{:,.0f}')} ms.")
    lines.append("- Device counters are device-wide: anything else on the same disk during a run is in them, and "
                 "two targets on one disk differ only by the emulated profile (cgroup v1 throttles the brokers' "
                 "fsync'ed writes, not the kernel's background writeback).")
    analysis(lines)


MEASURE = "frames/s at the best stream count"     # kit/history: earlier studies' runs of this answer


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: the most frames/s the pipeline classified with every frame drained and none dropped."""
    ok = ok_runs(frame)
    out = []
    for t in names:
        g = ok[(ok.target == t) & ok.drained.astype(str).str.lower().eq("true") & (ok.frames_dropped == 0)]
        if len(g):
            best = g.loc[g.classified_frames_per_s.idxmax()]
            runs = g[g.streams == best.streams].classified_frames_per_s      # the repeats at the best stream count
            before = earlier(study_dir, MEASURE, t)
            out.append({"question": "Streaming inference, frames/s with every frame classified",
                        "target": t, "answer": f"{best.classified_frames_per_s:,.1f} frames/s ({spread(runs, earlier=before)})",
                        "short": f"{best.classified_frames_per_s:,.1f} frames/s ({spread_cell(runs, earlier=before)})",
                        "note": "", "measures": {MEASURE: list(runs)},
                        "basis": f"{int(best.streams)} streams, p99 latency {best.latency_ms_p99:,.0f} ms; "
                                 "streaming study (the consumers' CPU, not the disk, usually limits it)"})
    return out


# The brief's optional parts this study does not have (core/contract.py BriefRoom).
trace_workloads = None
