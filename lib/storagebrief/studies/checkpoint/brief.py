"""The checkpoint section of the brief: MLPerf-style vs honest save / restore GiB/s per target and
model, per-checkpoint durations with rank skew, the scale and DLIO's size table; what a checkpoint
costs training (overhead vs interval, sync vs async; stall per checkpoint) and the intervals table
(the shortest interval within the overhead limit per llama3 model, and its restore time); TensorFlow's
own checkpoints in the Samsung SDC 2023 study's BERT rows (framework_brief); limits."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ...kit import client_check, mlpstorage_verdict
from ...kit.client_check import unchecked
from ...kit.figures import metric_vs
from ...kit.files import read_csv_or_none, read_json_or
from ...kit.history import earlier
from ...kit.runs import failed_runs, ok_runs, what_failed
from ...report.display import analysis, show_figure, show_md, show_table, style
from ...report.formatting import significant
from ...report.words import spread, spread_cell
from . import framework_brief, metrics


# Files beside runs.csv the section reads, and what is left out without each.
SIDE_FILES = {"study.json": "the settings, checkpoint sizes and the intervals table",
              "checkpoints.csv": "the per-checkpoint table", "ranks.csv": "per-rank times",
              "latency.csv": "the latency histograms", "cost_checkpoints.csv": "the cost sweep's per-checkpoint records"}


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    study = read_json_or(Path(study_dir) / "study.json") or {}
    _what_failed(frame, Path(study_dir))
    ok = ok_runs(unchecked(frame))          # the client check's re-runs count in no figure (their own paragraph)
    cost = ok[ok.sweep == "cost"] if "sweep" in ok else ok.iloc[0:0]
    ok = ok[~ok.sweep.isin(["cost", "framework"])] if "sweep" in ok else ok
    _what_ran(ok, study)
    if verdict := mlpstorage_verdict.paragraph(study_dir, "checkpointing"):    # MLPerf's code on the runs
        show_md(verdict)
    study["client_checks"] = _checks(study_dir, frame)
    _versus(ok, names, study)
    _client_check(study)
    _directory_vs_s3(ok, study)
    _per_checkpoint(_scored(read_csv_or_none(Path(study_dir) / "checkpoints.csv")), names)
    _latency(ok, _scored(read_csv_or_none(Path(study_dir) / "latency.csv")))
    _cost(cost, names, study, _failed(frame, "cost"))
    _intervals(study)
    framework_brief.section(study_dir, frame, names, study)
    _sizes(study)
    _limits(study)


def _checks(study_dir, frame) -> list[dict]:
    """The client check's verdicts from runs.csv and checkpoints.csv (study.json keeps the study's own copy)."""
    return metrics.client_checks(frame, read_csv_or_none(Path(study_dir) / "checkpoints.csv"))


def _scored(table):
    return table if table is None else unchecked(table)


def _client_check(study: dict) -> None:
    """The client-sensitivity check: the headline model's protocol re-run with the ranks on half the CPUs."""
    checked = study.get("client_checks") or []
    if checked:
        show_md(client_check.markdown(checked, "the ranks", "measured save or restore GiB/s")
                + "\n\nThe repeats here are the point's own checkpoints: every save and restore of its runs on all "
                  "CPUs against every save and restore of the confined runs.")


def _model_note(study: dict, target: str, model: str) -> str:
    return check_note(study, target) if any(c["target"] == target and c["model"] == model
                                            for c in study.get("client_checks") or []) else ""


def check_note(study: dict, target: str) -> str:
    """What sits next to a target's checkpoint headline: the client check's verdict there, or ''."""
    for c in study.get("client_checks") or []:
        if c["target"] == target:
            return client_check.short_note(c, f" ({c['model']})")
    return ""


def _failed(frame, sweep: str | None = None) -> pd.DataFrame:
    bad = failed_runs(frame)
    return bad[bad.sweep == sweep] if sweep is not None and "sweep" in bad else bad


def _what_failed(frame, study_dir: Path) -> None:
    """Failed runs (how many of how many, and why) and missing side files, before any table."""
    for text in what_failed(frame, study_dir, SIDE_FILES):
        show_md(text)


def _what_ran(ok, study: dict) -> None:
    scale = study.get("scale", ok.scale.iloc[0] if len(ok) else 1)
    sizes = ", ".join(f"{m} {b / 2**20:,.1f} MiB ({study.get('writers', {}).get(m, '?')} ranks)"
                      for m, b in study.get("checkpoint_bytes", {}).items())
    show_md(
        f"**What ran.** MLPerf Storage v3.0's checkpointing protocol (DLIO): {study.get('saves', '?')} checkpoint "
        f"writes, then {study.get('restores', '?')} restores, a pause of {study.get('pause_s', '?')} s before each "
        "(off the clock), caches dropped before every restore. One "
        + ("MPI rank (mpirun)" if study.get("launcher") == "mpi" else "process on this host")
        + " per writing rank writes "
        f"its share of each checkpoint (DLIO's files) in {study.get('write_block_mib', '?')} MiB writes of incompressible "
        f"bytes and fsyncs each; restores read in {study.get('read_block_mib', '?')} MiB reads with "
        f"{study.get('readers_per_rank', '?')} threads per rank. **Scale: every file ÷ {scale:g}** "
        f"(checkpoint: {sizes}); the paper-scale run writes them at full size. GiB = 2³⁰ bytes (MLPerf writes \"GB\").")


def versus_table(ok) -> pd.DataFrame:
    g = ok.groupby(["target", "model"])
    return pd.DataFrame({
        "save MLPerf GiB/s": g.mlperf_save_gib_per_s.mean(), "save measured GiB/s": g.honest_save_gib_per_s.mean(),
        "save ×": g.save_overstatement_ratio.mean(),
        "restore MLPerf GiB/s": g.mlperf_load_gib_per_s.mean(), "restore measured GiB/s": g.honest_load_gib_per_s.mean(),
        "restore ×": g.load_overstatement_ratio.mean(),
        "save skew s": g.save_rank_skew_s_mean.mean()}).reset_index()


def _versus(ok, names: list[str], study: dict | None = None) -> None:
    import matplotlib.pyplot as plt

    if ok.empty:
        show_md("No protocol run measured (see what failed above).")
        return
    t = versus_table(ok)
    show_table(t, "MLPerf's accounting (bytes ÷ rank 0's own duration, mean of per-checkpoint rates) beside the rate "
                  "measured over the whole save or restore (bytes ÷ time until the last rank's fsync returned, from a "
                  "barrier); × = MLPerf ÷ measured.",
               floatfmt="{:,.3f}")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = [f"{a}\n{b}" for a, b in zip(t.target, t.model)]
    x = range(len(t))
    for i, (col, name) in enumerate((("save MLPerf GiB/s", "save, MLPerf-style"), ("save measured GiB/s", "save, measured"),
                                     ("restore MLPerf GiB/s", "restore, MLPerf-style"),
                                     ("restore measured GiB/s", "restore, measured"))):
        ax.bar([k + (i - 1.5) * 0.2 for k in x], t[col], width=0.2, label=name)
    ax.set_xticks(list(x), labels)
    ax.set(ylabel="GiB/s", title="Checkpoint throughput: MLPerf's accounting vs measured")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    show_figure(fig, "Save and restore GiB/s per target and model, MLPerf's way and ours (means over repeats).")
    lines = [f"- **{r.target}**, {r.model}: MLPerf's accounting gives ×{r['save ×']:.2f} the save rate measured "
             f"to the last rank's fsync "
             f"({r['save MLPerf GiB/s']:.3f} vs {r['save measured GiB/s']:.3f} GiB/s), restore ×{r['restore ×']:.2f}; "
             f"ranks finished saves {r['save skew s']:.3f} s apart on average"
             + "".join(f"; {n}" for n in [_model_note(study or {}, r.target, r.model)] if n) + "."
             for _, r in t.iterrows()]
    analysis(lines + ["- Where rank 0 is not the last rank to finish, a figure that stops on its clock counts bytes "
                      "other ranks are still writing (× > 1); the measured figure waits for every rank's fsync."])


def _directory_vs_s3(ok, study: dict) -> None:
    """Honest save / restore GiB/s of a directory and a local-gateway S3 target on one device and profile."""
    targets = study.get("targets") or {}
    s3 = [n for n, t in targets.items() if t.get("kind") == "s3"]
    if not s3 or ok.empty:
        return
    rows = []
    for d, o in study.get("same_device_pairs") or []:
        for m in sorted(set(ok.model)):
            a, b = ok[(ok.target == d) & (ok.model == m)], ok[(ok.target == o) & (ok.model == m)]
            if a.empty or b.empty:
                continue
            rows.append({"model": m, "directory": d, "S3": o,
                         "save dir GiB/s": a.honest_save_gib_per_s.mean(), "save S3 GiB/s": b.honest_save_gib_per_s.mean(),
                         "save S3 ÷ dir": b.honest_save_gib_per_s.mean() / a.honest_save_gib_per_s.mean(),
                         "restore dir GiB/s": a.honest_load_gib_per_s.mean(),
                         "restore S3 GiB/s": b.honest_load_gib_per_s.mean(),
                         "restore S3 ÷ dir": b.honest_load_gib_per_s.mean() / a.honest_load_gib_per_s.mean(),
                         "S3 client CPU s/GB save / restore": f"{b.save_client_cpu_s_per_gb.mean():,.1f} / "
                                                              f"{b.load_client_cpu_s_per_gb.mean():,.1f}",
                         "gateway CPU s/GB save / restore": f"{b.save_gateway_cpu_s_per_gb.mean():,.1f} / "
                                                            f"{b.load_gateway_cpu_s_per_gb.mean():,.1f}",
                         "S3 limited by": "; ".join(sorted({str(x) for x in (*b.save_limited_by, *b.load_limited_by)
                                                            if isinstance(x, str) and x})) or "no CPU limit seen"})
    if rows:
        show_table(pd.DataFrame(rows), "Directory vs S3 on the same device: measured save and restore GiB/s of the same "
                                       "checkpoints, files on a directory target and objects through the local S3 "
                                       "gateway over a folder of the same disk and profile (means over repeats).",
                   floatfmt="{:,.3f}")
    analysis([
        "- On an S3 target each rank's file is one object: a multipart upload of parts of the write size, read back "
        "by ranged GETs of the read size, as many in flight as a rank has readers, every byte sent and received by "
        "the rank's compiled client (Go with minio-go), which hands the rank counts and times, never the bytes, so a "
        "low ratio is the object path's and the gateway's cost, not a Python HTTP client's; MLPerf's and the measured "
        "figures are computed as for files. A save ends when the store acknowledged the completed upload: the local gateway "
        "(versitygw) does not fsync, while the directory rows wait for every fsync, so the S3 save figure is, if "
        "anything, favourable to S3.",
        "- 'Limited by' says when the ranks' (client) CPU, the gateway's, or a machine busy with other work limited "
        "a figure rather than the device: then the ratio is the object path's CPU cost on this host.",
        f"- The cost and framework sweeps measure directories only: {', '.join(s3)} ran the save / restore protocol "
        "alone; the S3 intervals below use the S3 target's own save and restore rates and this host's measured "
        "snapshot (memory copy) rate."], title="Reading directory vs S3")


def _per_checkpoint(ckpts, names: list[str]) -> None:
    if ckpts is None or ckpts.empty:
        return
    t = (ckpts.groupby(["target", "model", "op", "index"])[["rank0_s", "max_rank_s", "rank_skew_s"]].mean()
         .reset_index().rename(columns={"index": "checkpoint", "rank0_s": "rank 0 s", "max_rank_s": "last rank s",
                                        "rank_skew_s": "skew s"}))
    t["op"] = t.op.map({"save": "save", "load": "restore"})
    t = t.sort_values(["target", "model", "op"], key=lambda c: c.map({"save": 0, "restore": 1}) if c.name == "op" else c,
                      kind="stable")
    show_table(t, "Per checkpoint (means over repeats): rank 0's own duration, the last rank's end from the "
                  "barrier, and the rank skew (last rank's end − first rank's end).", floatfmt="{:,.3f}")


LATENCY_CALLS = (("write", "write()"), ("fsync", "fsync"), ("read", "read"))


def latency_table(ok) -> pd.DataFrame:
    cols = [f"{c}_latency_us_{k}" for c, _ in LATENCY_CALLS for k in ("p50", "p99")]
    if ok.empty or not set(cols) <= set(ok.columns):
        return pd.DataFrame()
    t = ok.groupby(["target", "model"])[cols].mean().reset_index()
    return t.rename(columns={f"{c}_latency_us_{k}": f"{word} {k} µs" for c, word in LATENCY_CALLS
                             for k in ("p50", "p99")})


def _latency(ok, hist) -> None:
    import matplotlib.pyplot as plt

    t = latency_table(ok)
    if t.empty:
        return
    show_table(t, "Per-call latency of the ranks' write() calls and fsyncs (saves) and reads (restores): p50 and p99 "
                  "of every call of the run, from per-rank log2 histograms (latency.csv; interpolated inside a ×2 "
                  "bin), means over repeats.", floatfmt="{:,.0f}")
    if hist is None or hist.empty:
        return
    fig, axes = plt.subplots(1, len(LATENCY_CALLS), figsize=(10, 3), sharey=True)
    for ax, (call, word) in zip(axes, LATENCY_CALLS):
        for (target, model), g in hist[hist.call == call].groupby(["target", "model"]):
            per_bin = g.groupby("bin_low_us")["count"].sum()
            ax.step([max(0.5, x) for x in per_bin.index], per_bin / per_bin.sum() * 100, where="post",
                    label=f"{target}, {model}")
        ax.set(xscale="log", title=word, xlabel="latency µs (bin's low edge)")
    axes[0].set_ylabel("% of calls")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    show_figure(fig, "Where the calls' latencies fall (share of each call kind per log2 bin, all repeats).",
                detail=True)


def _cost(cost, names: list[str], study: dict, failed) -> None:
    import matplotlib.pyplot as plt

    c = study.get("cost") or {}
    if cost.empty:
        off = bool(c) and not (c.get("modes") and c.get("intervals_steps"))
        show_md("**What a checkpoint costs training**: " + (
            f"every cost run failed ({len(failed)}; see what failed above)." if len(failed) else
            "the cost sweep did not run (checkpoint.cost off)." if off else
            "no cost run in runs.csv" + ("" if c else " (study.json, which says whether the sweep was on, is "
                                                       "missing)") + "."))
        return
    size = study.get("cost_checkpoint_bytes") or cost.checkpoint_bytes.iloc[0]
    show_md(
        f"**What a checkpoint costs training.** An emulated training loop of {c.get('steps', '?')} steps of "
        f"{c.get('compute_s', '?')} s emulated accelerator compute (a sleep: the only stand-in for work) "
        f"checkpoints {c.get('model', '?')}'s state at this scale ({size / 2**20:,.1f} MiB in {c.get('files', '?')} "
        "fsync'ed files) every k steps: *sync* stops training until the files are durable; *async* stops only for "
        f"an in-memory snapshot ({c.get('staging', '?')} staging) and writes it in a background thread. Overhead = "
        "(training time − the same target's no-checkpoint baseline) ÷ baseline × 100.")
    on = cost[cost["save_mode"] != "none"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, mode in zip(axes, ("sync", "async")):
        metric_vs(ax, on[on["save_mode"] == mode], "interval_steps", "overhead_percent", names,
                  legend=mode == "async")
        ax.set(title=mode, xlabel="checkpoint every k steps", ylabel="training overhead %")
        ax.axhline(c.get("overhead_limit_percent", 5), color="grey", lw=0.8, ls="--")
    show_figure(fig, "Training time lost to checkpoints against the interval, per target (mean ± sd over "
                     "repeats); dashed: the overhead limit.")
    t = (on.groupby(["target", "save_mode", "interval_steps"])
         [["overhead_percent", "stall_s_per_checkpoint", "persist_s_mean", "snapshot_s_mean", "write_gib_per_s"]]
         .mean().reset_index())
    t["interval_steps"] = t.interval_steps.astype(int)
    for col in ("overhead_percent", "stall_s_per_checkpoint", "persist_s_mean", "snapshot_s_mean", "write_gib_per_s"):
        t[col] = [significant(v) if v == v else "–" for v in t[col]]        # 3 significant digits, not 94.6000
    show_table(t.rename(columns={"save_mode": "checkpointing", "interval_steps": "every k steps",
                                 "overhead_percent": "overhead %",
                                 "stall_s_per_checkpoint": "stall s / checkpoint", "persist_s_mean": "write+fsync s",
                                 "snapshot_s_mean": "snapshot s", "write_gib_per_s": "write GiB/s"}),
               "Stall per checkpoint (training stopped) beside the write + fsync time it hides or not (means over "
               "repeats).")


def _duration(s) -> str:
    if s is None or s != s:
        return "—"
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:,.1f} {unit}"
    return f"{s:,.1f} s"


def _intervals(study: dict) -> None:
    rows = study.get("intervals") or []
    if not rows:
        return
    t = pd.DataFrame(rows)
    limit = t.overhead_limit_percent.iloc[0]
    show_table(pd.DataFrame({"model": t.model, "ranks": t.ranks, "target": t.target,
                             "checkpoint GiB": t.checkpoint_gib.round(1),
                             "sync interval": t.sync_interval_s.map(_duration),
                             "async interval": t.async_interval_s.map(_duration),
                             "restore": t.restore_s.map(_duration)}),
               f"The shortest checkpoint interval, in training time, keeping the overhead ≤ {limit:g} %, and the "
               "restore time, per llama3 model at full size (kit.checkpoint_cost's model on the measured rates).")
    analysis([
        "- **This extrapolates one host's measured rate to the whole job's checkpoint**: every rank of the "
        "model's closed-division job writing its share to this one target at the save rate measured here "
        "(all ranks' bytes ÷ the time until the last rank's fsync), and restoring at the measured restore rate. It "
        "is the upper bound for a single shared target; a storage system serving many clients in parallel "
        "scales beyond it.",
        "- Sync: interval = write time ÷ limit. Async: the snapshot (every rank copying its own share at once at "
        "the one-process copy rate measured in the cost sweep) ÷ limit, and never shorter than the write itself "
        "(the writer must finish before the next checkpoint)."], title="Reading the intervals")


def _sizes(study: dict) -> None:
    rows = study.get("size_table") or []
    if not rows:
        return
    t = pd.DataFrame(rows)[["model", "computed_gib", "published_gib"]]
    t["computed ÷ published"] = t.computed_gib / t.published_gib
    show_table(t.rename(columns={"computed_gib": "computed GiB", "published_gib": "published GiB"}),
               "Checkpoint sizes at scale 1: DLIO's formula (core.checkpoint_workloads) vs MLPerf Storage "
               "rules' Table 2 (1t: the rules print 18 TB, the formula gives ≈15,427 GiB).")


def _limits(study: dict) -> None:
    analysis([
        "- One host: every rank is a process here; MLPerf runs ranks on many clients, where skew also "
        "comes from the network.",
        f"- Quick scale: files ÷ {study.get('scale', '?')}; small files finish inside write-back and device "
        "caches in ways a full-size checkpoint would not.",
        "- Writes go through the page cache; fsync makes them durable before a rank's clock stops, but "
        "the writes themselves are page-cache speed until write-back throttles them.",
        "- Restores read the checkpoints just written (cycling over the retained ones), each after caches "
        "were dropped."], title="Limits")


def trace_workloads(frame, names: list[str]) -> list[tuple[str, str]]:
    """For the block-level characterization: on the reference target, first repeat, the first protocol run
    and every framework scenario (the Samsung SDC 2023 study's BERT rows)."""
    ok = ok_runs(unchecked(frame))
    if "sweep" not in ok:
        return []
    ref = ok[ok.target == names[0]].sort_values("repeat") if names else ok.iloc[0:0]
    out = [(f"Checkpoint protocol {r.model}", r.run_id) for _, r in ref[ref.sweep == "protocol"].head(1).iterrows()]
    fw = ref[ref.sweep == "framework"] if "framework_scenario" in ref else ref.iloc[0:0]
    for _, r in fw.drop_duplicates("framework_scenario").iterrows():
        out.append((framework_brief.description(r.framework_scenario, int(r.train_steps),
                                                int(r.checkpoint_every_steps)), r.run_id))
    return out


HOURLY_S = 3600.0     # the interval a reader plans for: how many hosts would checkpoint the job every hour


def _hosts_for_hourly(r) -> int | None:
    """Hosts writing at this host's honest save rate that would save the job's checkpoint within the overhead
    limit of an hourly interval (assumes the rate adds up across hosts; sync saves)."""
    rate = r.get("save_gib_per_s")
    if rate is None or pd.isna(rate) or rate <= 0:
        return None
    budget_s = HOURLY_S * r.overhead_limit_percent / 100
    return max(1, math.ceil(r.checkpoint_gib / rate / budget_s))


def _interval_answer(r, runs: list[float], before=None) -> str:
    """What was measured here first (with its runs' range), then the projection with its assumption in words."""
    intervals = f"sync every {_duration(r.sync_interval_s)}" + (
        f", async every {_duration(r.async_interval_s)}" if not pd.isna(r.async_interval_s) else "")
    hosts = _hosts_for_hourly(r)
    if hosts is None:
        return intervals
    return (f"this host saves at {significant(r.save_gib_per_s)} GiB/s ({spread(runs, significant, before)}); from this "
            f"one host alone: {intervals}; "
            f"saving every hour within {r.overhead_limit_percent:g} % needs {hosts:,} such hosts writing at once "
            "(if their rates add up)")


def _page_one_cell(r, runs: list[float], before=None) -> dict:
    """Page 1's cell and caveat: what was measured here (its runs' range), and the projection's assumption."""
    hosts = _hosts_for_hourly(r)
    if hosts is None:
        return {}
    return {"short": f"{significant(r.save_gib_per_s)} GiB/s per host ({spread_cell(runs, significant, before)}) · hourly "
                     f"needs {hosts:,} hosts",
            "note": f"save rate measured on this machine; hosts: if it adds up across hosts, sync saves in "
                    f"{r.overhead_limit_percent:g} % of each hour"}


def _save_runs(frame, target: str) -> list[float]:
    """Every protocol run's honest save GiB/s on the target: the runs whose mean is the page-1 save rate."""
    if frame is None or not len(frame):
        return []
    return metrics.save_runs(ok_runs(frame), target)


MEASURE = "the largest model's honest save GiB/s"     # kit/history: earlier studies' runs of this answer


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: for the largest llama3 model, the shortest checkpoint interval keeping training's overhead
    within the limit on each target (sync and async), and the restore time after a failure."""
    study = read_json_or(Path(study_dir) / "study.json") or {}
    study["client_checks"] = _checks(study_dir, frame)
    rows = study.get("intervals") or []
    s3 = {n for n, t in (study.get("targets") or {}).items() if t.get("kind") == "s3"}
    if not rows:
        return []
    t = pd.DataFrame(rows)
    big = t.loc[t.checkpoint_bytes.idxmax(), "model"]
    out = []
    for _, r in t[t.model == big].iterrows():
        if pd.isna(r.sync_interval_s):
            continue
        runs = _save_runs(frame, r.target)
        before = earlier(study_dir, MEASURE, r.target)
        out.append({"question": f"Checkpointing {big} ({int(r.ranks)} ranks, {r.checkpoint_gib:,.0f} GiB) at ≤ "
                                f"{r.overhead_limit_percent:g} % overhead: this host's save rate, hosts for hourly saves",
                    "target": r.target,
                    "answer": _interval_answer(r, runs, before), **_page_one_cell(r, runs, before),
                    "measures": {MEASURE: runs},
                    "basis": f"restore {_duration(r.restore_s)}; one host's measured save rate extrapolated to the "
                             "whole job on this one target"
                             + ("; S3: multipart uploads by a compiled client (Go), acknowledged not fsync'ed by a local "
                                "gateway"
                                if r.target in s3 else "")
                             + "".join(f"; {n}" for n in [check_note(study, r.target)] if n) + "; checkpoint study"})
    return out
