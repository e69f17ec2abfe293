"""checkpoint arithmetic: per-operation figures, the run's row, MLPerf's summary.json, headlines.

Per operation (one save or one restore by every rank from one barrier), with start/end of each
rank from the barrier's release:
  rank0_s     rank 0's own duration (end - start): the clock MLPerf's figure stops on;
  max_rank_s  the last rank's end: the honest duration (until every rank's fsync returned);
  min_rank_s  the first rank's end; rank skew = max_rank_s - min_rank_s.
MLPerf-style GiB/s = mean over operations of all ranks' bytes / rank0_s (DLIO's, no barrier before
its clock stops); honest GiB/s = mean over operations of bytes / max_rank_s. sd: numpy's std
(population), as DLIO's summary uses. GiB = 2^30 bytes, which MLPerf writes "GB".

The cost sweep's rows (sweep = cost) come from cost.py; intervals() turns the protocol's honest rates
and the cost sweep's snapshot rate into the shortest checkpoint interval per llama3 model at full size.
"""
from __future__ import annotations

import math
import socket

import numpy as np

from ...core.checkpoint_workloads import GIB, WORKLOADS, checkpoint_bytes, workload
from ...core import columns
from ...core.columns import Column
from ...kit import client_check, runs
from ...kit.latency import add_histograms, bin_edges_us, histogram_percentile_us, new_histogram
from ...kit.checkpoint_cost import restore_s, shortest_interval_for_overhead
from ...report.headlines import versus_reference
from .framework import COLUMNS as FRAMEWORK_COLUMNS


COLUMNS: tuple[Column, ...] = (
    Column("sweep", "", "which sweep the run belongs to: protocol (MLPerf's saves then restores), cost (what "
                        "checkpointing costs an emulated training loop) or framework (TensorFlow's own "
                        "checkpoints of a BERT-shaped model)", "text"),
    Column("model", "", "the llama3 checkpoint workload (core.checkpoint_workloads); cost: whose checkpoint "
                        "size (at scale) the loop saves; framework: bert", "text"),
    Column("ranks", "", "the model's rank count (tp·pp·dp)"),
    Column("writers", "", "ranks that wrote (and read) on this host: all of them, or 8 in subset mode"),
    Column("zero_stage", "", "ZeRO stage of the layout (3: every rank a share; 1: dp rank 0 writes the model)"),
    Column("mode", "", "protocol: default (every rank) or subset (ranks 0..7 of the full layout)", "text"),
    Column("save_mode", "", "cost: none (the baseline, no checkpoint), sync (training waits for the fsync) or "
                            "async (an in-memory snapshot, persisted in the background)", "text"),
    Column("scale", "", "every file's size divided by this (1 = MLPerf's sizes), rounded to 4 KiB pages"),
    Column("checkpoint_bytes", "bytes", "bytes of one checkpoint as written (at scale)"),
    Column("files", "", "files in one checkpoint folder"),
    Column("interval_steps", "steps", "cost: a checkpoint after every this many steps (empty for none)"),
    Column("steps", "steps", "cost: training steps in the run"),
    Column("compute_s", "s", "cost: emulated accelerator compute per step (the documented sleep)"),
    Column("checkpoints", "", "cost: checkpoints taken in the run"),
    Column("training_time_s", "s", "cost: first step to the end of the job (async: until the last checkpoint "
                                   "is durable)"),
    Column("baseline_training_time_s", "s", "cost: training_time_s of the same target's mode-none run (same "
                                            "repeat)"),
    Column("overhead_percent", "%", "cost: (training_time_s − baseline_training_time_s) ÷ "
                                    "baseline_training_time_s × 100"),
    Column("stall_s_total", "s", "cost: training time lost at checkpoint steps (sync: the writes; async: "
                                 "snapshot and waits for the previous writer)"),
    Column("stall_s_per_checkpoint", "s", "cost: mean stall per checkpoint"),
    Column("persist_s_mean", "s", "cost: mean write + fsync time per checkpoint (files, folder, parent)"),
    Column("write_gib_per_s", "GiB/s", "cost: all checkpoints' bytes ÷ all their write + fsync time"),
    Column("snapshot_s_mean", "s", "cost, async: mean in-memory copy time per checkpoint"),
    Column("overlap_wait_s_total", "s", "cost, async: waits for the previous checkpoint's writer at "
                                        "checkpoint steps"),
    Column("final_wait_s", "s", "cost, async: after the last step, until the last checkpoint was durable"),
    Column("staging", "", "cost, async: the snapshot's memory, reused (allocated before the clock) or fresh",
           "text"),
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
        Column(f"{op}_duration_s_mean", "s", "mean over checkpoints of the measured duration (until the last rank's end)"),
        Column(f"{op}_duration_s_sd", "s", "population sd of the measured duration (until the last rank's end) over checkpoints"),
        Column(f"{op}_rank0_s_mean", "s", "mean over checkpoints of rank 0's own duration (MLPerf's clock)"),
        Column(f"{op}_rank_skew_s_mean", "s", "mean over checkpoints of last rank's end − first rank's end"),
    )),
    Column("save_io", "", "protocol: how the saves wrote: buffered (write() into the page cache, then fsync), direct "
                          "(O_DIRECT, checkpoint.save_io) or S3 (multipart uploads)", "text"),
    Column("memory_prep", "", "protocol: what was done to the host's memory before each save, so that every save "
                              "starts from the same state (core.memory_state: on a VM that reports free pages to "
                              "its host, a write into pages freed seconds ago costs a host fault per page)", "text"),
    Column("memory_prep_s_mean", "s", "protocol: mean seconds of that preparation per save (off every clock)"),
    Column("save_reporting_passes", "", "protocol: the kernel's free-page reporting passes between a preparation's "
                                        "end and its save's end, over the run (a pass there may have handed prepared "
                                        "pages back); empty where the kernel does not count them"),
    Column("save_write_phase_s_mean", "s", "protocol: mean over saves of the longest time a rank spent in write() "
                                           "(S3: part PUTs), by the ranks' own timers"),
    Column("save_fsync_phase_s_mean", "s", "protocol: mean over saves of the longest time a rank spent in fsync() "
                                           "(S3: the upload's create + complete)"),
    Column("delete_s_mean", "s", "mean time to delete one checkpoint beyond `retain` (off the save's clock); "
                                 "empty when none was deleted"),
    Column("deletes", "", "checkpoints deleted in the run (retain)"),
    Column("generator_gb_per_s", "GB/s", "the byte generator's own rate on this host (10^9 B/s, one core), measured once"),
    Column("fsync_calls", "", "fsync calls the ranks issued in the run (one per file, one per folder per rank)"),
    Column("launcher", "", "protocol: how the ranks ran: fork (processes on this host) or mpi (mpirun ranks)", "text"),
    Column("hosts", "", "protocol: hosts the ranks ran on"),
    Column("host_roles", "", "protocol: every host and its role: 'launcher <host>; ranks <host> ×N, …'", "text"),
    Column("rank_clock", "", "protocol: the clock the ranks' start and end are on (one host's CLOCK_MONOTONIC, "
                             "or per rank from the MPI barrier's release when ranks ran on other hosts)", "text"),
    *(Column(f"{call}_latency_us_{k}", "µs", f"protocol: {k} of every {what} call's latency over the run, from "
                                            "the ranks' log2 histograms (latency.csv), interpolated in its bin")
      for call, what in (("write", "write() (S3: part PUT)"), ("fsync", "fsync() (S3: the upload's create + "
                                                                          "complete requests)"),
                         ("read", "pread (S3: ranged GET)")) for k in ("p50", "p99")),
    Column("access", "", "protocol: how the ranks reached the target: files, S3 local gateway (versitygw over "
                         "the target's folder) or S3 external", "text"),
    Column("save_ends_at", "", "protocol: what ends a rank's save: 'fsync returned' (files) or the S3 store's "
                               "answer to the completed multipart upload (the local gateway does not fsync)", "text"),
    *(c for op in ("save", "load") for c in (
        Column(f"{op}_client_cpu_s_per_gb", "s/GB", f"protocol: the ranks' CPU seconds (user + system, all "
                                                    f"threads) per GB (10^9 B) moved in the {op}s"),
        Column(f"{op}_gateway_cpu_s_per_gb", "s/GB", f"protocol, local S3 gateway: its CPU seconds per GB in the "
                                                     f"{op}s (/proc, 10 ms ticks)"),
        Column(f"{op}_limited_by", "", f"protocol: what limited the {op}s when not the storage: 'client CPU' (a rank "
                                       "at ≥ 85 % of the cores it can use, one for a Python rank, on S3 a restore's "
                                       "readers for its compiled client, or the ranks together at ≥ 85 % of theirs "
                                       "or ≥ 80 % of all CPUs, over the measured durations, however busy the machine), "
                                       "'client + gateway CPU', 'machine CPU (N % busy)' (every CPU ≥ 90 % busy over "
                                       "the run, the ranks below their ceiling), or empty", "text"))),
    *FRAMEWORK_COLUMNS,
    *client_check.COLUMNS,
)
LATENCY_OPS = {"write": "save", "fsync": "save", "read": "load"}   # call -> the operation that makes it
REQUIRED = ("model", "mode", "scale", "writers", "checkpoint_bytes", "mlperf_save_gib_per_s",
            "honest_save_gib_per_s", "save_overstatement_ratio", "save_duration_s_mean", "save_rank_skew_s_mean",
            "mlperf_load_gib_per_s", "honest_load_gib_per_s", "load_overstatement_ratio")
RUNS_COLUMNS = columns.kinds(REQUIRED, COLUMNS)


# --------------------------------------------------------------------------- per operation
def op_rows(ops) -> list[dict]:
    """checkpoints.csv: one row per save / restore."""
    out = []
    for op, index, step, release, got in ops:
        ends = [r.end - release for r in got]
        r0 = next(r for r in got if r.rank == min(x.rank for x in got))
        nbytes = sum(r.bytes for r in got)
        rank0_s, max_s = r0.end - r0.start, max(ends)
        save = op == "save"
        out.append({"op": op, "index": index, "step": step, "bytes": nbytes, "files": sum(r.files for r in got),
                    "rank0_s": rank0_s, "max_rank_s": max_s, "min_rank_s": min(ends),
                    "rank_skew_s": max_s - min(ends), "mlperf_gib_per_s": nbytes / GIB / rank0_s,
                    "honest_gib_per_s": nbytes / GIB / max_s, "fsync_calls": sum(r.fsyncs for r in got),
                    # the save's phases: the longest any rank spent in write() (the copy into the page cache) and
                    # in fsync(), by the ranks' own timers (issue 45: the copy is where the VM's memory shows)
                    "write_phase_s": max(r.write_s for r in got) if save else math.nan,
                    "fsync_phase_s": max(r.fsync_s for r in got) if save else math.nan})
    return out


def rank_rows(ops) -> list[dict]:
    """ranks.csv: one row per operation per rank (times from the operation's barrier release)."""
    return [{"op": op, "index": index, "step": step, "rank": r.rank, "source_rank": r.source_rank,
             "bytes": r.bytes, "files": r.files, "start_s": r.start - release, "end_s": r.end - release,
             "seconds": r.end - r.start, "fsync_calls": r.fsyncs, "write_s": r.write_s, "fsync_s": r.fsync_s,
             "start_monotonic": r.start,
             "end_monotonic": r.end, "host": r.host or socket.gethostname()}
            for op, index, step, release, got in ops for r in got]


def _std(values) -> float:
    return float(np.std(values)) if len(values) else math.nan


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def latency_histograms(ops) -> dict[str, list[int]]:
    """Every rank's per-call histograms of the run, added up per call (write, fsync, read)."""
    out = {call: new_histogram() for call in LATENCY_OPS}
    for *_, got in ops:
        for r in got:
            for call, counts in r.latency.items():
                add_histograms(out[call], counts)
    return out


def latency_columns(hists: dict[str, list[int]]) -> dict:
    return {f"{call}_latency_us_{k}": histogram_percentile_us(counts, q)
            for call, counts in hists.items() for k, q in (("p50", 50), ("p99", 99))}


def latency_rows(hists: dict[str, list[int]]) -> list[dict]:
    """latency.csv: one row per call and non-empty bin [bin_low_us, bin_high_us)."""
    return [{"op": LATENCY_OPS[call], "call": call, "bin_low_us": bin_edges_us(i)[0],
             "bin_high_us": bin_edges_us(i)[1], "count": n}
            for call, counts in hists.items() for i, n in enumerate(counts) if n]


def host_roles(ops, pool) -> str:
    """'launcher h0; ranks h0 ×4, h1 ×4' (MPI) or 'ranks <this host> ×N' (forked)."""
    counts: dict[str, int] = {}
    for r in (ops[0][-1] if ops else []):
        host = r.host or socket.gethostname()          # forked ranks: this host
        counts[host] = counts.get(host, 0) + 1
    ranks = "ranks " + ", ".join(f"{h} ×{n}" for h, n in counts.items())
    launch = pool.launch_host if pool is not None and pool.launcher == "mpi" else None
    return f"launcher {launch}; {ranks}" if launch else ranks


def run_row(p, model: str, ops, deletes: list[float], generator_gb_per_s: float, pool=None) -> dict:
    """The protocol run's row; `pool` (ranks.RankPool) says the launcher and clock."""
    w = p.workload(model)
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
    row.update({"save_write_phase_s_mean": _mean([r["write_phase_s"] for r in saves]),
                "save_fsync_phase_s_mean": _mean([r["fsync_phase_s"] for r in saves]),
                "delete_s_mean": _mean(deletes), "deletes": len(deletes), "generator_gb_per_s": generator_gb_per_s,
                "fsync_calls": sum(r["fsync_calls"] for r in rows),
                "launcher": getattr(pool, "launcher", "fork"), "rank_clock": getattr(pool, "clock", ""),
                "hosts": len({r.host for *_, got in ops for r in got}), "host_roles": host_roles(ops, pool)})
    return {**row, **latency_columns(latency_histograms(ops))}


def cpu_columns(ops, gateway_s: dict, machine_busy_percent: float | None, s3_readers: int | None = None) -> dict:
    """Per op kind: the ranks' CPU per GB, the local gateway's (gateway_s: (op, index) -> seconds), and what
    limited it (kit/s3study's rule on the summed honest durations). s3_readers: on an S3 target, the GETs each
    rank's compiled client has in flight (rank_processes: the cores a rank can use)."""
    from ...kit.s3study import limited_by

    out: dict = {}
    for op in ("save", "load"):
        these = [(i, rel, got) for o, i, _, rel, got in ops if o == op]
        gb = sum(r.bytes for *_, got in these for r in got) / 1e9
        wall = sum(max(r.end for r in got) - rel for _, rel, got in these)
        client = sum(r.cpu_s for *_, got in these for r in got)
        gw = [gateway_s[(op, i)] for i, *_ in these if (op, i) in gateway_s]
        gw_s = sum(gw) if gw and len(gw) == len(these) else None
        out[f"{op}_client_cpu_s_per_gb"] = client / gb if gb > 0 else math.nan
        out[f"{op}_gateway_cpu_s_per_gb"] = gw_s / gb if gw_s is not None and gb > 0 else math.nan
        out[f"{op}_limited_by"] = limited_by({"wall_seconds": wall, "client_cpu_seconds": client,
                                              "gateway_cpu_seconds": gw_s,
                                              "client_processes": rank_processes(these, wall,
                                                                                 _rank_cores(op, s3_readers))},
                                             machine_busy_percent) if these else ""
    return out


def _rank_cores(op: str, s3_readers: int | None) -> float:
    """The cores one rank can keep busy: a directory's rank is one Python process (one core, its interpreter);
    an S3 rank's bytes move in its compiled client (core.s3mover), whose CPU its cpu_s counts: a save's parts go
    one after another (one core), a restore has s3_readers GETs in flight, within the CPUs it may use."""
    if s3_readers is None or op == "save":
        return 1.0
    from ...kit.client_bound import usable_cores
    return usable_cores(s3_readers, False)


def rank_processes(these, wall: float, cores: float = 1.0) -> list[dict]:
    """Each rank as one client process over the op's summed wall time (kit/client_bound), against the `cores` it can
    use (_rank_cores): a Python rank keeps at most one core busy, so one rank near it limits the op though the
    machine's other cores idle."""
    from ...kit.client_bound import ProcessCPU
    cpu: dict[int, float] = {}
    for *_, got in these:
        for r in got:
            cpu[r.rank] = cpu.get(r.rank, 0.0) + r.cpu_s
    return [ProcessCPU(c, wall, cores, label=f"rank {k}").as_dict() for k, c in sorted(cpu.items()) if wall > 0]


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
    """{target: {model: summary}}: MLPerf's keys exactly (rank 0's clock, "GB" = GiB) and ours (honest_*: the last
    rank's end; *_rank_skew_*), over every checkpoint of the target's runs; mlperf_tree.py puts MLPerf's keys of one
    run in its summary.json and ours in its storagebrief.json."""
    if ckpts is None or ckpts.empty:
        return {}
    out: dict = {}
    for (t, m), g in client_check.unchecked(ckpts).groupby(["target", "model"]):
        out.setdefault(t, {})[m] = _summary(g)
    return out


def best_write_gb_per_s(ckpts, target: str) -> float:
    """The target's fastest honest save (GB/s, 10^9), 0 when it has none."""
    if ckpts is None or ckpts.empty:
        return 0.0
    ckpts = client_check.unchecked(ckpts)
    s = ckpts[(ckpts.target == target) & (ckpts.op == "save")]
    return float((s.bytes / s.max_rank_s).max() / 1e9) if len(s) else 0.0


# --------------------------------------------------------------------------- headlines
def _sweep(frame, name: str):
    """The sweep's scored rows (the client check's re-runs left out)."""
    frame = client_check.unchecked(frame)
    if "sweep" not in frame:
        return frame if name == "protocol" else frame.iloc[0:0]
    rows = frame[frame.sweep == name]
    if name == "cost" and "save_mode" not in rows:        # only failed rows, written without the cost columns
        return rows.iloc[0:0]
    return rows


def headlines(frame, target_names: list[str]) -> list[dict]:
    out = versus_reference(_sweep(frame, "protocol"), target_names, ["model", "mode", "scale"],
                           [("honest_save_gib_per_s", "higher", "Checkpoint save (measured GiB/s)"),
                            ("honest_load_gib_per_s", "higher", "Checkpoint restore (measured GiB/s)"),
                            ("save_duration_s_mean", "lower", "Checkpoint save time")])
    cost = _sweep(frame, "cost")
    cost = cost[cost["save_mode"] != "none"] if len(cost) else cost
    if len(cost):
        out += versus_reference(cost, target_names, ["save_mode", "interval_steps"],
                                [("overhead_percent", "lower", "Training time lost to checkpoints")])
    return out


def _per_target(g) -> dict:
    out = {m: {"mlperf_save_gib_per_s": float(x.mlperf_save_gib_per_s.mean()),
               "honest_save_gib_per_s": float(x.honest_save_gib_per_s.mean()),
               "mlperf_load_gib_per_s": float(x.mlperf_load_gib_per_s.mean()),
               "honest_load_gib_per_s": float(x.honest_load_gib_per_s.mean())}
           for m, x in _sweep(g, "protocol").groupby("model")}
    cost = _sweep(g, "cost")
    cost = cost[cost["save_mode"] != "none"] if len(cost) else cost
    if len(cost):
        out["cost_overhead_percent"] = {f"{m}-every{int(k)}": float(x.overhead_percent.mean())
                                        for (m, k), x in cost.groupby(["save_mode", "interval_steps"])}
    return out


# --------------------------------------------------------------------------- the intervals
def _positive_mean(values) -> float | None:
    v = [float(x) for x in values if x == x and x > 0]
    return sum(v) / len(v) if v else None


def save_runs(ok, target: str) -> list[float]:
    """The positive honest save GiB/s of every protocol run on the target (target_rates' save rate is their mean)."""
    prot = _sweep(ok[ok.target == target], "protocol")
    return [float(x) for x in prot.get("honest_save_gib_per_s", []) if x == x and x > 0]


def target_rates(ok, target: str) -> dict:
    """The target's measured rates: honest save / restore GiB/s (all ranks' bytes ÷ the last rank's end,
    mean over protocol runs) and the async snapshot's in-memory copy GiB/s (one process, mean over
    async cost runs); None where nothing measured it."""
    t = ok[ok.target == target]
    prot, cost = _sweep(t, "protocol"), _sweep(t, "cost")
    snap = cost[(cost["save_mode"] == "async")] if len(cost) else cost
    return {"save_gib_per_s": _positive_mean(prot.get("honest_save_gib_per_s", [])),
            "load_gib_per_s": _positive_mean(prot.get("honest_load_gib_per_s", [])),
            "snapshot_gib_per_s": _positive_mean((snap.checkpoint_bytes / GIB / snap.snapshot_s_mean).tolist()
                                                 if len(snap) else [])}


def interval_row(target: str, model: str, rates: dict, limit_percent: float) -> dict:
    """One model at its full size and closed-division rank count on one target's measured rates. The
    save rate is one host's, extrapolated to the whole job's checkpoint (every rank writing to this one
    target): the upper bound for a single shared target. The snapshot: every rank copies its own share
    at once at the measured one-process rate (aggregate = rate × ranks)."""
    w = workload(model)
    nbytes = checkpoint_bytes(w)
    save, load, snap = rates["save_gib_per_s"], rates["load_gib_per_s"], rates["snapshot_gib_per_s"]
    sync_s = shortest_interval_for_overhead(save, nbytes, 1.0, limit_percent, "sync") if save else None
    async_s = (shortest_interval_for_overhead(save, nbytes, 1.0, limit_percent, "async",
                                              snapshot_gib_per_s=snap * w.ranks) if save and snap else None)
    return {"target": target, "model": model, "ranks": w.ranks, "checkpoint_bytes": nbytes,
            "checkpoint_gib": nbytes / GIB, **rates, "overhead_limit_percent": limit_percent,
            "sync_interval_s": sync_s, "async_interval_s": async_s,
            "restore_s": restore_s(nbytes, load) if load else None}


def intervals(frame, target_names: list[str], limit_percent: float) -> list[dict]:
    """Per target and llama3 model: the shortest checkpoint interval, in seconds of training, keeping the
    overhead ≤ limit_percent, sync and async (kit.checkpoint_cost.shortest_interval_for_overhead with
    step_s = 1 s), and the restore time at the honest load rate."""
    ok = runs.ok_runs(frame) if frame is not None and len(frame) else None
    if ok is None or ok.empty:
        return []
    rates = {t: target_rates(ok, t) for t in target_names}
    # the async snapshot is a copy in this host's memory, not the target's: a target the cost sweep did not
    # run on (an S3 target) borrows the host's measured copy rate
    snaps = [r["snapshot_gib_per_s"] for r in rates.values() if r["snapshot_gib_per_s"]]
    out = []
    for t in target_names:
        borrowed = not rates[t]["snapshot_gib_per_s"] and bool(snaps)
        r = {**rates[t], "snapshot_gib_per_s": max(snaps)} if borrowed else rates[t]
        out += [{**interval_row(t, m, r, limit_percent), "snapshot_from": "another target's cost sweep (host memory)"
                 if borrowed else "this target's cost sweep"} for m in WORKLOADS]
    return out


def metrics(frame, target_names: list[str]) -> dict:
    return runs.metrics(client_check.unchecked(frame), target_names, headlines, _per_target)


# --------------------------------------------------------------------------- the client check
def client_checks(frame, ckpts) -> list[dict]:
    """Per model and directory target re-run with the ranks on half the CPUs (kit/client_check.py): the honest
    save and restore GiB/s of every checkpoint of the confined run(s) against every checkpoint of the point's
    own runs (each save and restore is a repeat of the operation, so a point run once has a spread)."""
    if ckpts is None or ckpts.empty or "client_check" not in frame:
        return []
    ok = runs.ok_runs(frame)
    ok = ok[ok.sweep == "protocol"] if "sweep" in ok else ok

    def values(rows) -> dict:
        c = ckpts[ckpts.run_id.isin(set(rows.run_id))]
        return {f"measured {word} GiB/s": [float(x) for x in c[c.op == op].honest_gib_per_s]
                for op, word in (("save", "save"), ("load", "restore"))}

    return client_check.verdicts(ok, ["model", "target"], values, lambda k: f"{k[1]}, {k[0]}")
