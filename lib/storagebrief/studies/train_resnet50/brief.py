"""The train_resnet50 section of the brief: the Samsung SDC 2023 study's disk-profile and parallel-model tables, figures, analysis."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...kit import disk_metrics
from ...kit.disk_metrics import cell
from ...kit.files import read_csv_or_none
from ...kit.history import earlier
from ...kit.runs import ok_runs
from ...report.display import analysis, show_figure, show_md, show_table, style
from ...report.words import plural, spread, spread_cell
from .metrics import memory_effect
from .params import MIB, parse_memory


def _mib(v) -> float:
    return v / MIB if v == v and v is not None else float("nan")


def profile_table(frame, target: str):
    """The Samsung SDC 2023 study's 'baseline vs limited memory' disk-profile table for one target."""
    import pandas as pd

    ok = ok_runs(frame)
    mem = ok[(ok.sweep == "memory") & (ok.target == target)]
    if mem.empty:
        return pd.DataFrame()
    order = sorted(mem.memory_setting.unique(), key=lambda s: (parse_memory(s).limited, s))
    g = mem.groupby("memory_setting").mean(numeric_only=True)

    def limit_text(r) -> str:
        if r.name == "none":
            return "none"
        if parse_memory(r.name).kind == "ratio":
            return f"page cache ≤ {_mib(r.page_cache_cap_bytes):,.0f} MiB"
        return f"{_mib(r.memory_limit_bytes):,.0f} MiB (whole job)"

    rows = [("Memory limit", limit_text),
            ("Dataset in page cache, mean MiB", lambda r: _mib(r.get("page_cache_mean_bytes", np.nan))),
            ("Avg. IOPS (device, read)", lambda r: cell(r, "device_read_iops_avg")),
            ("Avg. IOPS, active intervals", lambda r: cell(r, "device_read_iops_active")),
            ("Avg. throughput MiB/s", lambda r: cell(r, "device_read_mib_per_s_avg")),
            ("Avg. throughput MiB/s, active", lambda r: cell(r, "device_read_mib_per_s_active")),
            ("Avg. block size KiB", lambda r: cell(r, "device_avg_read_kib")),
            ("Avg. response time µs", lambda r: cell(r, "device_read_latency_us")),
            ("Device utilization %", lambda r: cell(r, "device_util_percent_avg")),
            ("Job reads MiB (all epochs)", lambda r: _mib(r.job_read_bytes)),
            ("Re-read ratio, epochs ≥ 2", lambda r: r.reread_ratio),
            ("Training time s", lambda r: r.training_time_s),
            ("Images/s", lambda r: r.images_per_s),
            ("CPU user / sys / iowait %", disk_metrics.cpu_text),
            ("Peak memory MiB", lambda r: _mib(r.memory_peak_bytes)),
            ("Failcnt / OOM kills", lambda r: f"{r.memory_failcnt:.0f} / {r.oom_kills:.0f}")]
    return disk_metrics.table(g.loc[order], rows, "Metric",
                              lambda s: "baseline (none)" if s == "none" else f"limited {s}")


def parallel_table(frame, target: str, memory: str):
    """The Samsung SDC 2023 study's 'parallel models' table: aggregate profile per K."""
    import pandas as pd

    ok = ok_runs(frame)
    sel = ok[(ok.target == target) & (ok.memory_setting == memory) & (ok.sweep.isin(["memory", "parallel"]))]
    if sel.models.nunique() < 2:
        return pd.DataFrame()
    g = sel.groupby("models").mean(numeric_only=True)
    rows = {"Parallel models": [int(k) for k in g.index],
            "CPUs per job": g.cpus_per_job.astype(int).tolist(),
            "Batch size": g.batch_size.astype(int).tolist(),
            "Disk IOPS": g.get("device_read_iops_avg", pd.Series(np.nan, g.index)).tolist(),
            "Throughput MiB/s": g.get("device_read_mib_per_s_avg", pd.Series(np.nan, g.index)).tolist(),
            "Block KiB": g.get("device_avg_read_kib", pd.Series(np.nan, g.index)).round().tolist(),
            "Response time µs": g.get("device_read_latency_us", pd.Series(np.nan, g.index)).round().tolist(),
            "Images/s (all jobs)": g.images_per_s.tolist(),
            "Images/s per job": g.images_per_s_per_job.tolist(),
            "Training time s": g.training_time_s.tolist(),
            "CPU busy %": g.get("cpu_busy_percent", pd.Series(np.nan, g.index)).tolist()}
    return pd.DataFrame(rows)


def _series(study_dir: Path, run_id: str):
    return read_csv_or_none(study_dir / "timeseries" / f"{run_id}.csv")


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    study_dir = Path(study_dir)
    ok = ok_runs(frame)
    _what_ran(ok)
    _profile_tables(frame, names)
    _memory_analysis(frame, names)
    _memory_figure(study_dir, ok)
    _parallel(study_dir, frame, ok, names)
    _ingest_and_checkpoint(ok, names)
    _training_check(ok)
    _failed_runs(frame)


def _batches(r0) -> str:
    """How a batch was made, when the row says (rows from before the column: nothing)."""
    if str(r0.get("batches", "")) != "class-balanced":
        return ""
    return f" (class-balanced: {int(r0.batch_size) // int(r0.num_classes)} records of each class)"


def _what_ran(ok) -> None:
    if ok.empty:
        show_md("No training run succeeded; the failed runs and their reasons are listed below.")
        return
    r0 = ok.iloc[0]
    show_md(
        f"**What ran.** `tf.keras.applications.ResNet50(weights=None)` trained from TFRecords "
        f"({int(r0.dataset_records)} records, {r0.dataset_bytes / 1e6:.1f} MB, source: {r0.dataset_source}) at "
        f"{int(r0.input_size)}×{int(r0.input_size)} input, batch {int(r0.batch_size)}{_batches(r0)}, "
        f"{plural(int(r0.epochs), 'epoch')} on {r0.tf_device}, through a `tf.data` pipeline (parallel interleaved reads, parse, "
        "decode, random crop + flip, batch, prefetch, AUTOTUNE). Every job ran in its own memory cgroup. A dataset:memory "
        "ratio caps the dataset's page cache at dataset × memory/dataset: every 50 ms the dataset pages "
        "over it are evicted, least recently read first. TensorFlow's own memory "
        "(1–2 GB here) is not capped, since a bare 2.5:1 of a small dataset would be far below it. An absolute size "
        "limits the whole job, as `docker run -m` does. The cache was made cold "
        "before every measured phase; device counters were sampled during training. Disk figures are device-"
        "wide; *job reads* are the bytes each training process caused to be read from storage.")


def _profile_tables(frame, names: list[str]) -> None:
    for n in names:
        t = profile_table(frame, n)
        if t.empty:
            continue
        show_table(t, f"{n}: disk profile of one model, baseline vs limited memory (means over repeats; "
                      "'active' averages discard intervals without reads, as the Samsung SDC 2023 study's tables do; a ratio run's "
                      "failcnt counts charges that met the job's memory limit).")


def _memory_analysis(frame, names: list[str]) -> None:
    lines = []
    over = (" Over 100 % means read amplification: with so little page cache, pages the kernel read ahead were "
            "evicted before the pipeline consumed them and were read again.")
    for n in names:
        eff = memory_effect(frame, n)
        if eff is None:
            continue
        ratio = "from zero" if math.isinf(eff["read_ratio"]) else f"×{eff['read_ratio']:.1f}"
        verb = "raised" if math.isinf(eff["read_ratio"]) or eff["read_ratio"] >= 1 else "changed"
        caveat = (f" Caution: another process dropped the page cache {plural(eff['foreign_cache_drops'], 'time')} during "
                  "these runs, which forces re-reads in any run." if eff["foreign_cache_drops"] else "")
        lines.append(f"- **{n}**: limiting memory ({eff['setting']}) {verb} the job's device reads {ratio} while "
                     f"training time changed by {eff['time_change_percent']:+.1f} %; after the first epoch "
                     f"{eff['limited_reread'] * 100:.0f} % of the bytes the pipeline consumed came from the device "
                     f"(baseline {eff['base_reread'] * 100:.0f} %).{over if eff['limited_reread'] > 1.02 else ''}"
                     f"{caveat}")
    if lines:
        analysis(lines, tail="ResNet50 on this CPU is compute-bound, so extra reads cost little time unless the "
                             "device is slow: the same finding as the Samsung SDC 2023 study (×48 throughput, training time nearly "
                             "unchanged on fast storage).")


def _memory_figure(study_dir: Path, ok) -> None:
    """Time series of the memory sweep: device reads and the dataset's bytes in the page cache."""
    import matplotlib.pyplot as plt

    mem = ok[ok.sweep == "memory"]
    if mem.empty:
        return
    fig, axes = plt.subplots(1, 3, figsize=(11.5, 3.4))
    for _, r in mem.drop_duplicates(["target", "memory_setting"]).iterrows():
        s = _series(study_dir, r.run_id)
        label = f"{r.target}, {r.memory_setting}"
        if s is not None and not s.empty:
            axes[0].plot(s.t_s, s.read_mb_per_s * 1e6 / MIB, label=label)
            axes[1].plot(s.t_s, s.read_iops, label=label)
        m = _series(study_dir, f"{r.run_id}-memory")
        if m is not None and not m.empty:
            m = m[m.job == 0]
            axes[2].plot(m.t_s, m.page_cache_bytes / MIB, label=label)
    axes[0].set(xlabel="seconds", ylabel="read MiB/s", title="Device read throughput")
    axes[1].set(xlabel="seconds", ylabel="read IOPS", title="Device read IOPS")
    axes[2].set(xlabel="seconds", ylabel="MiB", title="Dataset in the page cache")
    axes[0].legend(fontsize=7)
    show_figure(fig, "One model training (first repeat): device reads and the dataset's bytes in the page "
                     "cache (mincore, every 0.25 s). Reads after the first epoch are page-cache misses; the re-read "
                     "ratios are in the table above.")


def _parallel(study_dir: Path, frame, ok, names: list[str]) -> None:
    """Parallel models: the aggregate table per target, then each job of those runs."""
    import pandas as pd

    par = ok[ok.sweep == "parallel"]
    if par.empty:
        return
    memory = par.memory_setting.iloc[0]
    for n in names:
        t = parallel_table(frame, n, memory)
        if not t.empty:
            show_table(t, f"{n}: parallel models, each in its own cgroup with memory {memory} and an equal "
                          "share of the cores (device counters aggregate all jobs).")
    jobs_f = study_dir / "jobs.csv"
    if not jobs_f.exists():
        return
    jobs = pd.read_csv(jobs_f)
    jobs = jobs[jobs.run_id.isin(par.run_id)]
    if jobs.empty:
        return
    j = jobs[["target", "run_id", "job", "cpus", "images_per_s", "training_time_s", "job_read_bytes",
              "memory_peak_bytes"]].copy()
    j["job_read_bytes"] /= MIB
    j["memory_peak_bytes"] /= MIB
    j["run_id"] = j.run_id.str.extract(r"-k(\d+)-")[0].astype(int)
    j.columns = ["Target", "Models", "Job", "CPUs", "Images/s", "Time s", "Job reads MiB", "Peak MiB"]
    show_table(j, "Per-job profile of the parallel runs.")


def _scenario_row(n: str, scenario: str, s, b, ingest_mb_per_s) -> dict:
    """One ingest or checkpoint scenario against the target's baseline run."""
    return {"Target": n, "Scenario": scenario, "Training time s": s.training_time_s,
            "Δ time vs baseline %": (s.training_time_s / b.training_time_s - 1) * 100,
            "CPU iowait %": s.get("cpu_iowait_percent", np.nan),
            "Baseline iowait %": b.get("cpu_iowait_percent", np.nan),
            "Device write MiB/s": s.get("device_write_mib_per_s_avg", np.nan),
            "Achieved ingest MB/s": ingest_mb_per_s}


def _ingest_and_checkpoint(ok, names: list[str]) -> None:
    import pandas as pd

    extra = []
    for n in names:
        base = ok[(ok.target == n) & (ok.sweep == "memory") & (ok.memory_setting == "none")]
        if base.empty:
            continue
        b = base.mean(numeric_only=True)
        ing = ok[(ok.target == n) & (ok.sweep == "ingest")]
        if not ing.empty:
            i = ing.mean(numeric_only=True)
            extra.append(_scenario_row(n, f"ingest {i.ingest_target_mb_per_s:g} MB/s while training", i, b,
                                       i.ingest_mb_per_s))
        ck = ok[(ok.target == n) & (ok.sweep == "checkpoint")]
        if not ck.empty:
            c = ck.mean(numeric_only=True)
            extra.append(_scenario_row(n, f"checkpoint every {int(c.checkpoint_every_steps)} steps "
                                          f"({c.checkpoints:.0f} × {c.checkpoint_mb:.0f} MB, "
                                          f"{c.checkpoint_s_mean:.2f} s each)", c, b, np.nan))
    if extra:
        show_table(pd.DataFrame(extra), "Ingest while training and frequent checkpoints, each against the "
                                        "baseline run of the same target (one model, no memory limit; its "
                                        "checkpoint interval is the long default).")


def _training_check(ok) -> None:
    """Did training happen: in how many runs the loss fell, as measured (a few steps may not lower it)."""
    if ok.empty:
        return
    fell = ok.loss_last_epoch < ok.loss_first_epoch
    carried = ok.job_reused_from.fillna("").astype(str).ne("")
    parts = [f"The loss fell from the first to the last epoch in {int(fell[~carried].sum())} of "
             f"{int((~carried).sum())} runs that started a fresh model"]
    if carried.any():
        parts.append(f"in {int(fell[carried].sum())} of {int(carried.sum())} that carried on a model from an "
                     "earlier run (kept jobs: they start near convergence, where a few steps move it either way)")
    spikes = ""
    if "loss_max_step_last_epoch" in ok and ok.loss_max_step_last_epoch.notna().any():
        # one batch's loss above chance's (ln classes) in a carried, converged model is a broken step
        bound = math.log(int(ok.num_classes.iloc[0]))
        # a fresh model starts at chance, so its steps near ln(classes) are no fault: carried runs are judged
        worst = ok.loss_max_step_last_epoch[carried] if carried.any() else ok.loss_max_step_last_epoch
        whose = "carried" if carried.any() else ""
        spikes = (f" The largest single-step loss of a {whose + ' ' if whose else ''}run's last epoch was "
                  f"{worst.max():.3f}; {int((worst > bound).sum())} of {int(worst.notna().sum())} "
                  f"{whose + ' ' if whose else ''}runs had a step above ln(classes) = {bound:.3f}.")
    show_md(f"**Training check.** {'; '.join(parts)}. Last-epoch accuracy {ok.accuracy_last_epoch.mean():.2f} "
            f"mean (chance {1 / ok.num_classes.iloc[0]:.2f}) on class-dependent synthetic images.{spikes}")


def _failed_runs(frame) -> None:
    bad = frame.drop(ok_runs(frame).index)
    if not bad.empty:
        show_table(bad[["target", "sweep", "models", "memory_setting", "failure_reason"]],
                   "Failed runs (not included above).")


def trace_workloads(frame, names: list[str]) -> list[tuple[str, str]]:
    """For the block-level characterization: one run per scenario on the reference target, first
    repeat (label, run_id): baseline, each memory limit, K models in parallel, ingest, checkpoint."""
    out = []
    ok = ok_runs(frame)
    ref = ok[ok.target == names[0]].sort_values("repeat")
    for _, r in ref.drop_duplicates("run_id").iterrows():
        mem = str(r.get("memory_setting", "") or "")
        unlimited = mem in ("", "none", "nan")
        if r.sweep == "memory":
            label = "ResNet50 baseline" if unlimited else f"ResNet50 limited memory ({mem})"
        elif r.sweep == "parallel":
            label = f"ResNet50, {int(r.models)} models in parallel" + ("" if unlimited else f" ({mem})")
        elif r.sweep == "ingest":
            label = f"ResNet50 + ingest {r.ingest_target_mb_per_s:g} MB/s"
        elif r.sweep == "checkpoint":
            label = f"ResNet50, checkpoint every {int(r.checkpoint_every_steps)} steps"
        else:
            label = f"ResNet50 {r.sweep}"
        if label not in {lab for lab, _ in out}:
            out.append((label, r.run_id))
    return out


# The brief's optional parts this study does not have (core/contract.py BriefRoom).
MEASURE = "one job's images/s with no memory limit"     # kit/history: earlier studies' runs of this answer


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: per target, one training job's images/s with no memory limit, and what the most limited memory
    did to the job's reads and its time (metrics.memory_effect, as the chapter's analysis says it)."""
    ok = ok_runs(frame)
    mem = ok[ok.sweep == "memory"] if "sweep" in ok else ok
    out = []
    for t in names:
        base = mem[(mem.target == t) & (mem.memory_setting == "none")]
        if base.empty:
            continue
        rate = base.images_per_s.mean()
        eff = memory_effect(frame, t)
        before = earlier(study_dir, MEASURE, t)
        answer = f"{rate:,.1f} images/s with no memory limit ({spread(base.images_per_s, earlier=before)})"
        short = f"{rate:,.1f} images/s ({spread_cell(base.images_per_s, earlier=before)})"
        note = ""
        if eff and not math.isinf(eff["read_ratio"]):
            answer += (f"; memory limited to {eff['setting']} made the job read ×{eff['read_ratio']:.1f} as much and "
                       f"changed its time by {eff['time_change_percent']:+.1f} %")
            short += f" · limited memory: reads ×{eff['read_ratio']:.1f}"
            note = f"memory limit {eff['setting']}: the dataset-to-memory ratio of the most limited run"
        out.append({"question": "ResNet50 training: one job's images/s, and its reads with memory limited",
                    "target": t, "answer": answer, "short": short, "note": note,
                    "measures": {MEASURE: list(base.images_per_s)},
                    "basis": f"means over repeats of the memory sweep; {len(base)} baseline run(s); ResNet50 study"})
    return out
