"""The kv_cache section of the brief: what ran (the workload as data, the bytes-per-token formula), MLPerf-style
beside honest bandwidth, per-call latency (host vs device), tiers and tokens served from storage with what
limited each run, then the reload-vs-recompute break-even (answers, the figure of reload and recompute time
against context length, the prefill measurement and the H200 reproduction); limits. Page 1: answers()."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...kit import client_check, mlpstorage_verdict
from ...kit.client_check import unchecked
from ...kit.files import read_csv_or_none, read_json_or
from ...kit.runs import ok_runs, what_failed
from ...report.words import WORKLOAD, display, plural
from ...report.display import analysis, show_figure, show_md, show_table, style, target_colors
from . import breakeven
from .metrics import client_checks
from .workload import GIB, KIB, MIB, ModelShape


# The side files the section reads, and what goes missing with each (said, never shown as "none measured").
SIDE_FILES = {"study.json": "what ran, the models and the prefill summary",
              "breakeven.csv": "the reload-or-recompute break-even", "latency.csv": "the latency histograms",
              "prefill.csv": "this machine's prefill measurement"}
NOT_RECORDED = "(not recorded)"


def section(study_dir: Path, frame, names: list[str]) -> None:
    style()
    study_dir = Path(study_dir)
    study = read_json_or(study_dir / "study.json")
    for text in what_failed(frame, study_dir, SIDE_FILES, group="workload"):
        show_md(text)
    ok = ok_runs(unchecked(frame))          # the client check's re-runs count in no figure (their own paragraph)
    checked = client_checks(frame) if len(ok) else []
    _what_ran(ok, study)
    if verdict := mlpstorage_verdict.paragraph(study_dir, "kv_cache"):    # MLPerf's code on the runs
        show_md(verdict)
    _versus(ok, checked)
    if checked:
        show_md(client_check.markdown(checked, "the clients", "measured read or write GiB/s or reload rate"))
    hist = read_csv_or_none(study_dir / "latency.csv")
    _latency(ok, hist if hist is None else unchecked(hist))
    _tiers(ok)
    if (study_dir / "breakeven.csv").is_file():         # missing: named above, no "no break-even" claim
        _breakeven(read_csv_or_none(study_dir / "breakeven.csv"), study, names, measured=len(ok) > 0)
    if (study_dir / "prefill.csv").is_file() and study:
        _prefill(read_csv_or_none(study_dir / "prefill.csv"), study, read_json_or(study_dir / "notes.json"))
    _h200(study)
    _limits(study, frame)


def _rec(study: dict, key: str, fmt: str = "{}") -> str:
    """A value study.json records, formatted, or NOT_RECORDED (an older or partial study.json)."""
    return fmt.format(study[key]) if study.get(key) is not None else NOT_RECORDED


def _family(w: dict) -> str:
    return ("MLPerf's user model" if w.get("family") == "mlperf" else
            "this study's closed loop" if w.get("family") else f"family {NOT_RECORDED}")


def _in_flight(w: dict) -> str:
    if w.get("family") == "mlperf":
        allocs = w.get("max_concurrent_allocs") or 0
        return ("one worker per user, open-loop users (think, then enqueue), writes in flight "
                + (f"at most {allocs}" if allocs else "unbounded") + ", reads unbounded")
    return f"{w['concurrency']} requests in flight per client"


def _templates(study: dict) -> str:
    m = study.get("mlperf") or {}
    t = "; ".join(f"{x['name']} L {x['context_tokens'][0]:,}–{x['context_tokens'][1]:,}, G "
                  f"{x['generate_tokens'][0]}–{x['generate_tokens'][1]}, think {x['think_s'][0]:g}–{x['think_s'][1]:g} s"
                  for x in m.get("templates", []))
    return (" The mlperf family (the user model of MLPerf Storage v3.0's KV-cache tool): each user draws a template "
            f"({t or NOT_RECORDED}); a "
            "request's context is U[L/4, L] tokens, its file holds that turn's context, every earlier turn's file of "
            "the conversation is read back first, and below 10K tokens the new file is read 1 + ⌈G / "
            f"{m.get('decode_batch_tokens', NOT_RECORDED)}⌉ times; a conversation ends with probability "
            f"{m.get('end_conversation_probability', NOT_RECORDED)} per turn; files stay until the capacity LRU drops "
            "them.") if m else ""


def _what_ran(ok, study: dict) -> None:
    if not study:
        return                              # study.json missing: said with the missing files
    models = "; ".join(f"**{m}**: {s['formula']}" for m, s in study.get("models", {}).items())
    wl = ", ".join(f"{n} ({_family(w)}; {w['model']}, {w['users_per_client']} users per client, "
                   + (f"a {w['cpu_tier_gib']:g} GiB CPU tier per client" if w.get("cpu_tier_gib") else "no CPU tier")
                   + f", {_in_flight(w)})" for n, w in study.get("workloads", {}).items())
    ctx = ", ".join(f"{c['tokens']:,}" for c in study.get("contexts", []))
    turns = ", ".join(f"{t['tokens']}" for t in study.get("turns", []))
    models, wl, ctx, turns = (x or NOT_RECORDED for x in (models, wl, ctx, turns))
    closed = any(w.get("family") != "mlperf" for w in study.get("workloads", {}).values())
    show_md(
        "**What ran.** MLPerf Storage v3.0's KV-cache workload, measured on each target: "
        f"{_rec(study, 'clients')} client " + ("MPI ranks" if study.get("launcher") == "mpi" else "processes")
        + f" of simulated users for a nominal {_rec(study, 'duration_s', '{} s')} per run (requests in flight at the "
        f"end finish). Workloads: {wl}. KV bytes per token (fp16, grouped-query attention): {models}."
        + (_templates(study) if any(w.get("family") == "mlperf" for w in study.get("workloads", {}).values()) else "")
        + (f" In this study's closed loop a conversation starts with {ctx} tokens (weighted draw), runs {turns} "
           f"turns, and each later turn adds {_rec(study, 'turn_tokens')} tokens and first reloads the previous "
           f"turn's cache; below {_rec(study, 'prefill_only_tokens', '{:,}')} tokens a new cache is also read back "
           f"{plural(_rec(study, 'decode_reads'), 'time')} right after its write." if closed else "")
        + " Every cache is one file "
        "per request (MLPerf's layout, so MLPerf's figure and ours count the same I/O), written with write() calls "
        f"of {_rec(study, 'write_block_mib', '{} MiB')} of incompressible bytes and fsync'ed, then read back cold "
        "(posix_fadvise DONTNEED before the read; drop_caches as root before each run). The quick profile keeps the "
        "real bytes per token and cuts users, contexts and time; MLPerf's closed options (300 s, 3 trials, seed 42) "
        "are the paper-scale presets mlperf-closed-1 to 3. GiB = 2³⁰ bytes (MLPerf's figures labelled GB/s are "
        "GiB/s).")
    show_md("Each run's `kvcache_results_<stamp>.json` in `mlperf/results/` writes MLPerf's own key paths "
            "(`summary.cache_stats.*`) with MLPerf's arithmetic on this study's I/O: figures of MLPerf's kind, not "
            "figures from MLPerf's tool.", detail=True)


def versus_table(ok) -> pd.DataFrame:
    g = ok.groupby(["target", "workload"])
    return pd.DataFrame({
        "read MLPerf GiB/s": g.mlperf_read_gib_per_s.mean(), "read measured GiB/s": g.honest_read_gib_per_s.mean(),
        "write MLPerf GiB/s": g.mlperf_write_gib_per_s.mean(), "write measured GiB/s": g.honest_write_gib_per_s.mean(),
        "×": g.overstatement_ratio.mean(), "nominal s": g.duration_s.mean(), "elapsed s": g.elapsed_time_s.mean(), "I/O in flight s": g.io_busy_s.mean(),
        "overrun s": g.overrun_s.mean(), "runs": g.size()}).reset_index()


def check_note(checked: list[dict], target: str, workloads) -> str:
    """What sits next to a headline: the client check's verdict on this target and one of `workloads`, or ''."""
    for c in checked:
        if c["target"] == target and c["workload"] in workloads:
            return client_check.short_note(c, f" ({c['workload']})")
    return ""


def _versus(ok, checked: list[dict] | None = None) -> None:
    import matplotlib.pyplot as plt

    if ok.empty:
        show_md("No KV-cache run measured: every run failed (what failed and why is above), so no bandwidth, "
                "latency, tier or break-even figure exists for this result.")
        return
    t = versus_table(ok)
    show_table(t, "MLPerf's arithmetic on this study's I/O, not MLPerf's tool (bytes ÷ elapsed_time, the wait for "
                  "the duration as measured; MLPerf's tool, run beside the study by benchmarks/kv_cache_vs_mlperf.py, "
                  "reports its own: docs/studies/kv_cache.md, 'Beside MLPerf's tool', gives the measured gap) "
                  "beside the rate measured while storage worked (bytes ÷ the time any client had a "
                  "storage call in flight); × = MLPerf ÷ measured; means over repeats.", floatfmt="{:,.3f}")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = np.arange(len(t))
    for i, (col, label) in enumerate((("read MLPerf GiB/s", "read, MLPerf-style"), ("read measured GiB/s", "read, measured"),
                                      ("write MLPerf GiB/s", "write, MLPerf-style"),
                                      ("write measured GiB/s", "write, measured"))):
        ax.bar(x + (i - 1.5) * 0.2, t[col], width=0.2, label=label)
    # each group's workload under it, each target's name once under its groups: the names in one label each
    # ("hdd-emulated / quick workload 1") were turned on end to fit, in a small font (issue 62)
    numbered = [WORKLOAD.fullmatch(str(w)) for w in t.workload]
    ax.set_xticks(x, [m.group(2) if m else display(w) for m, w in zip(numbered, t.workload)])
    kinds = {m.group(1) if m else "" for m in numbered}           # "quick workload 1": the number under its bars
    ax.set_xlabel((f"{kinds.pop()} " if len(kinds) == 1 and "" not in kinds else "") + "workload, per target",
                  labelpad=26)
    targets = t.target.tolist()
    spans = {n: [i for i, v in enumerate(targets) if v == n] for n in dict.fromkeys(targets)}
    under = ax.secondary_xaxis("bottom")
    under.set_xticks([sum(i) / len(i) for i in spans.values()], list(spans))
    under.tick_params(length=0, pad=20)
    for label in under.get_xticklabels():
        label.set_fontweight("bold")
    ax.set(ylabel="GiB/s", title="KV-cache bandwidth: MLPerf's accounting vs measured")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    show_figure(fig, "Read and write GiB/s per target and workload, MLPerf's way and ours (means over repeats).")
    analysis([f"- **{r.target}**, {r.workload}: MLPerf's accounting gives ×{r['×']:.2f} the read rate measured while "
              f"storage calls were in flight (reads {r['read MLPerf GiB/s']:.3f} vs {r['read measured GiB/s']:.3f} "
              f"GiB/s): calls were in flight {r['I/O in flight s']:.2f} s of an elapsed time of {r['elapsed s']:.2f} s, "
              f"requests overran by "
              f"{r['overrun s']:.2f} s"
              + "".join(f"; {n}" for n in [check_note(checked or [], r.target, {r.workload})] if n) + "."
              for _, r in t.iterrows()]
             + ["- × > 1: requests ran past the measured duration, whose bytes MLPerf's arithmetic still divides by it; × < 1: "
                "storage sat idle part of the run (CPU-tier hits, client work)."])


def _latency(ok, hist) -> None:
    import matplotlib.pyplot as plt

    if ok.empty:
        return
    for op, host, device in (("read", "open + advice + reads + the copy into the host buffer", "the read() calls"),
                             ("write", "open to close", "the fsync, MLPerf's device span")):
        cols = {f"{op}_{span}_ms_{q}": f"{span} {q} ms" for span in ("host", "device") for q in ("p50", "p95", "p99")}
        cols[f"mlperf_device_{op}_p95_ms"] = "MLPerf device P95 ms"
        t = ok.groupby(["target", "workload"])[list(cols)].mean().reset_index().rename(columns=cols)
        show_table(t, f"Storage {op}s, every call of the run (means over repeats): host = {host}; device = {device}. "
                      "MLPerf's device P95 is the largest of the clients' P95s.", floatfmt="{:,.1f}")
    if hist is None or hist.empty:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
    for ax, op in zip(axes, ("read", "write")):
        for (target, span), g in hist[hist.op == op].groupby(["target", "span"]):
            per_bin = g.groupby("bin_low_us")["count"].sum()
            ax.step([max(0.5, x) for x in per_bin.index], per_bin / per_bin.sum() * 100, where="post",
                    label=f"{target}, {display(str(span))}")
        ax.set(xscale="log", title=f"storage {op}s", xlabel="latency µs (bin's low edge)")
    axes[0].set_ylabel("% of calls")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    show_figure(fig, "Where the storage calls' latencies fall (log2 bins, all runs): host and device spans.",
                detail=True)


def _tiers(ok) -> None:
    if ok.empty:
        return
    t = ok.groupby(["target", "workload"]).agg(**{
        "CPU-tier reload hits": ("cpu_tier_read_hit_ratio", "mean"), "storage reloads": ("storage_read_hit_ratio", "mean"),
        "writes to CPU tier": ("cpu_tier_write_ratio", "mean"), "tokens/s from storage (measured)":
        ("honest_storage_tokens_per_s", "mean"), "tokens/s (÷ elapsed)": ("storage_tokens_per_elapsed_s", "mean"),
        "client CPU %": ("client_cpu_percent", "mean"), "limited by": ("limited_by", "first")}).reset_index()
    show_table(t, "Tiers and tokens: share of reloads served by the CPU tier and by storage, share of request writes "
                  "kept in the CPU tier, tokens whose cache came back from storage per second, and what set the pace "
                  "(client CPU: ≥ 85 % of the cores busy; storage: a call in flight ≥ 80 % of the run; else the "
                  "workload).",
               floatfmt="{:,.2f}")


def _curves(shape: ModelShape, rate_gib: float, lat_s: float, tflops: float, Ls) -> tuple:
    return ([breakeven.reload_s(shape, L, rate_gib * GIB, lat_s) for L in Ls],
            [breakeven.recompute_s(shape, L, tflops) for L in Ls])


def _shape(study: dict, model: str) -> ModelShape:
    s = study["models"][model]
    return ModelShape(**{k: s[k] for k in ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
                                           "context_window")})


def _breakeven(be, study: dict, names: list[str], measured: bool = True) -> None:
    import matplotlib.pyplot as plt

    if be is None or be.empty:
        if measured:
            show_md("**Reload or recompute.** No target measured a reload rate: no break-even.")
        return
    need_at = int(be.need_at_tokens.iloc[0])
    t = be.assign(answer=be.answer.str.replace("reloading beats recomputing ", "", regex=False))[
        ["target", "model", "accelerator", "tflops", "reload_read_gib_per_s", "reload_latency_s", "answer",
         "read_gib_per_s_needed"]].rename(columns={
            "tflops": "TFLOP/s", "reload_read_gib_per_s": "reload GiB/s", "reload_latency_s": "reload latency s",
            "answer": "reload wins", "read_gib_per_s_needed": f"GiB/s to win at {need_at // 1024}K"})
    show_md("**Reload or recompute: the break-even.** Recomputing a context of L tokens costs its prefill: FLOPs(L) = "
            "2 × P × L + 2 × layers × heads × head_dim × L² (P: the decoder's weights; causal attention), at the "
            "accelerator's effective rate. Reloading costs a fixed latency + L × bytes per token ÷ this target's "
            "reload rate (a least-squares line through every read of its runs: time against bytes). Reloading wins "
            "beyond the L where the two cross.")
    show_table(t, "Per target, model and accelerator: beyond how many tokens reloading this target's KV cache beats "
                  f"recomputing it, and the read GiB/s a reload would need to win at {need_at:,} tokens (latency "
                  "included).",
               floatfmt="{:,.3g}")
    models = [m for m in dict.fromkeys(be.model) if m in (study.get("models") or {})]
    unshaped = [m for m in dict.fromkeys(be.model) if m not in models]
    if unshaped:
        show_md(f"study.json does not record the shape of {', '.join(map(str, unshaped))}: no reload-vs-recompute "
                "curve is drawn for it.")
    if models:
        within = study.get("breakeven", {}).get("answer_within_tokens", 131072)
        Ls = np.unique(np.geomspace(256, within, 40).astype(int))
        colors = target_colors(names)
        fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.4), squeeze=False)
        for ax, m in zip(axes[0], models):
            shape = _shape(study, m)
            g = be[be.model == m]
            for _, r in g.drop_duplicates("target").iterrows():
                reload, _ = _curves(shape, r.reload_read_gib_per_s, r.reload_latency_s, 1.0, Ls)
                ax.plot(Ls, reload, color=colors.get(r.target), label=f"reload, {r.target}")
            for style_, (_, r) in zip(("--", ":", "-."), g.drop_duplicates("accelerator").iterrows()):
                _, rec = _curves(shape, 1.0, 0.0, r.tflops, Ls)
                ax.plot(Ls, rec, color="black", linestyle=style_, label=f"recompute, {r.accelerator}")
            ax.set(xscale="log", yscale="log", xlabel="context L (tokens)", ylabel="seconds", title=m)
            ax.legend(fontsize=7)
        show_figure(fig, "Reload time (per target, its measured reload rate and latency) and recompute time (per "
                         "accelerator) against the context length: reloading wins to the right of a crossing.")
    lines = []
    for (target, model), g in be.groupby(["target", "model"], sort=False):
        r0 = g.iloc[0]
        wins = "; ".join(f"{r.accelerator} {r.answer.replace('reloading beats recomputing ', '')}" for _, r in g.iterrows())
        need = ", ".join(f"{r.accelerator} {_gib(r.read_gib_per_s_needed)}" for _, r in g.iterrows())
        lines.append(f"- **{target}**, {model} (reload {r0.reload_read_gib_per_s:.3f} GiB/s + "
                     f"{r0.reload_latency_s * 1e3:.1f} ms): reloading wins {wins}. To win at {need_at:,} tokens a "
                     f"reload needs {need}.")
    analysis(lines)


def _gib(v) -> str:
    return "more than any rate (the latency alone exceeds the prefill)" if pd.isna(v) else f"{v:,.3g} GiB/s"


def _prefill(pf, study: dict, notes: dict) -> None:
    s = study.get("prefill") or {}
    if pf is None or pf.empty or not s:
        why = [w for w in notes.get("warnings", []) if w.startswith("prefill ")]
        why = [w[0].upper() + w[1:] for w in why]
        show_md("**This machine's prefill.** " + ("; ".join(why) if why else "Not measured (the result records no "
                                                  "reason): the break-even has no 'this-cpu' answer") + ".")
        return
    t = pf.groupby("context_tokens").agg(**{"best s": ("best_seconds", "first"), "sd s": ("seconds", "std"),
                                             "passes": ("seconds", "size"), "model s": ("predicted_seconds", "first"),
                                             "error": ("relative_error", "first"),
                                             "effective GFLOP/s": ("effective_tflops", "first")}).reset_index()
    t["effective GFLOP/s"] *= 1e3
    sh = s.get("shape", {})
    show_table(t, f"This machine's prefill, measured: a Keras decoder of llama shape ({sh.get('layers')} layers, hidden "
                  f"{sh.get('hidden')}, {sh.get('heads')} heads / {sh.get('kv_heads')} KV heads, ffn {sh.get('ffn')}; "
                  f"{s.get('parameters_keras', 0):,} weights, the formula's count {s.get('parameters_formula', 0):,}), "
                  "random weights, batch 1, best of the passes beside the FLOP model at one fitted rate.",
               floatfmt="{:,.4g}")
    analysis([f"- One effective rate, {s['tflops'] * 1e3:,.1f} GFLOP/s, predicts every context within "
              f"{s['agreement'] * 100:.0f} % (the largest |model ÷ measured − 1|). This plain decoder computes the "
              "whole L × L score matrix and masks it, so the model here counts 4·L²·d attention FLOPs per layer; the "
              "catalogue's H200 ran a causal kernel (2·L²·d)."]
             + ([f"- Against the process's CPU time instead of the wall clock (the work done, which other load on a "
                 f"shared machine hardly moves): {s['cpu_clock']['tflops'] * 1e3:,.1f} GFLOP/s, within "
                 f"{s['cpu_clock']['agreement'] * 100:.0f} %."] if s.get("cpu_clock") else []), title="Agreement")


def _h200(study: dict) -> None:
    rows = study.get("h200_reproduction") or []
    if not rows:
        return
    r = pd.DataFrame(rows)
    # short headers with units and whole tokens/s: with the raw column names the table ran past the page and the
    # PDF lost its last column
    t = pd.DataFrame({"model": r.model, "context (tokens)": r.context_tokens.map("{:,.0f}".format),
                      "tokens/s measured": r.measured_tokens_per_s.map("{:,.0f}".format),
                      "tokens/s model": r.model_tokens_per_s.map("{:,.0f}".format),
                      "model vs measured": r.relative_error.map("{:+.1%}".format),
                      "break-even read GiB/s, measured": r.measured_breakeven_read_gib_per_s,
                      "break-even read GiB/s, model": r.model_breakeven_read_gib_per_s,
                      "TFLOP/s measured": r.measured_effective_tflops})
    show_table(t, f"The catalogue's H200 (measured 2026-11-26): prefill tokens/s beside the FLOP model at one fitted "
                  f"rate per model ({', '.join(f'{r:,.0f}' for r in sorted(set(pd.DataFrame(rows).tflops)))} "
                  f"TFLOP/s); within ±{study.get('h200_tolerance', 0) * 100:.0f} % at every point. The read GiB/s at "
                  "which reload = recompute (latency 0) follows: bytes per token × tokens/s.", floatfmt="{:,.3g}")


def _limits(study: dict, frame) -> None:
    failed = frame[frame.status == "failed"] if "status" in frame else frame.iloc[0:0]
    analysis([
        "- One host: every client is a process here (MLPerf runs ranks on many clients); the GPU tier is not "
        "emulated (no GPU is used), so every request's cache goes to the CPU tier or to storage.",
        "- Quick profile: real bytes per token, but few users, short contexts and a few seconds per run; small "
        f"files ({study.get('longest_context', 0) * 128 * KIB / MIB:,.0f} MiB at most for llama3.1-8b) finish inside "
        "device caches in ways 300 s of 128K-token contexts would not.",
        "- The break-even takes one request's reload rate under this run's concurrency and a prefill rate from a "
        "FLOP model: accelerators other than the measured ones enter at a stated utilisation of their datasheet peak.",
        "- The CPU's prefill was measured on a 2-core machine shared with other work: its rate is a floor.",
    ] + [f"- Failed run {r.run_id}: {r.failure_reason}" for _, r in failed.iterrows()], title="Limits")


def trace_workloads(frame, names: list[str]) -> list[tuple[str, str]]:
    ok = ok_runs(unchecked(frame))
    ref = ok[ok.target == names[0]].sort_values("repeat") if names and len(ok) else ok.iloc[0:0]
    return [(f"KV cache {r.workload} ({r.model})", r.run_id) for _, r in ref.drop_duplicates("workload").iterrows()]


# Page 1's footnote for a break-even the runs disagree on (the chapter's answer: "fit unstable: …").
UNSETTLED = "the runs disagreed too widely on where reloading starts to win for one answer"


def _machine(r) -> bool:
    """A row about this machine's own CPU as the accelerator (measured here), not about the storage."""
    return str(getattr(r, "how", "")) == "measured here" or r.accelerator == "this-cpu"


def _unstable(r) -> bool:
    return str(getattr(r, "stable", "")).strip().lower() in ("false", "0")


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: per target and model, beyond how many tokens reloading its KV cache from this target beats
    recomputing it, per accelerator of the catalogue, and the read rate needed at need_at_tokens. This machine's
    CPU as the accelerator is the chapter's (a CPU-vs-storage question): page 1's cell names the catalogue's
    accelerators only, and a row of the CPU alone is the chapter's (page_one False); a fit the runs disagree on
    is "not settled" on page 1 (scorecard.py)."""
    be = read_csv_or_none(Path(study_dir) / "breakeven.csv")
    if be is None:
        return []
    checked = client_checks(frame)
    out = []
    for (t, m), g in be.groupby(["target", "model"], sort=False):
        same_model = set(frame.workload[frame.model == m]) if "model" in frame else set()
        parts = [f"{r.accelerator}: {r.answer.replace('reloading beats recomputing ', '')} (needs "
                 f"{_gib(r.read_gib_per_s_needed)} at {int(r.need_at_tokens) // 1024}K)" for _, r in g.iterrows()]
        shown = g[[not _machine(r) for r in g.itertuples()]]
        on_page = len(shown) > 0
        shown = shown if on_page else g
        # the cell: each accelerator's outcome in a few words; the caveat: the rate the fastest one needs
        outcomes: dict[str, list[str]] = {}
        for r in shown.itertuples():
            outcome = ("not settled" if _unstable(r) else
                       re.sub(r"\s*\([^()]*\)", "", r.answer.replace("reloading beats recomputing ", "")))
            outcomes.setdefault(outcome, []).append(display(r.accelerator))      # "(one run: no range)": chapter's
        need = shown.read_gib_per_s_needed       # empty: no rate would do (the latency alone exceeds the prefill)
        fastest = shown.loc[need.isna().idxmax() if need.isna().any() else need.idxmax()]
        out.append({"question": f"KV cache ({m}): beyond how many tokens does reloading from storage beat "
                                "recomputing?", "target": t, "answer": "; ".join(parts),
                    "short": "; ".join(f"{', '.join(a)}: {o}" for o, a in outcomes.items()),
                    "note": f"reload measured at {g.reload_read_gib_per_s.iloc[0]:.3f} GiB/s; "
                            f"{display(fastest.accelerator)} needs {_gib(fastest.read_gib_per_s_needed)} at "
                            f"{int(fastest.need_at_tokens) // 1024}K tokens",
                    "basis": f"reload at {g.reload_read_gib_per_s.iloc[0]:.3f} GiB/s + "
                             f"{g.reload_latency_s.iloc[0] * 1e3:.1f} ms measured on this target (one request, "
                             "cold); recompute from the prefill FLOP model"
                             + "".join(f"; {n}" for n in [check_note(checked, t, same_model)] if n)
                             + "; kv_cache study",
                    **({"unsettled": UNSETTLED} if any(_unstable(r) for r in shown.itertuples()) else
                       {"quote": _quote(shown, m)} if on_page else {}),
                    **({} if on_page else {"page_one": False})})
    return out


QUOTED = "h100-sxm"     # page 1's quotable finding names this accelerator where the catalogue has it (issue 62)


def _quote(shown, model: str) -> dict:
    """Page 1's quotable finding (brief/quotes.py), for one catalogue accelerator:
    'reloading wins beyond 3,072 tokens' or 'recomputing wins within 128K tokens' (the chapter says at which rates)."""
    r = next((r for r in shown.itertuples() if r.accelerator == QUOTED), next(shown.itertuples()))
    outcome = re.sub(r"\s*\([^()]*\)", "", r.answer.replace("reloading beats recomputing ", ""))
    if outcome.startswith("not "):
        says = f"recomputing wins {outcome[4:]}"
    else:
        says = f"reloading wins {outcome}"
    name = display(r.accelerator)
    return {"lead": f"KV cache ({model}), reload from storage or recompute on {'an' if name[:1] in 'AEFHILMNORSX' else 'a'}"
                    f" {name}", "says": says}
