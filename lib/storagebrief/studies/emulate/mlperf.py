"""MLPerf Storage v3.0 run rules (`emulate.mlperf_rules: true`) and the export of every run into the layout
MLPerf Storage's own tool writes, so a storagebrief run can be read beside a v3.0 submission by key.

Rules (mlcommons/storage Submission_guidelines.md, sections 6.6 and 7, kept in v3.0's Rules.md):
  dataset   at least max(500 steps x batch x accelerators, hosts x host RAM (GiB) x 5 x 2^30 / record
            bytes) samples, as files of `samples_per_file` (dataset_files below);
  runs      each point runs 6 times back to back: the first is the warm-up, the other 5 are scored
            (`mlperf_run` column: warm-up | scored); the shuffle seed changes every run;
  verdict   each scored run meets the workload's AU threshold (DLIO's train_au_meet_expectation
            "success"; the submission checker's rule 3.3.2 fails a result with any run that does not),
            the result is the mean of the 5 scored runs.

Export (`mlperf/results/<target>/training/<workload>/run/<YYYYmmdd_HHMMSS>/`): one folder per run of
the sweep (the client check's confined re-runs are not runs of the sweep), each with `summary.json`
(the training keys of DLIO's summary under "metric"), MLPerf's metadata file and `storagebrief.json`
(storagebrief, the commit, the params hash, the run id). One AU window per run: the per-epoch lists hold that run's one value.
train_io_mean_MB_per_second is in 2^20 bytes per second, as DLIO computes it.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from ...kit import mlpstorage_tree as tree

WARMUP_RUNS, SCORED_RUNS = 1, 5
RUNS = WARMUP_RUNS + SCORED_RUNS
MIN_STEPS_PER_EPOCH = 500
HOST_MEMORY_MULTIPLIER = 5
EXPORT_DIR = "mlperf"


def dataset_samples(batch: int, accelerators: int, hosts: int, host_memory_bytes: int, record_bytes: int) -> int:
    """The rules' minimum samples: max(500 x batch x accelerators, hosts x RAM x 5 / record bytes). RAM is
    counted in whole GiB as the rules' script takes it (memory_per_host_in_GB x 1024^3)."""
    gib = host_memory_bytes // 2**30
    by_steps = MIN_STEPS_PER_EPOCH * batch * accelerators
    by_memory = math.ceil(hosts * gib * HOST_MEMORY_MULTIPLIER * 2**30 / record_bytes)
    return max(by_steps, by_memory)


def dataset_files(batch: int, accelerators: int, hosts: int, host_memory_bytes: int, record_bytes: int,
                  samples_per_file: int) -> int:
    return math.ceil(dataset_samples(batch, accelerators, hosts, host_memory_bytes, record_bytes) / samples_per_file)


def run_kind(repeat: int) -> str:
    return "warm-up" if repeat <= WARMUP_RUNS else "scored"


def verdicts(frame) -> list[dict]:
    """Per workload, target and N under the rules: warm-up AU, the 5 scored AUs, their mean and the verdict."""
    if "mlperf_run" not in frame or not frame.mlperf_run.notna().any():
        return []
    out = []
    rows = frame[frame.client_check.isna()] if "client_check" in frame else frame
    rows = rows[rows.status.astype(str) != "failed"] if "status" in rows else rows    # an S3 store that failed
    for (w, t, n), g in rows.groupby(["workload", "target", "accelerators"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        scored = g[g.mlperf_run == "scored"].sort_values("repeat")
        warm = g[g.mlperf_run == "warm-up"]
        aus = [float(x) for x in scored.au_percent]
        complete = len(aus) == SCORED_RUNS
        ok = complete and all(a >= thr for a in aus)
        out.append({"workload": w, "target": t, "accelerators": int(n), "au_threshold_percent": thr,
                    "warmup_au_percent": float(warm.au_percent.iloc[0]) if len(warm) else None,
                    "scored_au_percent": aus, "scored_au_mean_percent": sum(aus) / len(aus) if aus else None,
                    "scored_samples_per_s_mean": float(scored.samples_per_s.mean()) if aus else None,
                    "verdict": "pass" if ok else "fail" if complete else f"incomplete ({len(aus)} of {SCORED_RUNS} scored runs)"})
    return out


def summary(r, inv: dict | None = None) -> dict:
    """One run's summary.json: DLIO's training keys under "metric", the run's shape and DLIO's host keys around
    them."""
    au, sps, mib = float(r.au_percent), float(r.samples_per_s), float(r.loader_read_mib_per_s)
    thr = float(r.au_threshold_percent)
    return {
        "model": str(r.workload), "accelerator": str(r.accelerator_type), "num_accelerators": int(r.accelerators),
        "num_hosts": int(r.hosts) if "hosts" in r and not _nan(r.hosts) else 1,
        "num_files_train": int(r.num_files), "epochs": int(r.epochs), "start": str(r.get("started_at", "")),
        **(tree.dlio_hosts(inv) if inv else {}),
        "metric": {
            "train_au_percentage": [au],
            "train_au_mean_percentage": au,
            "train_au_stdev_percentage": 0.0,
            "train_au_meet_expectation": "success" if au >= thr else "fail",
            "train_throughput_samples_per_second": [sps],
            "train_throughput_mean_samples_per_second": sps,
            "train_throughput_stdev_samples_per_second": 0.0,
            "train_io_mean_MB_per_second": mib,
            "train_io_stdev_MB_per_second": 0.0,
        },
    }


def ours(r) -> dict:
    """storagebrief.json: the run in this study's words (MLPerf's tools do not read it)."""
    return {"study": "emulate", "run_id": str(r.get("run_id", "")), "target": str(r.target),
            "repeat": int(r["repeat"]), "au_threshold_percent": float(r.au_threshold_percent),
            "limited_by": str(r.get("limited_by", "")),
            "mlperf_run": None if _nan(r.get("mlperf_run")) else str(r.get("mlperf_run")),
            "au_window": "one window per run (steady-state steps), not per epoch"}


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def parameters(r, ref: dict, spec: dict) -> tuple[dict, dict]:
    """The DLIO workload parameters the run had (mlpstorage's combined_params) and the overrides MLPerf's benchmark
    would have been given to get them: dataset.num_files_train and reader.read_threads always (CLOSED-allowed), and
    each workload parameter whose value differs from MLPerf's reference for the accelerator (the study's
    `reference`: MLPerf's record size, batch size and compute time), which MLPerf's rules allow in no division."""
    acc = str(r.accelerator_type)
    ckpt = int(r.checkpoints) if "checkpoints" in r and not _nan(r.checkpoints) else 0
    params = {
        "model": {"name": str(r.workload)}, "framework": "pytorch",
        "workflow": {"generate_data": False, "train": True, "checkpoint": ckpt > 0},
        "dataset": {"format": spec.get("format"), "num_files_train": int(r.num_files),
                    "num_samples_per_file": int(spec.get("samples_per_file", 1)),
                    # the workload's record size; without the study's record of it, the mean the run read
                    "record_length_bytes": int(spec.get("record_bytes") or r.sample_bytes_mean),
                    "record_length_bytes_stdev": int(spec.get("record_bytes_stdev", 0))},
        "reader": {"batch_size": int(r.batch_size), "read_threads": int(r.read_threads),
                   "prefetch_size": int(r.prefetch), "odirect": bool(r.odirect),
                   "transfer_size": int(r.read_block_bytes)},
        "train": {"epochs": int(r.epochs), "computation_time": float(r.compute_s)},
        "metric": {"au": float(r.au_threshold_percent) / 100},
    }
    over = {"dataset.num_files_train": params["dataset"]["num_files_train"],
            "reader.read_threads": params["reader"]["read_threads"]}
    want = {"dataset.record_length_bytes": ref.get("record_bytes"),
            "dataset.record_length_bytes_stdev": ref.get("record_bytes_stdev"),
            "reader.batch_size": (ref.get("batch_size_by_accelerator") or {}).get(acc, ref.get("batch_size")),
            "train.computation_time": (ref.get("compute_s") or {}).get(acc)}
    for key, ref_value in want.items():
        section, name = key.split(".")
        if ref_value is not None and not math.isclose(float(params[section][name]), float(ref_value), rel_tol=1e-9):
            over[key] = params[section][name]
    return params, over


def export(out_dir: Path, frame) -> list[Path]:
    """Every run of the sweep as mlpstorage writes a training run, one results directory per target
    (kit/mlpstorage_tree.py); returns the run folders."""
    inv, study = {}, {}
    try:
        inv = json.loads((Path(out_dir) / "inventory.json").read_text())
        study = json.loads((Path(out_dir) / "study.json").read_text())
    except (OSError, ValueError):
        pass
    shutil.rmtree(Path(out_dir) / EXPORT_DIR, ignore_errors=True)   # this study's own export of an earlier sweep
    made = []
    rows = frame[frame.client_check.isna()] if "client_check" in frame else frame
    rows = rows[rows.status.astype(str) != "failed"] if "status" in rows else rows    # an S3 store that failed
    for _, r in rows.iterrows():
        w = (study.get("workloads") or {}).get(str(r.workload), {})
        params, over = parameters(r, w.get("reference") or {}, w.get("spec") or w.get("reference") or {})
        d = tree.run_folder(tree.root(out_dir, r.target), "training", str(r.workload), r.get("started_at", ""))
        tree.write_run(d, "training", model=str(r.workload), command="run", num_processes=int(r.accelerators),
                       accelerator=str(r.accelerator_type), parameters=params, overrides=over, inv=inv,
                       tool_files={"summary.json": summary(r, inv)}, ours=ours(r), as_dlio=True)
        made.append(d)
    return made
