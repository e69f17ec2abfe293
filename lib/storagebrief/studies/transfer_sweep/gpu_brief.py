"""The transfer sweep's GPU section, in the shape of Micron's GDS brief: GDS vs legacy (or why only legacy),
idle vs busy, CPU cores per GB/s for every path, and ours ÷ fio's libcufile engine. Rendered from the
points (repeats merged) and the GPU facts the study recorded; without a GPU, one line says why."""
from __future__ import annotations

import pandas as pd

from ...report.display import show_md, show_table
from ...report.words import plural
from . import gpu
from .params import size_label

OUR_LABEL = {"gds": "GDS (kvikio, cuFile direct)", "legacy": "legacy (kvikio compat: host bounce buffer)",
             "legacy-pread": "legacy (pread → pinned host → cudaMemcpyAsync)",
             "gds-fio": "fio libcufile cuda_io=cufile", "legacy-fio": "fio libcufile cuda_io=posix",
             "cpu": "cpu (fio into host memory)"}


def section(study: dict, pts: pd.DataFrame) -> None:
    info = study.get("gpu") or {}
    g = pts[pts.path != "cpu"] if "path" in pts else pts.iloc[0:0]
    if not info.get("available") or g.empty:
        why = info.get("reason") or ("no GPU point completed" if info.get("available") else "no GPU information")
        show_md(f"**GPU path.** Not measured: {why}.")
        return
    show_md(_what_ran(info, study, set(g.path)))
    if memory := _memory_served(g):
        show_md(memory)
    show_md(_gds_vs_legacy(info, g))
    _table(_pivot(g[g.path.isin(gpu.OURS)], "throughput_mb_per_s_mean"),
           "GPU paths: throughput MB/s per path (means over repeats).")
    loads = set(g.load)
    if {"idle", "busy"} <= loads:
        _table(_idle_busy(g), "GPU paths idle vs busy: MB/s and the busy ÷ idle ratio.")
    if "cpu_cores_per_gb_per_s_mean" in pts:
        one = pts[pts.load == ("idle" if "idle" in set(pts.load) else "busy")]
        _table(_pivot(one, "cpu_cores_per_gb_per_s_mean", paths=["cpu", *gpu.OURS, *gpu.FIO_PATHS]),
               "CPU cores per GB/s moved, every path (process CPU time over the measured window ÷ GB read; "
               "lower frees more CPU). fio paths: fio's own usr+sys accounting; ours: the worker's rusage.",
               fmt="{:,.2f}")
    show_md(_reference(g))


def _what_ran(info: dict, study: dict, paths: set[str]) -> str:
    gds = info.get("gdscheck_verdict")
    return (f"**GPU path.** {', '.join(info.get('gpus', []))}; driver CUDA {info.get('driver_cuda_version')}, "
            f"kvikio {info.get('kvikio')}, cupy {info.get('cupy')}. Paths measured: "
            f"{', '.join(OUR_LABEL.get(p, p) for p in sorted(paths))}. Each point keeps its queue depth in flight "
            "(a thread per slot issues the next request as its last completes; kvikio's pool sized to the QD, "
            "`KVIKIO_NTHREADS`), latency is per request (fio's histogram buckets; p99 over all repeats' requests), "
            "and which path ran is kvikio's own report (`gpu_path_ran`). "
            + (f"`gdscheck -p`: {gds}." if gds else "No gdscheck on this machine."))


def _gds_vs_legacy(info: dict, g: pd.DataFrame) -> str:
    if "gds" not in set(g.path):
        return ("**GDS vs legacy.** GDS unavailable on this machine: legacy measured (kvikio reports GDS "
                f"{'available' if info.get('kvikio_gds_available') else 'not available'}, compat mode "
                f"{'preferred' if info.get('kvikio_compat_mode_preferred') else 'not preferred'}), so no row is "
                "labelled gds.")
    m = g[g.path.isin(["gds", "legacy"]) & ~_served(g)].pivot_table(index=["load", "block_size_bytes", "queue_depth"],
                                                      columns="path", values="throughput_mb_per_s_mean")
    m = m.dropna()
    if m.empty:
        return "**GDS vs legacy.** No point has both paths."
    r = m.gds / m.legacy
    best = r.idxmax()
    return (f"**GDS vs legacy.** GDS ÷ legacy throughput ranges {r.min():.2f}–{r.max():.2f}× over {len(r)} points; "
            f"largest at {best[0]} {size_label(int(best[1]))} QD {int(best[2])}.")


def _pivot(g: pd.DataFrame, col: str, paths: list[str] | None = None) -> pd.DataFrame:
    have = [p for p in (paths or list(gpu.OURS)) if p in set(g.path)]
    t = g[g.path.isin(have)].pivot_table(index=["load", "block_size_bytes", "queue_depth"], columns="path",
                                         values=col)
    t = t[[p for p in have if p in t.columns]].reset_index()
    t.insert(1, "Size", t.pop("block_size_bytes").map(lambda b: size_label(int(b))))
    return t.rename(columns={"load": "Load", "queue_depth": "QD"})


def _idle_busy(g: pd.DataFrame) -> pd.DataFrame:
    m = g.pivot_table(index=["path", "block_size_bytes", "queue_depth"], columns="load",
                      values="throughput_mb_per_s_mean").dropna().reset_index()
    return pd.DataFrame({"Path": m.path, "Size": m.block_size_bytes.map(lambda b: size_label(int(b))),
                         "QD": m.queue_depth, "idle MB/s": m.idle, "busy MB/s": m.busy,
                         "busy ÷ idle": m.busy / m.idle})


def _served(g: pd.DataFrame) -> pd.Series:
    """The points memory served part of (served.py), as a mask."""
    return g.not_the_storage.notna() if "not_the_storage" in g else pd.Series(False, index=g.index)


def _memory_served(g: pd.DataFrame) -> str:
    """One sentence naming every point whose figure the page cache made, or ''."""
    bad = g[_served(g)]
    if bad.empty:
        return ""
    where = "; ".join(f"{r.path} {size_label(int(r.block_size_bytes))} × {int(r.queue_depth)} ({r.load}): "
                      f"the device read {r.device_bytes_per_delivered_byte_mean:.0%} of the bytes delivered"
                      for r in bad.itertuples())
    return (f"**Not the storage's figure.** At {plural(len(bad), 'point')} the page cache served part of the reads, so "
            f"their MB/s is part memory: {where}. Their ratios to fio are left out below.")


def _reference(g: pd.DataFrame) -> str:
    if "throughput_ratio_to_fio" not in g or g.throughput_ratio_to_fio.dropna().empty:
        return ("**Ours ÷ fio.** Not measured: this fio build has no libcufile engine (`fio --enghelp`); "
                "`make gpu` builds one where CUDA's headers and libcufile are present.")
    r = g[~_served(g)].dropna(subset=["throughput_ratio_to_fio"])
    if r.empty:
        return "**Ours ÷ fio.** Every point with a fio reference was served in part by the page cache (above)."
    parts = [f"{p} ÷ {r[r.path == p].reference_path.iloc[0]}: {r[r.path == p].throughput_ratio_to_fio.min():.2f}–"
             f"{r[r.path == p].throughput_ratio_to_fio.max():.2f}×" for p in sorted(set(r.path))]
    return ("**Ours ÷ fio (libcufile, same points, same file).** " + "; ".join(parts)
            + f". Goal ≥ 0.90 at QD ≥ 8 for 128K and 1M (benchmarks/gpu_vs_fio.py prints every point).")


def _table(t: pd.DataFrame, caption: str, fmt: str = "{:,.1f}") -> None:
    if not t.empty:
        show_table(t, caption, floatfmt=fmt)
