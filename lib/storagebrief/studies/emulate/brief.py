"""The emulate section of the brief: the KIOXIA brief's six tests, days saved, accelerators supported and what
limited each run, latency."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ...kit import client_check, mlpstorage_verdict
from ...kit.figures import metric_vs
from ...kit.files import read_csv_or_none, read_json_or
from ...report.display import analysis, fmt_s, show_figure, show_md, show_table, style, target_colors
from ...report.words import plural
from . import brief_s3
from .limits import MARGIN_POINTS, answer_note, client_checks, judge, point_cause
from .mlperf import verdicts as mlperf_verdicts
from .plan import measured
from .window import MIN_WINDOW_LOOKAHEADS
from .metrics import (LAT_BINS_PER_DECADE, days_saved_table, drive_columns, extrapolation_refused, figures,
                      supported)


def section(study_dir: Path, frame, names: list[str]) -> None:

    style()
    study_dir = Path(study_dir)
    checked, rules = client_checks(frame), mlperf_verdicts(frame)
    full, frame = frame, measured(frame)
    desc = read_json_or(study_dir / "study.json")
    _what_ran(frame, desc)
    _hosts(study_dir, frame)
    _workload_table(frame)
    palette = target_colors(names)
    for w, g in frame.groupby("workload", sort=False):
        _six_tests(frame, w, g, names, palette)
        _days_saved(frame, w, g, names, desc)
    sup = supported(frame)
    _supported_table(sup)
    brief_s3.section(frame, full, desc)
    _mlperf_rules(rules)
    if verdict := mlpstorage_verdict.paragraph(study_dir, "training"):    # MLPerf's code on the runs
        show_md(verdict)
    _search_table(frame)
    _limits_table(frame)
    _client_check(checked)
    _analysis(frame, sup)
    _latency_histogram(study_dir, palette)
    _latency_table(frame)


# How the page cache was kept out of the measurement (the dataset_sizing column, run.py / objects.py), in words.
SIZING = {"memory_cap": "a memory cap (a cgroup holds each run's page cache well below its data set)",
          "memory_cap->fadvise_evict (no memory cgroup)": "evicting each file from the page cache after it is read "
                                                          "(no memory cgroup here)",
          "memory_cap->fadvise_evict of the gateway's files (S3)": "evicting the S3 gateway's files from the page "
                                                                    "cache after they are read (S3)",
          "odirect (page cache bypassed)": "direct I/O (page cache bypassed)",
          "fixed (page cache not controlled)": "nothing (a fixed data set; page cache not controlled)",
          "mlperf": "MLPerf's sizing (a data set larger than this machine's memory)"}


def _what_ran(frame, desc: dict) -> None:
    repeats = int(frame.repeat.max())
    sizing = "; ".join(dict.fromkeys(SIZING.get(s, s) for s in sorted(set(frame.dataset_sizing.astype(str)))))
    mpi = "launcher" in frame and (frame.launcher == "mpi").any()
    how = ("an MPI rank (mpirun, one rank per accelerator; the per-step barrier is an MPI barrier)" if mpi
           else "a process forked on this host")
    show_md(
        f"**What ran.** Each emulated accelerator is {how} with its own loader "
        f"({int(frame.read_threads.iloc[0])} read threads, {int(frame.prefetch.iloc[0])} batches prefetched per thread, "
        f"{int(frame.read_block_bytes.iloc[0]) // 1024} KiB reads) that reads every sample's bytes from the target, then "
        "sleeps for the accelerator's compute time per batch; all accelerators meet at a barrier every step "
        f"(the all-reduce). Files are reshuffled every epoch with a fixed seed. {plural(int(frame.epochs.iloc[0]), 'epoch')}, "
        f"{plural(repeats, 'repeat')} per point, cold cache before every run, targets interleaved. AU % = compute ÷ wall time "
        "over the measured steps, nothing subtracted (as MLPerf Storage and DLIO define it): an accelerator that is "
        "late, for whatever reason, lowers AU. Page cache kept out of the measurement by: "
        f"**{sizing}**. MB = 10⁶ bytes, MiB = 2²⁰ bytes.")
    _au_window(frame)
    _search_what_ran(frame)
    if desc.get("scale_note"):
        show_md(f"**Scaled down.** This run's workload differs from the DLIO / MLPerf Storage reference values: "
                f"{desc['scale_note']}. The quick profile shrinks files and compute time so the sweep finishes in "
                "minutes on a small machine while each accelerator still demands a fixed bandwidth; absolute times "
                "are not comparable with published results, the shape of the curves is.")


def _searched(frame) -> bool:
    return "search_step" in frame and bool(frame.search_step.notna().any())


def _search_what_ran(frame) -> None:
    """accelerators: auto: how the accelerator counts were chosen."""
    if not _searched(frame):
        return
    show_md(f"**Accelerator counts searched** (`emulate.accelerators: auto`), per workload and target: N = 1, 2, "
            "4, 8, … while the mean AU of a count's repeats stays at or above the threshold, then bisection between "
            "the largest passing and the first failing count until they are neighbours (the answer, storage-limited). "
            "A failing count the client limited ends the search (client-limited at N). The search also stops at its "
            f"time budget ({frame.search_budget_s.max():.0f} s of its own runs per workload and target; a new count "
            "starts only when its repeats are expected to fit) or at its largest count: N = "
            f"{int(frame.search_max.max())} (`emulate.search_max`){_memory_caps(frame)}: the answer is then a floor, "
            "\"≥ N\". Each count "
            f"probed runs {plural(int(frame.repeat.max()), 'repeat')} and is judged on their mean AU, as a fixed list is, so "
            "one run's spread near the threshold does not steer the search; every probe is a row of runs.csv "
            "(`search_step`, `search_phase`, `search_elapsed_s`).")


def _search_table(frame) -> None:
    """Every probe of every search, in order: N, mean AU and its range over repeats, verdict, time used."""
    if not _searched(frame):
        return
    rows = []
    for (w, t), g in frame[frame.search_step.notna()].groupby(["workload", "target"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        for step, x in g.groupby("search_step"):
            by = x.limited_by if "limited_by" in x else ["storage"] * len(x)
            verdict = judge(x.au_percent, by, thr)
            rows.append({"Workload": w, "Target": t, "Step": int(step), "Phase": str(x.search_phase.iloc[0]),
                         "N": int(x.accelerators.iloc[0]), "Runs": len(x), "AU % (mean)": x.au_percent.mean(),
                         "AU % (min–max)": f"{x.au_percent.min():.1f}–{x.au_percent.max():.1f}",
                         "Verdict": "pass" if verdict == "pass" else "no measurement (too few steps)"
                         if verdict == "unmeasured" else f"fail ({verdict})",
                         "Search s so far": x.search_elapsed_s.max()})
    show_table(pd.DataFrame(rows), "The search's probes in the order they ran (targets took turns run by run). "
                                   "Verdict: pass = mean AU at or above the threshold; fail (storage | client) = what "
                                   "limited its runs; no measurement = its AU passed but prefetch carried its window "
                                   "(runs.csv au_measured). 'Search s so far' is the budget's clock after the probe.",
               floatfmt="{:,.3g}")


def _hosts(study_dir: Path, frame) -> None:
    """Where the accelerators ran: one row per client host when more than one host took part."""
    if "hosts" not in frame or int(frame.hosts.max()) <= 1:
        return
    h = read_csv_or_none(study_dir / "hosts.csv")
    if h is None:
        return
    tab = h.groupby(["workload", "target", "accelerators", "host"], as_index=False).agg(
        ranks=("accelerators", "size"), mb=("loader_read_mb_per_s", "mean"), cpu=("client_cpu_s_per_gb", "mean"),
        au=("au_own_percent_mean", "mean"))
    show_table(tab.rename(columns={"workload": "Workload", "target": "Target", "accelerators": "N", "host": "Host",
                                   "ranks": "Runs", "mb": "Loader MB/s", "cpu": "Client CPU s per GB",
                                   "au": "Own AU % (mean)"}),
               "Client hosts (MPI): each host's share of the load, means over repeats. The machine-wide CPU and "
               "device columns elsewhere are the launching host's only.", floatfmt="{:,.3g}")


def _au_window(frame) -> None:
    """Which steps AU covers, in numbers from the runs."""
    if "au_warmup_steps" not in frame:
        return
    first = frame.loc[frame.steps.idxmin()]
    w = int(first.read_threads) * (int(first.prefetch) + 1)
    counts = ", ".join(f"{int(r.steps)} steps at {plural(int(r.accelerators), 'accelerator')}: {int(r.au_warmup_steps) + 1}.."
                       f"{int(r.steps) - int(r.au_drain_steps)}"
                       for _, r in frame.drop_duplicates(["workload", "accelerators"]).iterrows())
    show_md(f"**Which steps AU measures (steady state).** Each loader can hold up to read threads × (prefetch + 1) = "
            f"{int(first.read_threads)} × ({int(first.prefetch)} + 1) = {w} batches ahead of its accelerator. The first {w} "
            "steps can consume batches read during start-up, and the last ones batches read before the loader ran "
            "dry: on a storage-bound run both are free steps that overstate AU in short runs. AU and samples/s "
            f"therefore leave out up to {w} steps at each end (at most a quarter of the run each; the first step "
            f"always), and the throttle bound uses the request size the run's cgroup saw in that window: "
            f"{counts}. Total time covers every step." + _measurement(frame, w))


def _measurement(frame, w: int) -> str:
    """The two checks that make a run's AU a measurement (window.py), and the runs that failed them."""
    if "au_measured" not in frame:
        return ""
    least = int(frame.au_window_min_steps.max())
    bad = frame[frame.au_measured.astype(str) == "False"]
    where = ", ".join(f"{t} at N = {int(n)}" for (t, n), _ in bad.groupby(["target", "accelerators"], sort=False))
    return (f" **An AU is a measurement** only over at least {least} steps ({MIN_WINDOW_LOOKAHEADS} × the {w} a loader "
            "holds ahead, so batches read before the window can feed at most half of it; MLPerf Storage asks for 500 "
            "steps per epoch, "
            "which the paper profile sizes its data set for) and when the loaders read, inside the window, what AU "
            "claims the accelerators consumed (AU × N × demand × the window's seconds) within 10 % "
            "(`au_supported_by_reads`). " + (f"{len(bad)} of {len(frame)} runs failed a check ({where}): their AU "
                                             "cannot pass (limited by `unmeasured`)." if len(bad) else
                                             "Every run passed both."))


def _workload_table(frame) -> None:
    wrows = []
    for w, g in frame.groupby("workload", sort=False):
        first = g.iloc[0]
        wrows.append({"Workload": w, "Files": int(first.num_files), "Dataset MB": first.dataset_bytes / 1e6,
                      "Sample MB (mean)": first.sample_bytes_mean / 1e6, "Batch": int(first.batch_size),
                      "Compute s / batch": first.compute_s, "Accelerator": first.accelerator_type,
                      "Demand MB/s per accelerator": first.demand_mb_per_s_per_accelerator,
                      "AU threshold %": first.au_threshold_percent})
    show_table(pd.DataFrame(wrows), "Workloads as run. Demand = batch × sample bytes ÷ compute time: the read "
                                    "rate one accelerator needs to stay busy.", floatfmt="{:,.3g}")


def _six_tests(frame, w: str, g, names: list[str], palette: dict) -> None:
    """The KIOXIA brief's tests 1–6 for one workload, as two rows of three bar charts."""
    import matplotlib.pyplot as plt

    figs = figures(frame)
    for part, items in ((1, figs[:3]), (2, figs[3:])):
        fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.1))
        for ax, (col, unit, title, hint) in zip(axes, items):
            if col not in g:
                ax.set_visible(False)
                continue
            metric_vs(ax, g, "accelerators", col, names, kind="bar", palette=palette)
            ax.set(xlabel="accelerators", ylabel=unit, title=f"{title}\n({hint})")
            ax.title.set_fontsize(9.5)
            if col == "au_percent":
                thr = float(g.au_threshold_percent.iloc[0])
                ax.axhline(thr, color="#c0392b", ls="--", lw=1)
                ax.set_ylim(0, 105)
            if ax is not axes[0] and ax.get_legend():
                ax.get_legend().remove()
            elif ax.get_legend():
                ax.legend(fontsize=7, title=None)
        fig.tight_layout()
        cap = ("Tests 1–3: total time, AU (dashed: MLPerf threshold) and samples/s per accelerator count"
               if part == 1 else
               f"Tests 4–6: average and maximum drive read MB/s from {drive_columns(frame)[2]} (max = largest "
               f"{frame.monitor_interval_s.iloc[0] if 'monitor_interval_s' in frame else ''} s window) and "
               "average read latency per read call seen by the loaders")
        show_figure(fig, f"{w}: {cap}. Bars: means over repeats; error bars ±1 sd.")


def _days_saved(frame, w: str, g, names: list[str], desc: dict) -> None:
    ref = names[0]
    epochs = int(g.epochs.iloc[0])
    refused = extrapolation_refused(frame, w)
    for other in names[1:]:
        ds = days_saved_table(frame, ref, other, w)
        if ds.empty:
            continue
        show_table(ds, f"{w}: time to train, {ref} vs {other}" + (
            f"; {refused}." if refused else
            f", and training days saved per year, extrapolated as in the KIOXIA brief (365 days × the share of "
            f"time saved; 100-epoch time = 100 ÷ {epochs} × the {epochs}-epoch time; models/year = 8,760 h ÷ "
            "100-epoch hours)."), floatfmt="{:,.2f}")
        best = ds.loc[ds[f"{ref} faster %"].idxmax()]
        faster = best[f"{ref} faster %"]
        n_best = int(best.Accelerators)
        text = (f"**Analysis ({w}).** With {n_best} accelerator{'s' if n_best != 1 else ''} {ref} finished "
                f"{abs(faster):.1f} % {'faster' if faster >= 0 else 'slower'} than "
                f"{other} ({fmt_s(best[f'{ref}: s'])} vs {fmt_s(best[f'{other}: s'])})")
        if refused:
            text += "; the runs are too short to say what that is over a year (see the table's caption)."
        else:
            text += (f", which over a year of continuous training is ~{abs(best['Days saved / year']):.0f} days "
                     f"{'saved' if best['Days saved / year'] >= 0 else 'lost'}."
                     + (" The share of time saved carries over to full-size runs only as far as the scaled-down "
                        "workload keeps the same demand-to-bandwidth ratio; the hours and models per year are "
                        "those of the scaled-down run." if desc.get("scale_note") else ""))
        show_md(text)


def _supported_table(sup) -> None:
    cols = ["workload", "target", "au_threshold_percent", "accelerators_supported_text", "supported_limited_by",
            "au_percent_at_supported", "max_accelerators_tested"]
    searched = "searched" in sup and bool(sup.searched.any())
    tab = sup[cols + (["search_probes"] if searched else [])].rename(columns={
        "search_probes": "N probed (in order)", "workload": "Workload", "target": "Target", "au_threshold_percent": "AU threshold %",
        "accelerators_supported_text": "Accelerators supported", "supported_limited_by": "Limited by",
        "au_percent_at_supported": "AU % at the largest passing N", "max_accelerators_tested": "Largest N tested"})
    show_table(tab, "Accelerators supported (MLPerf Storage rule): the largest accelerator count whose mean AU "
                    "stays at or above the threshold. 'Limited by' is what stopped it at the first failing count: "
                    "storage, or the client ('client-limited at N': this machine could not drive N accelerators, so the "
                    "storage earned no number there); 'none': every count tried passed, so the target may support more."
               + (" A search of the count says why it stopped: storage (the boundary found: N passes, N + 1 "
                  "fails), client, scale ('not answered at this scale': the next count's AU passed but was no "
                  "measurement — its window too short, prefetched data carried it — and more accelerators only "
                  "shorten it; a larger data set answers it), budget ('≥ N (search budget reached after T s)': time "
                  "ran out before the boundary was found, so N is a floor), cap ('≥ N': the largest count the search may try "
                  "passed) or memory ('≥ N': the most accelerators whose data fits the memory this run allows for "
                  "caching passed; more would measure the cache's thrashing, not the storage)."
                  if searched else ""),
               body=True)     # the study's answer: a key table


def _limits_table(frame) -> None:
    """What limited each accelerator count: AU vs the throttle bound, samples/s vs demand, the client's CPU."""
    if "limited_by" not in frame:
        return
    cols = {"au_percent": "AU %", "throttle_au_bound_percent": "Throttle bound AU %",
            "samples_per_s": "Samples/s", "demand_samples_per_s": "Demand samples/s",
            "client_cpu_percent_of_cores": "Client CPU % of its cores", "cpu_busy_percent": "Machine CPU busy %",
            "client_cpu_s_per_gb": "Client CPU s per GB"}
    cols = {k: v for k, v in cols.items() if k in frame}
    g = frame.groupby(["workload", "target", "accelerators"], sort=False)
    tab = g[list(cols)].mean().rename(columns=cols)
    tab["Limited by"] = g.limited_by.agg(point_cause)
    show_table(tab.reset_index().rename(columns={"workload": "Workload", "target": "Target", "accelerators": "N"}),
               f"What limited each run (means over repeats). A run's bound is 100 % AU, or on a throttled target the "
               f"throttle's bound. unmeasured: AU passed but was no measurement (prefetch carried its window). "
               f"none: AU within {MARGIN_POINTS:g} points of 100 %. Further below its bound a run "
               "always names a cause from what it recorded: client (machine ≥ 90 % busy, a core ≥ 95 %, the "
               "accelerators using ≥ 90 % of their CPUs, or the emulator's own delays — sleep overshoot, barrier "
               "release — most of the AU lost), storage (device ≥ 80 % utilised, its read latency ≥ 3 × the idle "
               "device's, reading at ≥ 90 % of the throttle's cap, or AU at a throttle bound below 100 %), both: the "
               "side that explains more of the lost time; unexplained: neither shows load. When a point's repeats "
               "name different causes the cell says 'uncertain' and counts them. Client CPU = user + system seconds "
               "of the accelerator processes and their loader threads; GB = 10⁹ bytes read by the loaders. Each "
               "run's evidence in words is runs.csv's limited_by_reason.", floatfmt="{:,.3g}")
    causes = tab["Limited by"]
    below = g.apply(lambda x: x.au_percent.mean() < x.au_threshold_percent.mean()) \
        if "au_threshold_percent" in frame else pd.Series(True, index=causes.index)     # a passing point needs no cause
    uncertain = [f"{w} on {t} at N = {n}" for (w, t, n), c in causes.items()
                 if c.startswith("uncertain") and below.get((w, t, n), True)]
    if uncertain:
        show_md(f"**Cause uncertain** at {', '.join(uncertain)}: its repeats recorded different evidence (the table "
                "counts them); read those points as limited by either.")
    client = frame[frame.limited_by == "client"]
    if len(client):
        ns = ", ".join(str(n) for n in sorted(client.accelerators.unique()))
        failed = int((client.au_percent < client.au_threshold_percent).sum())
        show_md(f"**The client took AU from {len(client)} of {len(frame)} runs** (at {plural(ns, 'accelerator')}; {failed} of "
                "them below the threshold): this machine did not keep those emulated accelerators on time, so the AU "
                "they lost is the client's, not the storage's, and a count that failed that way earned the storage no "
                "number. To measure the storage further, drive it from more client hosts, as MLPerf Storage does: "
                "`emulate.launcher: mpi` with a hostfile runs the accelerators as MPI ranks across hosts "
                "(docs/multi-host.md).")
    else:
        show_md(f"**No run was limited by the client**: its accelerators used at most "
                f"{frame.client_cpu_percent_of_cores.max():.0f} % of their CPUs and the machine was at most "
                f"{frame.cpu_busy_percent.max():.0f} % busy.")


def _mlperf_rules(rules: list[dict]) -> None:
    """emulate.mlperf_rules: every point's warm-up, its 5 scored runs and the rules' verdict."""
    if not rules:
        return
    tab = pd.DataFrame([{"Workload": r["workload"], "Target": r["target"], "N": r["accelerators"],
                         "Warm-up AU %": r["warmup_au_percent"],
                         "Scored AU % (5 runs)": ", ".join(f"{a:.1f}" for a in r["scored_au_percent"]),
                         "Mean AU %": r["scored_au_mean_percent"], "AU threshold %": r["au_threshold_percent"],
                         "Verdict": r["verdict"]} for r in rules])
    show_table(tab, "MLPerf Storage v3.0 run rules (emulate.mlperf_rules): each point ran 6 times back to back with a "
                    "new shuffle seed each; the first is the warm-up and counts nowhere, the result is the mean of the "
                    "5 scored runs; pass = every scored run at or above the AU threshold (DLIO's "
                    "train_au_meet_expectation, which the submission checker requires of each run). Every run is also "
                    "exported in MLPerf Storage's results layout under mlperf/results/.", floatfmt="{:,.3g}")


def _client_check(checked: list[dict]) -> None:
    """The client-sensitivity check: the answer's point re-run with the emulator on half its CPUs."""
    if checked:
        show_md(client_check.markdown(checked, "the emulator", "AU or samples/s"))


def _analysis(frame, sup) -> None:
    """One finding per workload and target: AU at the ends of the sweep, read rate vs demand, the throttle bound."""
    lines = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        m = g.groupby("accelerators").agg(au=("au_percent", "mean"), dev=("device_read_mb_per_s_avg", "mean")
                                          if "device_read_mb_per_s_avg" in g else ("loader_read_mb_per_s", "mean"),
                                          loader=("loader_read_mb_per_s", "mean"),
                                          bound=("throttle_au_bound_percent", "mean"),
                                          lat=("read_latency_us_mean", "mean"),
                                          over=("emulator_overhead_s", "mean"), tot=("measured_time_s", "mean"),
                                          removed=("au_percent_overhead_removed", "mean"))
        d = round(float(g.demand_mb_per_s_per_accelerator.iloc[0]), 1)   # printed as is: N × d = what it prints
        nmax = int(m.index.max())
        s = sup[(sup.workload == w) & (sup.target == t)].iloc[0]
        ends = (f"AU {m.au.iloc[0]:.1f} % at {int(m.index[0])} and {m.au.iloc[-1]:.1f} % at {nmax} accelerators"
                if len(m) > 1 else f"AU {m.au.iloc[0]:.1f} % at {nmax} accelerator{'s' if nmax != 1 else ''}")
        text = (f"- **{t}** ({w}): {ends}; loaders read {m.loader.iloc[-1]:.0f} MB/s at {nmax} against a demand of {nmax} × {d:.1f} = "
                f"{nmax * d:,.1f} MB/s; " + (
                    f"accelerators supported at ≥ {s.au_threshold_percent:.0f} % AU, searched: "
                    f"{s.accelerators_supported_text} (N probed: {s.search_probes})" if s.get("searched", False) else
                    f"supports {plural(s.accelerators_supported_text, 'accelerator')} at ≥ "
                    f"{s.au_threshold_percent:.0f} % AU (limited by: {s.supported_limited_by})"))
        if not math.isnan(m.bound.iloc[-1]):
            text += (f". The throttle allows at most {m.bound.iloc[-1]:.0f} % AU at {nmax} (min(bandwidth cap, "
                     f"IOPS cap × the run's request size in the AU window) ÷ demand); measured {m.au.iloc[-1]:.0f} %")
        text += (f". The emulator's own delays (sleep overshoot, barrier release) were "
                 f"{100 * m.over.mean() / max(m.tot.mean(), 1e-9):.2f} % of the measured time; they count in AU "
                 f"(without them AU at {nmax} would be {m.removed.iloc[-1]:.1f} %).")
        lines.append(text)
    analysis(lines, tail="When storage keeps up, AU stays near 100 % and total time "
             "falls as accelerators are added (the dataset is split among them); once N × demand exceeds what the "
             "target delivers, the loaders fall behind, the accelerators wait at the barrier for the slowest, AU drops "
             "roughly as delivered ÷ demanded, and total time stops improving.")


def _latency_histogram(study_dir: Path, palette: dict) -> None:
    """Per-read latency distribution at the largest accelerator count (latency_histograms.csv)."""
    import matplotlib.pyplot as plt

    h = read_csv_or_none(study_dir / "latency_histograms.csv")
    if h is None:
        return
    nmax = int(h.accelerators.max())
    sub = h[h.accelerators == nmax].groupby(["workload", "target", "bin_lo_us", "bin_hi_us"],
                                            as_index=False)["count"].sum()
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    for (w, t), g in sub.groupby(["workload", "target"], sort=False):
        share = g["count"] / g["count"].sum() * 100
        ax.step(g.bin_lo_us, share, where="post", label=f"{t} ({w})", color=palette.get(t))
    ax.set(xscale="log", xlabel="read latency per read call (µs, log scale)", ylabel="% of reads",
           title=f"Read latency distribution at {nmax} accelerators")
    ax.legend(fontsize=8)
    show_figure(fig, f"Histogram of per-read latencies over all repeats at {nmax} accelerators "
                     f"({LAT_BINS_PER_DECADE} log bins per decade).", detail=True)


def _latency_table(frame) -> None:
    cols = ["workload", "target", "accelerators", "read_latency_us_mean", "read_latency_us_p50", "read_latency_us_p90",
            "read_latency_us_p99", "read_latency_us_max", "device_read_latency_us", "cpu_busy_percent"]
    cols = [c for c in cols if c in frame]
    lt = frame.groupby(["workload", "target", "accelerators"], as_index=False)[cols[3:]].mean()
    names_map = {"device_read_latency_us": "device read µs (avg)", "cpu_busy_percent": "CPU busy %"}
    show_table(lt.rename(columns=lambda c: names_map.get(c, c.replace("read_latency_us_", "read µs ").replace("_", " "))),
               "Read latency per read call as the loaders saw it (µs; includes throttle queueing), the device's own "
               "average (µs; after the throttle) and CPU busy %, means over repeats.")


def trace_workloads(frame, names: list[str]) -> list[tuple[str, str]]:
    """For the block-level characterization: each workload at its most accelerators on the reference
    target, first repeat (label, run_id)."""
    out = []
    frame = measured(frame)
    ref = frame[frame.target == names[0]]
    for w, g in ref.groupby("workload", sort=False):
        top = g[g.accelerators == g.accelerators.max()].sort_values("repeat").iloc[0]
        out.append((f"Emulated {w}, {int(top.accelerators)} accelerators", top.run_id))
    return out


def _failing_cause(frame, r) -> str:
    """'cause at N uncertain (client × 1, storage × 1)' when the first failing count's runs disagree."""
    if pd.isna(r.first_failing_accelerators) or "limited_by" not in frame:
        return ""
    g = frame[(frame.workload == r.workload) & (frame.target == r.target)
              & (frame.accelerators == int(r.first_failing_accelerators))]
    cause = point_cause(g.limited_by)
    return f"cause at {int(r.first_failing_accelerators)} {cause}" if cause.startswith("uncertain") else ""


def _memory_caps(frame) -> str:
    """', or fewer where the page-cache cap holds fewer accelerators' reads (local: 10)' from the rows, or ''."""
    if "search_max_by" not in frame:
        return ""
    mem = frame[frame.search_max_by.astype(str) == "memory"]
    if mem.empty:
        return ""
    caps = mem.groupby("target", sort=False).search_max.max()
    return (", or fewer where the page-cache cap holds fewer accelerators' reads ("
            + ", ".join(f"{t}: {int(n)}" for t, n in caps.items()) + ")")


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: accelerators supported per workload and target, with what limited it. An answer equal to
    the largest count tested with every count passing is a floor: written "≥ N"."""
    full, frame = frame, measured(frame)
    sup = supported(frame)
    desc = read_json_or(Path(study_dir) / "study.json") if study_dir is not None else {}
    out = []
    for _, r in sup.iterrows():
        note = "; ".join(x for x in (_failing_cause(frame, r), answer_note(full, r.workload, r.target),
                                     brief_s3.answer_basis(desc, r.target)) if x)
        note = f"; {note}" if note else ""
        question = f"Accelerators supported, emulated ({r.workload}, AU ≥ {r.au_threshold_percent:g} %)"
        if r.get("searched", False):      # the search's own answer: "N (storage-limited)", "≥ N (…)", client-limited
            out.append({"question": question, "target": r.target, "answer": str(r.accelerators_supported_text),
                        "basis": f"search of N (probed {r.search_probes}), limited by {r.supported_limited_by}"
                                 f"{note}; emulate study"})
            continue
        n = 0 if pd.isna(r.accelerators_supported) else int(r.accelerators_supported)
        floor = n >= int(r.max_accelerators_tested) and str(r.supported_limited_by) in ("none", "", "nan")
        answer = f"≥ {int(r.max_accelerators_tested)}" if floor else str(r.accelerators_supported_text)
        basis = ("every count tested kept AU ≥ threshold: the largest tested is a floor" if floor
                 else f"limited by {r.supported_limited_by}")
        out.append({"question": question, "target": r.target, "answer": answer, "basis": f"{basis}{note}; emulate study"})
    return out + brief_s3.failed_answers(full, list(dict.fromkeys(full.workload)))
