"""checkpoint arithmetic: per-operation figures, the run's row, MLPerf's summary.json, headlines.

Per operation (one save or one restore by every rank from one barrier), with start/end of each
rank from the barrier's release:
  rank0_s     rank 0's own duration (end - start): the clock MLPerf's figure stops on;
  max_rank_s  the last rank's end: the honest duration (until every rank's fsync returned);
  min_rank_s  the first rank's end; rank skew = max_rank_s - min_rank_s.
MLPerf-style GiB/s = mean over operations of all ranks' bytes / rank0_s (DLIO's, no barrier before
its clock stops); honest GiB/s = mean over operations of bytes / max_rank_s. sd: numpy's std
(population), as DLIO's summary uses. GiB = 2^30 bytes, which MLPerf writes "GB".
"""
from __future__ import annotations

import math

import numpy as np

from ...core.checkpoint_workloads import GIB, workload
from ...core.columns import Column
from ...kit import runs
from ...report.headlines import versus_reference


COLUMNS: tuple[Column, ...] = (
    Column("sweep", "", "which sweep the run belongs to: protocol (MLPerf's saves then restores)", "text"),
    Column("model", "", "the llama3 checkpoint workload (core.checkpoint_workloads)", "text"),
    Column("ranks", "", "the model's rank count (tp·pp·dp)"),
    Column("writers", "", "ranks that wrote (and read) on this host: all of them, or 8 in subset mode"),
    Column("zero_stage", "", "ZeRO stage of the layout (3: every rank a share; 1: dp rank 0 writes the model)"),
    Column("mode", "", "default (every rank) or subset (ranks 0..7 of the full layout)", "text"),
    Column("scale", "", "every file's size divided by this (1 = MLPerf's sizes), rounded to 4 KiB pages"),
    Column("checkpoint_bytes", "bytes", "bytes of one checkpoint as written (at scale)"),
    Column("files", "", "files in one checkpoint folder"),
    Column("saves", "", "checkpoints written in the run"),
    Column("restores", "", "checkpoints read back in the run"),
    *(c for op, word in (("save", "written"), ("load", "read")) for c in (
        Column(f"mlperf_{op}_gib_per_s", "GiB/s", f"MLPerf-style: mean over checkpoints of bytes {word} ÷ rank 0's "
                                                  "own duration (no barrier before its clock stops)"),
        Column(f"honest_{op}_gib_per_s", "GiB/s", f"mean over checkpoints of bytes {word} ÷ the time from the "
                                                  "barrier until the last rank finished"
                                                  + (" (its fsync returned)" if op == "save" else "")),
        Column(f"{op}_overstatement_ratio", "", f"mlperf_{op}_gib_per_s ÷ honest_{op}_gib_per_s (> 1: MLPerf "
                                                "overstates)"),
        Column(f"{op}_duration_s_mean", "s", "mean over checkpoints of the honest duration (last rank's end)"),
        Column(f"{op}_duration_s_sd", "s", "population sd of the honest duration over checkpoints"),
        Column(f"{op}_rank0_s_mean", "s", "mean over checkpoints of rank 0's own duration (MLPerf's clock)"),
        Column(f"{op}_rank_skew_s_mean", "s", "mean over checkpoints of last rank's end − first rank's end"),
    )),
    Column("delete_s_mean", "s", "mean time to delete one checkpoint beyond `retain` (off the save's clock); "
                                 "empty when none was deleted"),
    Column("deletes", "", "checkpoints deleted in the run (retain)"),
    Column("generator_gb_per_s", "GB/s", "os.urandom's own rate on this host (10^9 B/s), measured once"),
    Column("fsync_calls", "", "fsync calls the ranks issued in the run (one per file, one per folder per rank)"),
)
REQUIRED = ("model", "mode", "scale", "writers", "checkpoint_bytes", "mlperf_save_gib_per_s",
            "honest_save_gib_per_s", "save_overstatement_ratio", "save_duration_s_mean", "save_rank_skew_s_mean",
            "mlperf_load_gib_per_s", "honest_load_gib_per_s", "load_overstatement_ratio")
RUNS_COLUMNS = {n: "text" if c.kind == "text" else "number" for n in REQUIRED for c in COLUMNS if c.name == n}


# --------------------------------------------------------------------------- per operation
def op_rows(ops) -> list[dict]:
    """checkpoints.csv: one row per save / restore."""
    out = []
    for op, index, step, release, got in ops:
        ends = [r.end - release for r in got]
        r0 = next(r for r in got if r.rank == min(x.rank for x in got))
        nbytes = sum(r.bytes for r in got)
        rank0_s, max_s = r0.end - r0.start, max(ends)
        out.append({"op": op, "index": index, "step": step, "bytes": nbytes, "files": sum(r.files for r in got),
                    "rank0_s": rank0_s, "max_rank_s": max_s, "min_rank_s": min(ends),
                    "rank_skew_s": max_s - min(ends), "mlperf_gib_per_s": nbytes / GIB / rank0_s,
                    "honest_gib_per_s": nbytes / GIB / max_s, "fsync_calls": sum(r.fsyncs for r in got)})
    return out


def rank_rows(ops) -> list[dict]:
    """ranks.csv: one row per operation per rank (times from the operation's barrier release)."""
    return [{"op": op, "index": index, "step": step, "rank": r.rank, "source_rank": r.source_rank,
             "bytes": r.bytes, "files": r.files, "start_s": r.start - release, "end_s": r.end - release,
             "seconds": r.end - r.start, "fsync_calls": r.fsyncs, "start_monotonic": r.start,
             "end_monotonic": r.end}
            for op, index, step, release, got in ops for r in got]


def _std(values) -> float:
    return float(np.std(values)) if len(values) else math.nan


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def run_row(p, model: str, ops, deletes: list[float], generator_gb_per_s: float) -> dict:
    w = workload(model)
    rows = op_rows(ops)
    saves = [r for r in rows if r["op"] == "save"]
    row = {"sweep": "protocol", "model": model, "ranks": w.ranks, "writers": len(p.writers(model)),
           "zero_stage": w.zero_stage, "mode": p.mode, "scale": p.scale, "checkpoint_bytes": p.checkpoint_bytes(model),
           "files": saves[0]["files"] if saves else 0, "saves": p.saves, "restores": p.restores}
    for op in ("save", "load"):
        these = [r for r in rows if r["op"] == op]
        mlperf = _mean([r["mlperf_gib_per_s"] for r in these])
        honest = _mean([r["honest_gib_per_s"] for r in these])
        row.update({f"mlperf_{op}_gib_per_s": mlperf, f"honest_{op}_gib_per_s": honest,
                    f"{op}_overstatement_ratio": mlperf / honest if these else math.nan,
                    f"{op}_duration_s_mean": _mean([r["max_rank_s"] for r in these]),
                    f"{op}_duration_s_sd": _std([r["max_rank_s"] for r in these]),
                    f"{op}_rank0_s_mean": _mean([r["rank0_s"] for r in these]),
                    f"{op}_rank_skew_s_mean": _mean([r["rank_skew_s"] for r in these])})
    row.update({"delete_s_mean": _mean(deletes), "deletes": len(deletes), "generator_gb_per_s": generator_gb_per_s,
                "fsync_calls": sum(r["fsync_calls"] for r in rows)})
    return row


# --------------------------------------------------------------------------- MLPerf's summary.json
def _summary(g) -> dict:
    out: dict = {}
    for op, word in (("save", "save"), ("load", "load")):
        s = g[g.op == op]
        rate0 = (s.bytes / GIB / s.rank0_s).tolist()
        honest = (s.bytes / GIB / s.max_rank_s).tolist()
        out.update({f"{word}_checkpoint_io_mean_GB_per_second": _mean(rate0),
                    f"{word}_checkpoint_io_stdev_GB_per_second": _std(rate0),
                    f"{word}_checkpoint_duration_mean_seconds": _mean(s.rank0_s.tolist()),
                    f"{word}_checkpoint_duration_stdev_seconds": _std(s.rank0_s.tolist())})
        out.update({f"honest_{word}_checkpoint_io_mean_GB_per_second": _mean(honest),
                    f"honest_{word}_checkpoint_io_stdev_GB_per_second": _std(honest),
                    f"honest_{word}_checkpoint_duration_mean_seconds": _mean(s.max_rank_s.tolist()),
                    f"honest_{word}_checkpoint_duration_stdev_seconds": _std(s.max_rank_s.tolist()),
                    f"{word}_rank_skew_mean_seconds": _mean(s.rank_skew_s.tolist())})
    saves = g[g.op == "save"]
    out["checkpoint_size_GB"] = float(saves.bytes.iloc[0] / GIB) if len(saves) else math.nan
    out["checkpoints"] = int(len(saves))
    out["restores"] = int(len(g) - len(saves))
    out["runs"] = int(g.run_id.nunique())
    return out


def mlperf_summary(ckpts) -> dict:
    """{target: {model: summary}}: MLPerf's keys exactly (rank 0's clock, "GB" = GiB) and ours beside
    them (honest_*: the last rank's end; *_rank_skew_*), over every checkpoint of the target's runs."""
    if ckpts is None or ckpts.empty:
        return {}
    out: dict = {}
    for (t, m), g in ckpts.groupby(["target", "model"]):
        out.setdefault(t, {})[m] = _summary(g)
    return out


def best_write_gb_per_s(ckpts, target: str) -> float:
    """The target's fastest honest save (GB/s, 10^9), 0 when it has none."""
    if ckpts is None or ckpts.empty:
        return 0.0
    s = ckpts[(ckpts.target == target) & (ckpts.op == "save")]
    return float((s.bytes / s.max_rank_s).max() / 1e9) if len(s) else 0.0


# --------------------------------------------------------------------------- headlines
def headlines(frame, target_names: list[str]) -> list[dict]:
    return versus_reference(frame, target_names, ["model", "mode", "scale"],
                            [("honest_save_gib_per_s", "higher", "Checkpoint save (honest GiB/s)"),
                             ("honest_load_gib_per_s", "higher", "Checkpoint restore (honest GiB/s)"),
                             ("save_duration_s_mean", "lower", "Checkpoint save time")])


def _per_target(g) -> dict:
    return {m: {"mlperf_save_gib_per_s": float(x.mlperf_save_gib_per_s.mean()),
                "honest_save_gib_per_s": float(x.honest_save_gib_per_s.mean()),
                "mlperf_load_gib_per_s": float(x.mlperf_load_gib_per_s.mean()),
                "honest_load_gib_per_s": float(x.honest_load_gib_per_s.mean())}
            for m, x in g.groupby("model")}


def metrics(frame, target_names: list[str]) -> dict:
    return runs.metrics(frame, target_names, headlines, _per_target)
