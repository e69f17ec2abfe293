"""The brief's block-level I/O characterization section (the Samsung SDC 2023 study's btt analysis, rebuilt).

Every study's engine writes characterization.csv (one row per run, keyed by run_id) and the
compressed tracefs trace of each run (traces/). This section picks the representative runs
(one per workload: a study's brief room may define `trace_workloads(frame, names)` returning
[(label, run_id)]; otherwise the reference target's run with the most requests), shows the
Samsung SDC 2023 study's "Summary statistics" table with one row per workload run, the LBA-vs-time scatter,
the read and write request-size distributions and the locality histogram of each, and the
analysis in the Samsung SDC 2023 study's terms.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from ..core import characterize as ch, results
from ..report.display import analysis, details_to, show_figure, show_html, show_md, show_table, style
from ..report.words import plural

DEFINITIONS = (
    "An **I/O** is one block request as issued to the device (tracefs `block:block_rq_issue`), matched to its "
    "completion by device, start sector and operation for a per-request latency; a request the driver "
    "requeues counts once. **Sequential**: its start sector equals the end sector of the previous read or write "
    "of the same device in issue order; otherwise **random** (the first is random). **Sizes** in KiB; means and "
    "standard deviations (population) over requests; medians exact. **Address space**: the device's capacity "
    "(as the raw trace's header recorded it; column capacity_source) in 1,000 equal bins; **locality** = share of requests in the 100 busiest bins (the hottest 10 % "
    "of the address space); a **locality band** = a maximal run of adjacent bins each holding more than 0.1 % of "
    "the requests (more than an even spread would give). Reads and writes are counted separately and together. "
    "Flushes and discards have their own columns and are left out of sizes, read % and IOPS. **Trace length**: "
    "first to last event; **average IOPS** = reads and writes ÷ trace length. Events come from the whole device "
    "(like diskstats), so anything else using the disk during a run is in its trace too. Traces are the "
    "kernel's binary ring-buffer pages (no text formatting while the clock runs; measured cost on fio 4 KiB "
    "random reads: within noise, `benchmarks/characterize.py`).")


def _load(reports_dir: Path, available) -> list[dict]:
    """[{study, title, dir, runs, chz}] for studies that wrote characterization.csv."""
    out = []
    for key, title, d in available:
        f = d / "characterization.csv"
        if not f.exists():
            continue
        chz = pd.read_csv(f)
        if chz.empty:
            continue
        out.append({"study": key, "title": title, "dir": d, "runs": results.read_runs(d / "runs.csv"), "chz": chz})
    return out


def workloads(study, runs: pd.DataFrame, chz: pd.DataFrame, names: list[str]) -> list[tuple[str, str]]:
    """(label, run_id) of the representative runs of a study that have a characterization row."""
    have = set(chz.run_id)
    try:
        pick = study.room("brief").trace_workloads
    except ImportError:
        pick = None
    chosen = [(lab, rid) for lab, rid in (pick(runs, names) if pick else []) if rid in have]
    if chosen:
        return chosen
    ref = chz[chz.target == (names[0] if names else chz.target.iloc[0])]
    ref = ref if not ref.empty else chz
    busiest = ref.assign(n=ref.read_ops.fillna(0) + ref.write_ops.fillna(0)).sort_values("n").iloc[-1]
    return [(study.title.split(":")[0], busiest.run_id)]


def section(reports_dir: str | Path, available, target_order, appendix=None) -> None:
    from ..studies import get as get_study

    reports_dir = Path(reports_dir)
    loaded = _load(reports_dir, available)
    if appendix is None:
        show_html('<h2 class="section">Block-level I/O characterization</h2>')
    else:         # the brief: the whole section is its appendix (the body held a heading and a pointer, issue 62)
        appendix.take_all()
    if not loaded:
        with details_to(appendix):
            show_md("No study wrote `characterization.csv` yet: run a study (block tracing is `run.trace`).")
        return
    style()
    rows, picks = [], []
    notes: list[str] = []
    for s in loaded:
        study = get_study(s["study"])
        names = target_order(s["dir"], s["runs"])
        for label, rid in workloads(study, s["runs"], s["chz"], names):
            r = s["chz"][s["chz"].run_id == rid].iloc[0].to_dict()
            rows.append({"Workload Description": f"{label} ({r['target']})", **r})
            picks.append((label, r, s["dir"]))
        src = set(s["chz"].source)
        if "diskstats" in src:
            notes.append(f"{s['title']}: {plural(int((s['chz'].source == 'diskstats').sum()), 'run')} without a block trace "
                          "(see the study's limits): read %, IOPS and mean sizes come from diskstats, the rest is –")
        lost = s["chz"].get("lost_events", pd.Series(dtype=float)).fillna(0).sum()
        if lost:
            notes.append(f"{s['title']}: {int(lost):,} block events lost in the traces (tracefs buffer too small)")
        notes += [f"{s['title']}, run {r['run_id']}: {r['warning']}" for r in s["chz"].to_dict("records")
                  if isinstance(r.get("warning"), str) and r["warning"]]      # e.g. requests beyond the capacity
    frame = pd.DataFrame(rows)
    with details_to(appendix):
        _shown(frame, picks, notes)


def _shown(frame: pd.DataFrame, picks, notes: list[str]) -> None:
    """What this is, the summary table, the analysis, the plots, the locality table, the limits."""
    show_md(f"**What this is.** The block requests every measured run issued to its target's device, recorded "
            "with tracefs and summarized as in the Samsung SDC 2023 study's btt analysis; one row per workload (reference target, "
            "first repeat; every run's row is in each study's `characterization.csv`).")
    show_md("**Definitions.** " + DEFINITIONS, detail=True)
    _summary_table(frame)
    per_workload = _analysis(picks)
    traced = [(lab, r, d) for lab, r, d in picks if r.get("source") == "tracefs" and isinstance(r.get("trace_file"), str)]
    dists = []
    for lab, r, d in traced:
        try:
            row, dist, _ = ch.characterize(d / r["trace_file"], ch.sniff_format(d / r["trace_file"]), _cap(r), sample_points=3000,
                                           require_requests=False)
        except (ch.TraceError, OSError) as exc:
            notes.append(f"{lab}: trace not readable ({exc})")
            continue
        dists.append((f"{lab} ({r['target']})", row, dist))
    if dists:
        _lba_plots(dists)
        _size_plots(dists)
        _locality_plots(dists)
    _locality_table(frame)
    # Last in the appendix: a long list that spills onto a page of its own then ends the document instead of
    # stranding a few lines before the full-page figures.
    show_md(per_workload, detail=True)
    if notes:
        show_html('<div class="warn"><b>Limits of this characterization</b><ul>' +
                  "".join(f"<li>{html.escape(n)}</li>" for n in dict.fromkeys(notes)) + "</ul></div>", detail=True)


def _cap(r: dict):
    c = r.get("capacity_sectors")
    return int(c) if c is not None and not (isinstance(c, float) and math.isnan(c)) else None


def _summary_table(frame: pd.DataFrame) -> None:
    """The Samsung SDC 2023 study's backup table, split into page-wide parts; column names as the Samsung SDC 2023 study's."""
    cols = {"Workload Description": "Workload Description", **{k: lab.strip() for lab, k in ch.SEED_COLUMNS}}
    t = frame[list(cols)].copy()
    t.columns = [("Write Std. Dev. (KiB)" if k == "write_kib_stdev" else
                  "Read Std. Dev. (KiB)" if k == "read_kib_stdev" else lab) for k, lab in cols.items()]
    w = t.columns
    show_table(t[[w[0], *w[1:9]]], "Summary statistics (the Samsung SDC 2023 study's backup table), part 1: mix, randomness, "
                                   "average IOPS and read request sizes (KiB; median exact, standard deviation "
                                   "over requests).")
    show_table(t[[w[0], *w[9:14], w[18]]], "Summary statistics, part 2: write request sizes (KiB) and trace length.")
    ops = t[[w[0], *w[14:18]]].assign(**{"Flushes": frame.flush_ops, "Discards": frame.discard_ops,
                                         "Requeues": frame.requeues, "Lost events": frame.lost_events})
    show_table(ops, "Summary statistics, part 3: random and sequential operations; flushes and discards (own "
                    "columns, not in sizes); requests the driver requeued (counted once); events lost by tracing.",
               floatfmt="{:,.0f}")


def _locality_table(frame: pd.DataFrame) -> None:
    t = pd.DataFrame({
        "Workload": frame["Workload Description"],
        "% of I/O in 10 % of address space": frame.locality_percent, "Locality bands": frame.locality_bands,
        "Read bands": frame.read_locality_bands, "Write bands": frame.write_locality_bands,
        "Read latency median (µs)": frame.read_latency_us_median,
        "Read latency p99 (µs)": frame.read_latency_us_p99,
        "Write latency median (µs)": frame.write_latency_us_median})
    show_table(t, "Locality of reference (reads and writes together, and bands of each) and per-request latency "
                  "(issue → completion, from the kernel's ns timestamps) of the same runs.", floatfmt="{:,.0f}")


def _pct(v) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0f} %"


def _analysis(picks) -> str:
    """Shows the body's two-sentence summary; returns the appendix's per-workload bullets (shown by the caller)."""
    lines = []
    for label, r, _ in picks:
        if r.get("source") != "tracefs":
            rp = r.get("read_percent")
            lines.append(f"- **{label}** ({r['target']}): no block trace; diskstats: {_pct(rp)} read, "
                         f"{r.get('avg_iops', float('nan')):,.0f} IOPS.")
            continue
        if not (r.get("read_ops", 0) + r.get("write_ops", 0)):
            lines.append(f"- **{label}** ({r['target']}): no read or write reached the device (served from the "
                         "page cache or buffered past the run).")
            continue
        text = ch.describe(r)
        loc = r.get("locality_percent")
        bands = r.get("locality_bands")
        extra = ""
        if loc is not None and not math.isnan(loc):
            extra = (f"; {loc:.0f} % of its requests fall in the busiest 10 % of the device's address space "
                     f"({int(bands)} locality band{'s' if bands != 1 else ''})")
        med_r, med_w = r.get("read_kib_median"), r.get("write_kib_median")
        meds = ", ".join(f"median {what} {v:,.0f} KiB" for what, v in (("read", med_r), ("write", med_w))
                         if v is not None and not math.isnan(v))
        lines.append(f"- **{label}** ({r['target']}): {text}{' (' + meds + ')' if meds else ''}{extra}; "
                     f"{r.get('avg_iops', float('nan')):,.0f} IOPS over {r.get('trace_length_s', float('nan')):.1f} s.")
    tail = ("Random and sequential follow the Samsung SDC 2023 study's rule (a request is sequential when it starts where the previous "
            "one of the device ended), so several readers interleaving on one device read 'randomly' even when each "
            "reads its files front to back.")
    show_md(_summary(picks) + " " + tail)
    return "**Analysis, per workload.**\n\n" + "\n".join(lines)    # one bullet each: the appendix


def _summary(picks) -> str:
    """The body's analysis in two sentences: how many workloads read more than wrote, the most random and the
    most sequential one (every workload's bullet is in the appendix)."""
    traced = [(lab, r) for lab, r, _ in picks if r.get("source") == "tracefs"
              and (r.get("read_ops", 0) + r.get("write_ops", 0)) and _num(r.get("random_percent")) is not None]
    if not traced:
        return "**Analysis.** No workload's block trace held a request."
    reads = sum(1 for _, r in traced if (_num(r.get("read_percent")) or 0) > 50)
    hi = max(traced, key=lambda x: x[1]["random_percent"])
    lo = min(traced, key=lambda x: x[1]["random_percent"])
    return (f"**Analysis.** Of {len(traced)} traced workloads, {reads} mostly read and {len(traced) - reads} mostly "
            f"wrote. The most random is {hi[0]} ({hi[1]['target']}, {hi[1]['random_percent']:.0f} % random), the most "
            f"sequential {lo[0]} ({lo[1]['target']}, {lo[1]['random_percent']:.0f} % random); each workload's sizes, "
            "locality and IOPS are in the appendix.")


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _grid(n: int, width: float = 9.5, per_row: int = 3, height: float = 2.3):
    import matplotlib.pyplot as plt
    cols = min(per_row, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _lba_plots(dists) -> None:
    fig, axes = _grid(len(dists))
    for ax, (label, row, d) in zip(axes, dists):
        pts = d["sample"]
        t0 = d["t0"] or 0
        cap = row.get("capacity_sectors") or 1
        for op, color in (("R", "tab:blue"), ("W", "tab:red")):
            xs = [p[0] - t0 for p in pts if p[3] == op]
            ys = [100 * p[1] / cap for p in pts if p[3] == op]
            if xs:
                ax.scatter(xs, ys, s=5, c=color, label="read" if op == "R" else "write", alpha=0.6, linewidths=0)
        ax.set_title(label, fontsize=9)
        ax.set(xlabel="seconds", ylabel="LBA (% of device)")
        ax.set_ylim(0, 100)
    axes[0].legend(loc="upper right", fontsize=7, markerscale=4)
    fig.tight_layout()
    show_figure(fig, "LBA vs time per workload: each dot is a request (start sector as % of the device's "
                     "capacity; a sample of at most 3,000 per run).", detail=True)


def _size_label(kib: float) -> str:
    return f"{kib:g}" if kib < 1024 else f"{kib / 1024:g}M"


def _size_bins(merged: dict[float, list[int]]) -> tuple[list[float], list[list[int]]]:
    """Request sizes in power-of-two bins (bin k holds [2^k, 2^(k+1)) KiB), every bin between the smallest
    and largest present: a log axis whose labels keep their spacing however many sizes occurred."""
    k_of = {s: math.floor(math.log2(s)) for s in merged if s > 0}
    if not k_of:
        return [], []
    ks = range(min(k_of.values()), max(k_of.values()) + 1)
    counts = {k: [0, 0] for k in ks}
    for s, k in k_of.items():
        counts[k][0] += merged[s][0]
        counts[k][1] += merged[s][1]
    return [2.0 ** k for k in ks], [counts[k] for k in ks]


def _size_plots(dists) -> None:
    import numpy as np
    for op in ("read", "write"):
        have = [(lab, d) for lab, _, d in dists
                if any(d["sizes_kib"][f"{op}_{k}"] for k in ("random", "sequential"))]
        if not have:
            continue
        fig, axes = _grid(len(have), height=2.3)
        for ax, (label, d) in zip(axes, have):
            merged: dict[float, list[int]] = {}
            for i, k in enumerate(("random", "sequential")):
                for kib, n in d["sizes_kib"][f"{op}_{k}"].items():
                    merged.setdefault(float(kib), [0, 0])[i] += n
            lows, counts = _size_bins(merged)
            x = np.arange(len(lows))
            ax.bar(x, [c[0] for c in counts], color="tab:orange", label="random")
            ax.bar(x, [c[1] for c in counts], bottom=[c[0] for c in counts], color="tab:green", label="sequential")
            ax.set_xticks(x, [_size_label(s) for s in lows], fontsize=7)
            ax.set_title(label, fontsize=9)
            ax.set(xlabel="KiB (power-of-two bins)", ylabel="requests")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        show_figure(fig, f"{op.capitalize()} request-size distribution per workload: each bar counts the requests "
                         "from its label's size up to twice it (KiB; M = MiB), random and sequential stacked.",
                    detail=True)


def _locality_plots(dists) -> None:
    fig, axes = _grid(len(dists), height=2.1)
    for ax, (label, row, d) in zip(axes, dists):
        r, w = d["locality_bins"]["read"], d["locality_bins"]["write"]
        ax.set_title(label, fontsize=9)
        if not r:
            continue
        total = sum(r) + sum(w) or 1
        # one line per bin that holds requests (a bar 1/1,000 of the axis wide would not show)
        for bins, color, name, base in (("read", "tab:blue", "read", None), ("write", "tab:red", "write", r)):
            vals = d["locality_bins"][bins]
            xs = [i for i, v in enumerate(vals) if v]
            lo = [100 * base[i] / total if base else 0 for i in xs]
            ax.vlines(xs, lo, [lo[k] + 100 * vals[i] / total for k, i in enumerate(xs)], color=color,
                      linewidth=2, label=name)
        ax.set_xlim(0, len(r))
        ax.set_ylim(bottom=0)
        ax.set(xlabel="address-space bin (0.1 % of device)", ylabel="% of requests")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "Locality histogram: share of each run's requests per 1/1,000 of the device's address space.", detail=True)
