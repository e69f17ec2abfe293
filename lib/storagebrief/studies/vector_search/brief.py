"""The vector-search section of the brief: what ran, measured vs predicted QPS per point with its recall, the
best QPS at the recall floor per target, reads per query from three sources, the uniform control (why v3.0's
recall is low) and what limited each point; page 1: QPS at recall >= the floor, reads per query, the
device's prediction."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...kit import mlpstorage_verdict
from ...kit.files import read_csv_or_none, read_json_or
from ...kit.history import earlier
from ...kit.runs import at_point, open_section
from ...report.display import analysis, show_figure, show_md, show_table, target_colors
from ...report.words import plural, spread, spread_cell
from .metrics import KEYS, best_at_floor

SIDE_FILES = {"study.json": "what ran and the data sets", "points.csv": "every point's figures",
              "probes.csv": "the device's IOPS behind each prediction"}


def section(study_dir: Path, frame, names: list[str]) -> None:
    opened = open_section(study_dir, frame, SIDE_FILES, "No vector-search points were measured.")
    if opened is None:
        return
    study, pts = opened
    study_dir = Path(study_dir)
    floor = float(study.get("recall_floor", 0.95))
    _what_ran(study, pts)
    clustered = pts[pts.data == "clustered"]
    _figure(clustered, [n for n in names if n in set(clustered.target)])
    cols = {"target": "target", "search_list": "L", "beam_width": "W", "threads": "threads", "recall_at_k": "recall",
            "queries": "queries", "qps": "QPS", "qps_ci95_percent": "± %", "queue_depth": "reads in flight",
            "qps_predicted": "QPS predicted", "prediction_error": "error", "regime": "regime",
            "reads_per_query_engine": "reads/q engine", "reads_per_query_process": "reads/q process",
            "reads_per_query_block": "reads/q block", "latency_ms_p50": "p50 ms", "latency_ms_p99": "p99 ms",
            "latency_ms_p999": "p99.9 ms", "resident_index_pages": "cached pages", "limited_by": "limited by"}
    t = clustered[[c for c in cols if c in clustered]].rename(columns=cols)
    t["recall"] = [f"{r:.3f}" + (" (below floor)" if r < floor else "") for r in clustered.recall_at_k]
    t["error"] = [f"{e:+.0%}" for e in clustered.prediction_error]
    show_table(t, f"Every clustered point (median over repeats): recall@{study.get('k', 10)}, QPS measured and "
                  "(± its 95 % confidence half-width from the queries it ran) and predicted from the device's 4 KiB "
                  "random-read IOPS at the reads the point kept in flight (measured), from fio's reads in the "
                  "search's pattern (threads jobs, beams of W) on the same index file, ÷ the engine's reads per "
                  "query; per-query latency percentiles; pages of the index cached after the run",
               floatfmt="{:,.2f}")
    _uniform(pts)
    if verdict := mlpstorage_verdict.paragraph(study_dir, "vector_database"):    # MLPerf's code on the runs
        show_md(verdict)
    _analysis(pts, floor, study)


def _what_ran(study: dict, pts) -> None:
    sets = study.get("sets", {})
    one = next(iter(sets.values()), {}).get("clustered", {})
    show_md(
        f"**What ran.** {study.get('engine', 'DiskANN')} ({study.get('index_type', '')}): {study.get('num_vectors', 0):,}"
        f" vectors × {study.get('dimension')} float32, graph degree {study.get('graph_degree')}, "
        f"{study.get('pq_chunks')} PQ bytes per vector in memory; index {one.get('index_bytes', 0) / 1e6:,.1f} MB on "
        f"each target, built in {one.get('build_seconds', float('nan')):.1f} s. Queries are database vectors plus "
        "small noise (v3.0's planted mode), searched one at a time per thread and timed one by one; the index "
        "files are evicted before every run, and the engine reads them with O_DIRECT (the cached-pages column "
        "proves it). Reads per query come from the engine's count, the search process's /proc/self/io and the "
        "block layer (the run's cgroup counters, else the device's diskstats).")


def _figure(pts, names: list[str]) -> None:
    import matplotlib.pyplot as plt

    if pts.empty:
        return
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    colors = target_colors(names)
    for (name, w), g in pts.groupby(["target", "beam_width"]):
        g = g[g.threads == g.threads.min()].sort_values("recall_at_k")
        ax.plot(g.recall_at_k, g.qps, marker="o", color=colors.get(name), label=f"{name} W{int(w)} measured")
        ax.plot(g.recall_at_k, g.qps_predicted, marker="x", linestyle=":", color=colors.get(name),
                label=f"{name} W{int(w)} predicted")
    ax.set_yscale("log")
    ax.set_xlabel("recall@k")
    ax.set_ylabel("queries/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    show_figure(fig, "QPS against recall, measured (solid) and predicted from the device's IOPS (dotted), one "
                     "line per target and beam width")
    plt.close(fig)


def _uniform(pts) -> None:
    u, c = pts[pts.data == "uniform"], pts[pts.data == "clustered"]
    if u.empty:
        return
    rows = []
    for r in u.itertuples():
        like = c[(c.target == r.target) & (c.search_list == r.search_list) & (c.beam_width == r.beam_width)
                 & (c.threads == r.threads)]
        rows.append({"target": r.target, "L": r.search_list, "recall uniform": r.recall_at_k,
                     "recall clustered": like.recall_at_k.iloc[0] if len(like) else None,
                     "reads/q uniform": r.reads_per_query_engine,
                     "reads/q clustered": like.reads_per_query_engine.iloc[0] if len(like) else None})
    show_table(pd.DataFrame(rows), "The control: uniform random vectors and queries (v3.0's data) against the "
                                   "clustered set at like L: the storage reads as much, recall does not follow",
               floatfmt="{:,.2f}")


def _analysis(pts, floor: float, study: dict) -> None:
    lines = []
    best = best_at_floor(pts, floor)
    for r in best.itertuples():
        lines.append(f"- '{r.target}': best {_rate(r.qps)} queries/s at recall {r.recall_at_k:.3f} (L {int(r.search_list)}"
                     f", W {int(r.beam_width)}, {plural(int(r.threads), 'thread')}); {r.reads_per_query_engine:.1f} reads per "
                     f"query; the device's IOPS predict {_rate(r.qps_predicted)} ({r.prediction_error:+.0%}, "
                     f"{r.regime}).")
    c = pts[pts.data == "clustered"]
    missing = sorted(set(c.target) - set(best.target))
    if missing:
        lines.append(f"- No point reached recall {floor} on {', '.join(missing)}: no QPS is an answer there.")
    low = c[c.recall_at_k < floor]
    lines.append(f"- {len(low)} of {len(c)} clustered points fall below the recall floor {floor}: their QPS is shown "
                 "with its recall, never as an answer.")
    off = c[~c.reads_agree.astype(bool)]
    lines.append(f"- Reads per query from the engine, the process and the block layer agree within 5 % at "
                 f"{len(c) - len(off)} of {len(c)} points" + (f" (not at {len(off)}: see the table)." if len(off)
                                                               else "."))
    unmeasured = c[c.reads_per_query_block.isna()] if "reads_per_query_block" in c else c.iloc[:0]
    if len(unmeasured):
        lines.append(f"- The block layer's reads were not measured at {len(unmeasured)} of {len(c)} points (no block "
                     "device behind the target, as on tmpfs): the engine's and the process's counts stand alone there.")
    cpu = c[c.regime == "CPU-bound"]
    if len(cpu):
        lines.append(f"- {plural(len(cpu), 'point')} {'was' if len(cpu) == 1 else 'were'} CPU-bound (I/O under half of query latency): there the measured "
                     "QPS is below the device's prediction and is the client's figure, not the storage's.")
    cached = c[c.resident_index_pages > 0]
    lines.append("- The index stayed out of the page cache at every point (0 pages after each run)." if cached.empty
                 else f"- {plural(len(cached), 'point')} left index pages in the page cache: their reads were not all "
                      "from the device.")
    analysis(lines)


def _rate(qps: float) -> str:
    """Queries/s with the digits that matter: 306, 2.6."""
    return f"{qps:,.0f}" if qps >= 100 else f"{qps:.1f}"


def _at(r) -> str:
    """The point behind the answer: its L and how many queries it ran (a points.csv of before them: L only)."""
    q = r.get("queries")
    return f"L {int(r.search_list)}" + (f", {int(q)} queries" if q is not None and q == q else "")


def _quote(study: dict, r, floor: float) -> dict:
    """Page 1's quotable finding (brief/quotes.py): '189 queries/s (L 100, 1 thread)' under 'Vector search at
    recall ≥ 0.95 (20,000 vectors of 64 dimensions)'."""
    n, dim = study.get("num_vectors"), study.get("dimension")
    size = (f" ({n:,} vectors" + (f" of {dim} dimensions" if isinstance(dim, int) else "") + ")"
            if isinstance(n, int) else "")
    return {"lead": f"Vector search at recall ≥ {floor}{size}",
            "says": f"{_rate(r.qps)} queries/s (L {int(r.search_list)}, {plural(int(r.threads), 'thread')})"}


MEASURE = "queries/s at the recall floor"     # kit/history: earlier studies' runs of this answer


def answers(study_dir: Path, frame, names: list[str]) -> list[dict]:
    """Page 1: per target, the best QPS at recall >= the floor, its reads per query and the device's prediction."""
    study = read_json_or(Path(study_dir) / "study.json", {})
    pts = read_csv_or_none(Path(study_dir) / "points.csv")
    if pts is None or pts.empty:
        return []
    floor = float(study.get("recall_floor", 0.95))
    best = best_at_floor(pts, floor).set_index("target")
    out = []
    for name in [n for n in names if n in set(pts.target)]:
        if name in best.index:
            r = best.loc[name]
            qps_runs = at_point(frame, name, r, KEYS, "qps")
            before = earlier(study_dir, MEASURE, name)
            at = _at(r)
            answer = (f"at recall ≥ {floor} this storage serves {_rate(r.qps)} queries/s per client at {at} "
                      f"({spread(qps_runs, _rate, before)}); each query costs "
                      f"{r.reads_per_query_engine:.0f} reads; the device's IOPS predict {_rate(r.qps_predicted)}")
            basis = (f"recall {r.recall_at_k:.3f}, L {int(r.search_list)}, beam width {int(r.beam_width)}, "
                     f"{plural(int(r.threads), 'thread')}, {r.regime} ({r.prediction_error:+.0%}); vector search")
        else:
            answer, basis = f"no point reached recall {floor}", "vector search: raise search_list"
        cell = ({"short": f"{_rate(r.qps)} queries/s at L {int(r.search_list)} "
                          f"({spread_cell(qps_runs, _rate, before)})",
                 "measures": {MEASURE: qps_runs}, "quote": _quote(study, r, floor),
                 "note": f"{at}; {r.reads_per_query_engine:.0f} reads per query; "
                 f"the device's IOPS predict {_rate(r.qps_predicted)} queries/s"} if name in best.index
                else {"short": "recall not reached", "note": f"no point reached recall {floor}"})
        out.append({"question": f"Vector search: queries/s at recall ≥ {floor}", "target": name, "answer": answer,
                    "basis": basis, **cell})
    return out


# The brief's optional parts this study does not have (core/contract.py BriefRoom).
trace_workloads = None
