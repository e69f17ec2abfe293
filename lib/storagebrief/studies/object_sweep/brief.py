"""The object-sweep section of the brief: what ran, the object targets, throughput and p99 latency per
object size and concurrency, directory vs S3 on the same device (with the transfer sweep's fio figure at
like size where it ran), and which rows the client CPU limited."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...kit.files import read_csv_or_none
from ...kit.history import earlier
from ...kit.runs import at_point, open_section
from ...kit.sizes import size_label
from ...report.display import analysis, show_figure, show_md, show_table, target_colors
from ...report.words import spread, spread_cell
from .metrics import KEYS


# The side files the section reads, and what goes missing with each (said, never shown as "none ran").
SIDE_FILES = {"study.json": "what ran and the object targets", "points.csv": "every point's figures",
              "pairs.csv": "directory vs S3 on the same device"}


def section(study_dir: Path, frame, names: list[str]) -> None:
    opened = open_section(study_dir, frame, SIDE_FILES, "No object points were measured.")
    if opened is None:
        return
    study, pts = opened
    study_dir = Path(study_dir)
    _what_ran(frame, study, pts)
    _targets(study)
    _figure(pts, [n for n in names if n in set(pts.target)])
    cols = ["target", "access", "load", "op", "object_bytes", "concurrency", "repeats", "throughput_mb_per_s",
            "throughput_mb_per_s_min", "throughput_mb_per_s_max", "reference_mb_per_s", "study_to_reference",
            "objects_per_s", "latency_ms_p50",
            "latency_ms_p99", "client_cpu_s_per_gb", "gateway_cpu_s_per_gb", "limited_by"]
    t = pts[[c for c in cols if c in pts]].copy()
    t["object_bytes"] = t.object_bytes.map(lambda b: size_label(int(b)))
    show_table(t.rename(columns={"object_bytes": "object"}),
               "Every point: median over repeats (MB/s min and max beside it), request latency p50/p99 in ms, "
               "client and gateway CPU seconds per GB moved; limited_by names the CPU where it, not the storage, "
               "set the figure" + ("; reference MB/s: a compiled S3 client (Go, minio-go) on the same keys"
                                   if _has_reference(pts) else ""))
    pairs = read_csv_or_none(study_dir / "pairs.csv")
    if (study_dir / "pairs.csv").is_file():             # missing: named above, not "no pair ran"
        _pairs(pairs, study_dir)
    _analysis(pts, pairs, study)


def _client_words(client: str) -> str:
    """The study's client as its study.json names it: the compiled worker since issue 58, boto3 before."""
    return "a compiled client (Go with minio-go, one process, one connection per request in flight)" \
        if client == "minio-go" else client


def _what_ran(frame, study: dict, pts) -> None:
    objs = ", ".join(f"{k}: {v}" for k, v in study.get("objects", {}).items())
    show_md(
        f"**What ran.** Whole-object GETs and PUTs through {_client_words(study.get('client', 'boto3'))} at object sizes "
        f"{', '.join(size_label(int(b)) for b in sorted(pts.object_bytes.unique()))} (K = 1,024 B) and "
        f"{', '.join(str(int(c)) for c in sorted(pts.concurrency.unique()))} requests in flight, "
        f"{', '.join(sorted(pts.load.unique()))}, {int(frame.repeat.max())} repeats; objects per point {objs}. "
        "S3 targets: the local gateway is versitygw (posix backend) on loopback, its objects plain files on the "
        "target's device, inside the target's throttle; directory targets: the same client threads read or "
        "write whole files. GETs start from a cold cache where the files are on this machine. Throughput is "
        "bytes / wall time in MB/s (10⁶ B/s); latency is per request, sent to last body byte. The client runs in "
        "a process of its own, so its CPU is its alone. A row is marked as limited by the CPU (limited_by, the "
        "evidence in limited_by_reason) when a client process used, or was ready to use, ≥ "
        f"{study.get('client_bound_percent_of_usable_cores', 85)} % of the cores it can use (its requests in "
        "flight, capped by its CPUs; one for a Python client: its interpreter lock; ready: a thread of it on a CPU "
        "or waiting for one, sampled every 20 ms), "
        f"when the client, or client + gateway, used or wanted ≥ "
        f"{study.get('client_limit_percent', 80)} % of all {study.get('cpus')} CPUs, or when the whole machine was "
        "≥ 90 % busy: such a figure is the client's or the CPU's ceiling, not the store's.")


def _targets(study: dict) -> None:
    rows = [{"target": k, "kind": v.get("kind"), "endpoint": v.get("endpoint", ""), "gateway": v.get("gateway", ""),
             "bucket / prefix": (f"{v.get('bucket', '')}/{v.get('prefix', '')}" if v.get("bucket") else ""),
             "backing device": v.get("device") or "(not on this machine)"}
            for k, v in study.get("targets", {}).items()]
    if rows:
        # to the appendix: endpoints and buckets are set-up, and the chapter's one table is the comparison (issue 62)
        show_table(pd.DataFrame(rows), "Targets of the object sweep (credentials are never recorded)")


def _figure(pts, names: list[str]) -> None:
    import matplotlib.pyplot as plt

    idle = pts[pts.load == (("idle" if "idle" in set(pts.load) else pts.load.iloc[0]))]
    ops = [o for o in ("get", "put") if o in set(idle.op)]
    fig, axes = plt.subplots(1, len(ops), figsize=(5.2 * len(ops), 3.6), squeeze=False)
    colors = target_colors(names)
    for ax, op in zip(axes[0], ops):
        for name in names:
            for conc, g in idle[(idle.op == op) & (idle.target == name)].groupby("concurrency"):
                g = g.sort_values("object_bytes")
                ax.errorbar(g.object_bytes, g.throughput_mb_per_s,
                            yerr=[g.throughput_mb_per_s - g.throughput_mb_per_s_min,
                                  g.throughput_mb_per_s_max - g.throughput_mb_per_s],
                            marker="o", color=colors.get(name), linestyle="-" if conc == idle.concurrency.max() else ":",
                            label=f"{name}, {int(conc)} in flight", capsize=2)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(idle.object_bytes.unique()))
        ax.set_xticklabels([size_label(int(b)) for b in sorted(idle.object_bytes.unique())])
        ax.set_xlabel("object size")
        ax.set_ylabel("MB/s (median; bars: min–max over repeats)")
        ax.set_title(f"{op.upper()}, idle system")
        ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "Throughput per object size, a line per target and concurrency (solid: the highest)")
    plt.close(fig)


def _fio_like(study_dir: Path, pairs: pd.DataFrame) -> pd.Series | None:
    """The transfer sweep's fio throughput on the directory target at the same transfer size and depth."""
    fio = read_csv_or_none(study_dir.parent / "transfer_sweep" / "points.csv")
    if fio is None or fio.empty or "throughput_mb_per_s_mean" not in fio:
        return None
    f = fio[(fio.get("path") == "cpu") & (fio.load == "idle")]
    idx = f.set_index(["target", "block_size_bytes", "queue_depth"]).throughput_mb_per_s_mean
    idx = idx[~idx.index.duplicated()]
    return pairs.apply(lambda r: idx.get((r.directory_target, r.object_bytes, r.concurrency)), axis=1)


def _pairs(pairs, study_dir: Path) -> None:
    if pairs is None or pairs.empty:
        show_md("**Directory vs S3 on the same device.** No pair ran: it needs a directory target and a local-gateway "
                "S3 target on one block device with one profile.")
        return
    t = pairs.copy()
    fio = _fio_like(study_dir, t)
    if fio is not None and fio.notna().any():
        t["fio_randread_mb_per_s"] = fio
    t["object_bytes"] = t.object_bytes.map(lambda b: size_label(int(b)))
    g = lambda c: t[c] if c in t else None     # noqa: E731
    both = lambda a, b: [f"{x:,.1f} / {y:,.1f}" for x, y in zip(t[a], t[b])] if a in t and b in t else None  # noqa: E731
    shown = {"directory / S3 target": [f"{d} / {o}" for d, o in zip(t.directory_target, t.s3_target)],
             "load": g("load"), "op": t.op.str.upper(), "object": t.object_bytes, "in flight": g("concurrency"),
             "directory MB/s": g("directory_mb_per_s"), "S3 MB/s": g("s3_mb_per_s"),
             "S3 ÷ directory": [f"{v:.2f}" for v in t.s3_vs_directory],
             "p99 ms, directory / S3": both("directory_latency_ms_p99", "s3_latency_ms_p99"),
             "client CPU s/GB, directory / S3": both("directory_client_cpu_s_per_gb", "s3_client_cpu_s_per_gb"),
             "gateway CPU s/GB": g("s3_gateway_cpu_s_per_gb"),
             "fio randread MB/s": g("fio_randread_mb_per_s"), "limited by": g("limited_by")}
    same = [k for k in ("load", "in flight") if shown[k] is not None and len(set(shown[k])) == 1]
    said = "; ".join(f"{k} {list(shown[k])[0]} throughout" for k in same)
    show_table(pd.DataFrame({k: list(v) for k, v in shown.items() if v is not None and k not in same}),
               "Directory vs S3 on the same device at like object size, concurrency and load (medians"
               + (f"; {said}" if said else "")
               + ("; fio randread: the transfer sweep's fio, idle, O_DIRECT random reads of that size at that queue "
                  "depth on the directory target" if "fio_randread_mb_per_s" in t else "")
               + ")", body=True)


def _analysis(pts, pairs, study: dict) -> None:
    lines = []
    for op in ("get", "put"):
        g = pts[(pts.op == op) & (pts.load == "idle")] if "idle" in set(pts.load) else pts[pts.op == op]
        if g.empty:
            continue
        best = g.loc[g.throughput_mb_per_s.idxmax()]
        lines.append(f"- Best idle {op.upper()}: {best.throughput_mb_per_s:,.0f} MB/s on '{best.target}' "
                     f"({size_label(int(best.object_bytes))} objects, {int(best.concurrency)} in flight; range over "
                     f"repeats {best.throughput_mb_per_s_min:,.0f}–{best.throughput_mb_per_s_max:,.0f}).")
    if pairs is not None and not pairs.empty:
        for op, g in pairs.groupby("op"):
            r = g.s3_vs_directory.dropna()
            if len(r):
                lines.append(f"- {op.upper()} through S3 on the same device: {r.min():.2f}–{r.max():.2f} × the "
                             f"directory's throughput (median {r.median():.2f} over {len(r)} matched points)"
                             + _client_bound_note(g) + ".")
        cpu = pairs.s3_client_cpu_s_per_gb.dropna()
        if len(cpu):
            lines.append(f"- Client CPU per GB through S3: {cpu.min():.2f}–{cpu.max():.2f} s/GB (directory: "
                         f"{pairs.directory_client_cpu_s_per_gb.min():.2f}–{pairs.directory_client_cpu_s_per_gb.max():.2f}).")
    if _has_reference(pts):
        r = pts.study_to_reference.dropna()
        low = int((r < 0.8).sum())
        lines.append(f"- Beside a compiled S3 client (Go, minio-go) on the same gateway and keys, this study's client "
                     f"reached {r.min():.2f}–{r.max():.2f} × its MB/s (median {r.median():.2f} over {len(r)} points)"
                     + (f"; at {low} points below 0.8 ×, the store gave more than this study's client took."
                        if low else "."))
    lim = pts[_texts(pts.limited_by) != ""]
    lines.append(f"- {len(lim)} of {len(pts)} points were limited by the CPU, not the storage"
                 + (f" ({', '.join(sorted(set(lim.target)))}): their figures are the client's ceiling on this "
                    "machine, not the store's." if len(lim) else "."))
    analysis(lines)


def _has_reference(pts) -> bool:
    """The reference client ran beside this study's at some point (object_sweep.reference_client)."""
    return "reference_mb_per_s" in pts and pts.reference_mb_per_s.notna().any()


def _texts(column) -> pd.Series:
    """A text column as read back from CSV (all-empty: floats, NaN) as strings, '' for empty."""
    return column.map(lambda x: x if isinstance(x, str) else "")


def _client_bound_note(pairs) -> str:
    """Where the S3 side's client was the limit, the ratio is the client's, not the object path's: say so."""
    bound = _texts(pairs.limited_by).str.contains("S3: client CPU", regex=False) if "limited_by" in pairs else []
    n = int(sum(bound))
    return (f"; in {n} of {len(pairs)} of them the S3 client's CPU was the limit (a Python client tops out near one "
            "core): those ratios are the client's ceiling, not the object path's cost") if n else ""


MEASURE = {"get": "best idle GET MB/s", "put": "best idle PUT MB/s"}     # kit/history: earlier studies' runs


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: per S3 target, its best idle GET and PUT, and beside a directory on the same device, what the
    object path costs there."""
    pts = read_csv_or_none(Path(study_dir) / "points.csv")
    if pts is None or pts.empty:
        return []
    pairs = read_csv_or_none(Path(study_dir) / "pairs.csv")
    idle = pts[pts.load == "idle"] if (pts.load == "idle").any() else pts
    out = []
    for name, g in idle[idle.kind == "s3"].groupby("target", sort=False):
        best = {op: g[g.op == op].sort_values("throughput_mb_per_s").iloc[-1] for op in ("get", "put") if (g.op == op).any()}
        answer = ", ".join(f"{op.upper()} {r.throughput_mb_per_s:,.0f} MB/s ({size_label(int(r.object_bytes))} × "
                           f"{int(r.concurrency)})" for op, r in best.items())
        basis = "best idle point, median of repeats"
        p = pairs[pairs.s3_target == name] if pairs is not None and not pairs.empty else None
        if p is not None and len(p):
            ratio = p.s3_vs_directory.dropna()
            basis += (f"; {ratio.min():.2f}–{ratio.max():.2f} × the directory '{p.directory_target.iloc[0]}' on the "
                      "same device" + _client_bound_note(p))
        lim = g[_texts(g.limited_by) != ""]
        if len(lim):
            basis += f"; {len(lim)} of {len(g)} points limited by the CPU, not the storage"
        ref = {op: r.reference_mb_per_s for op, r in best.items()
               if "reference_mb_per_s" in r and pd.notna(r.reference_mb_per_s)}
        if ref:
            basis += "; a compiled S3 client at the same points: " + ", ".join(
                f"{op.upper()} {v:,.0f} MB/s" for op, v in ref.items())
        runs = {op: at_point(frame, name, r, KEYS, "throughput_mb_per_s") for op, r in best.items()}
        before = {op: earlier(study_dir, MEASURE[op], name) for op in best}
        answer = ", ".join(f"{op.upper()} {r.throughput_mb_per_s:,.0f} MB/s ({size_label(int(r.object_bytes))} × "
                           f"{int(r.concurrency)}; {spread(runs[op], '{:,.0f}', before[op])})" for op, r in best.items())
        out.append({"question": "Object store throughput (S3 GET / PUT)", "target": name, "answer": answer,
                    "short": ", ".join(f"{op.upper()} {r.throughput_mb_per_s:,.0f} MB/s ({spread_cell(runs[op], '{:,.0f}', before[op])})"
                                       for op, r in best.items()),
                    "measures": {MEASURE[op]: runs[op] for op in best},
                    "note": "best idle point: " + ", ".join(f"{op.upper()} at {size_label(int(r.object_bytes))} "
                                                            f"objects × {int(r.concurrency)} in flight"
                                                            for op, r in best.items()),
                    "basis": basis + "; object sweep"})
    return out


# The brief's optional parts this study does not have (core/contract.py BriefRoom).
trace_workloads = None
