"""The transfer-sweep section of the brief: throughput vs latency curves (one line per transfer size, dots
labelled with QD), idle vs busy per target, target A vs B on the busy system, a table per figure, the
busy load as measured, the GPU path (or why not), and the accelerators forecast beside the emulated answer."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...kit.files import read_csv_or_none, read_json_or
from ...report.display import analysis, log_axis_ticks, show_figure, show_md, show_table, style, target_colors
from ...report.words import plural
from .params import size_label


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    study = read_json_or(study_dir / "study.json", {})
    pts = read_csv_or_none(study_dir / "points.csv")
    if pts is None:
        show_md("No points were measured.")
        return
    cpu = pts[pts.path == "cpu"]
    _what_ran(frame, study, cpu)
    _busy_load(frame, study)
    loads = [ld for ld in ("idle", "busy") if ld in set(cpu.load)]
    for name in names:
        g = cpu[cpu.target == name]
        if not g.empty:
            # each target idle vs busy: detail (the appendix); the targets compared is the key figure
            _curves(g, "load", loads, f"{name}: idle vs busy" if len(loads) > 1 else name, detail=len(names) > 1)
    if len(names) > 1:
        sys_load = "busy" if "busy" in loads else loads[0]
        _curves(cpu[cpu.load == sys_load], "target", names, f"{' vs '.join(names)} on the {sys_load} system")
    _analysis(frame, cpu, names, loads)
    _gpu(study, pts)
    _forecast(study_dir)


def _what_ran(frame, study: dict, cpu) -> None:
    sizes = ", ".join(size_label(int(b)) for b in sorted(cpu.block_size_bytes.unique()))
    qds = ", ".join(str(int(q)) for q in sorted(cpu.queue_depth.unique()))
    show_md(
        f"**What ran.** One fio job per point ({study.get('fio_version', 'fio')}, the {study.get('engine')} engine, "
        f"direct I/O, {', '.join(sorted(cpu.rw.unique()))}), transfer sizes {sizes} (K = 1,024 B) at queue depths "
        f"{qds} ({study.get('queue_depth_split', '')}), {study.get('ramp_time_s')} s ramp + "
        f"{study.get('runtime_s')} s measured per point, {plural(int(frame.repeat.max()), 'repeat')} (the outer loop), on a "
        f"fully written {study.get('file_bytes', 0) / 2**20:,.0f} MiB file per target; emulated targets run fio "
        "inside their blkio throttle. Throughput is fio's bandwidth in MB/s (10⁶ B/s); mean latency is fio's "
        "total latency (submission + completion) in µs; p99 is fio's completion-latency percentile, recomputed "
        "from the histogram bins of all repeats merged (fio's own rule), so it is exact over every I/O of the "
        "point, not an average of percentiles.")
    show_md("fio's raw JSON+ output of every run: `fio/<run_id>.json` in the study's folder.", detail=True)


def _busy_load(frame, study: dict) -> None:
    busy = study.get("busy")
    if not busy:
        return
    b = frame[frame.load == "busy"]
    s = busy.get("settings", {})
    cpu_m = pd.to_numeric(b.get("cpu_busy_percent"), errors="coerce")
    lc = pd.to_numeric(b.get("load_cpu_percent"), errors="coerce")
    share = pd.to_numeric(b.get("load_memory_share_percent"), errors="coerce")
    show_md(
        f"**The busy system, measured.** Micron's GDS brief's busy system ran stressapptest at 86 % CPU and ~50 % of memory "
        f"bandwidth. Here {busy['tool']} ran beside fio (outside fio's cgroup, stopped and reaped after every busy "
        f"point): peak memory bandwidth of this machine {busy['peak_memory_mb_per_s']:,.0f} MB/s "
        f"({busy.get('peak_method', '')}); targets {b.load_cpu_percent_target.iloc[0]:g} % CPU and "
        f"{b.load_memory_share_percent_target.iloc[0]:g} % of that peak; calibrated with fio not running to "
        f"{(s.get('calibrated_cpu_percent') or float('nan')):.0f} % CPU ({s.get('calibration', '')}). During the "
        f"busy points the machine's CPU was busy {cpu_m.mean():.0f} % (range {cpu_m.min():.0f}–{cpu_m.max():.0f} %, "
        f"/proc/stat, fio included); the load itself used {lc.mean():.0f} % of all {busy.get('cpus')} CPUs "
        f"(its own usr+sys) and moved {share.mean():.0f} % of the peak memory bandwidth (range "
        f"{share.min():.0f}–{share.max():.0f} %, its own report). With {busy.get('cpus')} CPUs, an 86 % load leaves "
        "fio about a seventh of the machine: that is the point of the test.")


def _curves(g: pd.DataFrame, hue: str, order: list[str], title: str, detail: bool = False) -> None:
    """Throughput (x) vs mean and p99 latency (y), a line per transfer size and hue, QD labels; a table."""
    import matplotlib.pyplot as plt

    sizes = sorted(g.block_size_bytes.unique())
    p99 = "clat_us_p99_merged" if "clat_us_p99_merged" in g else "clat_us_p99_mean"
    fig, axes = plt.subplots(len(sizes), 2, figsize=(9.5, 2.5 * len(sizes)), squeeze=False)
    styles = ["-", "--", ":", "-."]
    colors = target_colors(order) if hue == "target" else {}
    for i, bs in enumerate(sizes):
        for j, (col, ylabel) in enumerate((("lat_us_mean_mean", "mean latency µs"), (p99, "p99 latency µs"))):
            ax = axes[i][j]
            for k, h in enumerate(order):
                c = g[(g.block_size_bytes == bs) & (g[hue] == h)].sort_values("queue_depth")
                if c.empty:
                    continue
                ax.plot(c.throughput_mb_per_s_mean, c[col], styles[k % 4], marker="o", label=str(h),
                        color=colors.get(h))
                for n, (x, y, q) in enumerate(zip(c.throughput_mb_per_s_mean, c[col], c.queue_depth)):
                    # labels alternate above and below their dot: neighbouring QDs do not print on each other
                    ax.annotate(f"QD{int(q)}", (x, y), fontsize=7, xytext=(3, 4 if n % 2 == 0 else -10),
                                textcoords="offset points")
            ax.set_xscale("log")
            ax.set_yscale("log")
            log_axis_ticks(ax)
            ax.set(xlabel="throughput MB/s", ylabel=ylabel, title=f"{size_label(int(bs))} transfers")
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    show_figure(fig, f"{title}: throughput (x, MB/s) vs latency (y, µs), one line per {hue}, dots labelled with "
                     "queue depth (log axes; lower right is better). Means over repeats; p99 from merged bins.",
                detail=detail)
    t = g.sort_values(["block_size_bytes", hue, "queue_depth"])
    table = pd.DataFrame({"Size": t.block_size_bytes.map(lambda b: size_label(int(b))), hue.title(): t[hue],
                          "QD": t.queue_depth, "MB/s": t.throughput_mb_per_s_mean, "± sd": t.throughput_mb_per_s_sd,
                          "IOPS": t.iops_mean, "mean µs": t.lat_us_mean_mean, "p99 µs": t[p99],
                          "p99.9 µs": t.get("clat_us_p99_9_merged"), "repeats": t.repeats})
    show_table(table, f"{title}: the figure's numbers (sd over repeats; percentiles over all repeats' I/Os).")


def _analysis(frame, cpu, names: list[str], loads: list[str]) -> None:
    from .metrics import headlines
    lines = []
    for h in headlines(frame, names):
        if h.get("delta_percent") is None:
            continue
        lines.append(f"- **{h['label']}** ({h['ref']} vs {h['other']}): {h['text']}.")
    if "busy" in loads and "idle" in loads:
        m = cpu.pivot_table(index=["target", "block_size_bytes", "queue_depth"], columns="load",
                            values="throughput_mb_per_s_mean")
        faster = m[m.busy > m.idle * 1.05]
        if len(faster):
            lines.append(f"- In {len(faster)} of {len(m)} points the busy system read faster than the idle one; on a "
                         "virtual machine a loaded vCPU stays awake, so completions are noticed sooner (no wake-up "
                         "from idle): the load can shorten latency at low CPU demand while it starves fio at high "
                         "IOPS.")
    analysis(lines or ["- No matched points to compare."],
             tail="Micron's GDS brief measured a PCIe Gen4 NVMe SSD on a 2 × 64-core server; these numbers are this machine's.")


def _gpu(study: dict, pts) -> None:
    from .gpu_brief import section as gpu_section
    gpu_section(study, pts)


def _forecast(study_dir: Path) -> None:
    fc = read_csv_or_none(study_dir / "forecast.csv")
    if fc is None:
        return
    first = fc.iloc[0]
    show_md(
        "**How many accelerators can each target feed?** A forecast from the curves above: one accelerator of "
        f"workload *{first.workload}* ({first.accelerator_type}) reads batch {int(first.batch_size)} × "
        f"{first.record_bytes / 1e6:.2f} MB per {first.compute_s_per_batch:g} s of compute = "
        f"{first.demand_mb_per_s_per_accelerator:,.1f} MB/s when never kept waiting "
        f"(spec from {first.workload_spec_source}). N accelerators keep AU ≥ {first.au_threshold_percent:g} % while "
        "N × demand × AU threshold ≤ the best throughput measured at the transfer size nearest the workload's "
        "request, at a queue depth N × read threads can fill. Each point counts as its worse repeat (a fast repeat "
        "cannot inflate it; the table gives the repeats' spread), capped at what an emulated target's profile "
        "allows (a short point can overshoot its throttle); a busy system's forecast is capped at the idle one's. "
        "Assumptions: the loader's reads look like fio's "
        "(same size, random, direct I/O, no page cache); AU falls as throughput ÷ (N × demand) once storage is the "
        "limit; the client has CPU for N loaders; beyond the largest QD measured the curve is assumed flat.")
    t = pd.DataFrame({"Target": fc.target, "Load": fc.load, "Workload": fc.workload,
                      "Request": fc.request_bytes.map(lambda b: f"{b / 1e3:,.0f} KB"),
                      "Curve used": fc.transfer_size_bytes.map(lambda b: size_label(int(b))),
                      "Demand MB/s per acc.": fc.demand_mb_per_s_per_accelerator,
                      "MB/s used": fc.throughput_used_mb_per_s, "at QD": fc.queue_depth_used,
                      "Statistic": fc.get("curve_statistic"), "Repeats' spread %": fc.get("repeat_spread_percent"),
                      "Profile cap MB/s": fc.get("profile_cap_mb_per_s"),
                      "Forecast": fc.accelerators_forecast,
                      "Emulated": [_emulated(r) for r in fc.to_dict("records")],
                      "Emulated max tested": fc.get("emulated_max_accelerators_tested"),
                      "Forecast − emulated": fc.get("forecast_minus_emulated")})
    show_table(t, "Accelerators supported: fio forecast beside the emulate study's measured answer on the same "
                  "target and workload (same workload spec): the largest count that passed, the first that failed "
                  "and what limited it. With no count failed the answer is a floor, not a limit.", floatfmt="{:,.1f}")
    notes = [f"{r.target} ({r.workload}): {r.forecast_note}" for r in fc.itertuples()
             if isinstance(getattr(r, "forecast_note", None), str) and r.forecast_note]
    if notes:
        show_md("**Busy above idle.** " + "; ".join(notes) + ".")
    idle = fc[(fc.load == "idle") & fc.emulated_passed_at_least.notna()] if "emulated_passed_at_least" in fc else []
    if len(idle):
        diffs = "; ".join(f"{r['target']}: forecast {int(r['accelerators_forecast'])}, emulated {_emulated(r)}"
                          for r in idle.to_dict("records"))
        show_md(f"**Forecast vs emulation (idle system, as the emulate study ran).** {diffs}. Page 1 gives one "
                "answer per target: the emulated count, its range and what limited it, with this forecast reconciled.")


def _emulated(r: dict) -> str:
    """The emulate study's answer as counts: '4 passed, 8 failed (client)' (never a failed count alone)."""
    passed, failed = r.get("emulated_passed_at_least"), r.get("emulated_first_failing")
    if passed is None or pd.isna(passed):
        text = r.get("emulated_supported_text")
        return "–" if text is None or pd.isna(text) else str(text)
    return f"{int(passed)} passed, " + (f"{int(failed)} failed ({r.get('emulated_limited_by')})"
                                         if failed is not None and not pd.isna(failed) else "none failed")


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: the fio forecast of accelerators supported, idle system, per target and workload."""
    fc = read_csv_or_none(study_dir / "forecast.csv")
    if fc is None:
        return []
    idle = fc[fc.load == "idle"] if (fc.load == "idle").any() else fc
    return [{"question": f"Accelerators supported, fio forecast ({r.workload}, AU ≥ {r.au_threshold_percent:g} %)",
             "target": r.target, "answer": f"{int(r.accelerators_forecast)}",
             "basis": (f"{r.forecast_limited_by}; transfer-size study" if pd.isna(r.queue_depth_used) else
                       f"{r.throughput_used_mb_per_s:,.0f} MB/s (worse repeat) at QD {int(r.queue_depth_used)} ÷ "
                       f"{r.demand_mb_per_s_per_accelerator:,.1f} MB/s per accelerator; transfer-size study")}
            for _, r in idle.iterrows()]


# The brief's optional parts this study does not have (core/contract.py BriefRoom).
trace_workloads = None
