"""Arithmetic on what the jobs reported: one run's rows (runs.csv, jobs.csv, epochs.csv), headlines, metrics.json."""
from __future__ import annotations

import math

import numpy as np

from ...core import columns
from ...core.columns import Column
from ...kit import runs
from ...kit.disk_metrics import mib_per_s
from ...kit.runs import ok_runs

_B = "bytes"
# Every column a run's row holds beyond the engine's and the monitor's (core.columns).
COLUMNS: tuple[Column, ...] = (
    Column("sweep", "", "the scenario: memory, parallel, ingest or checkpoint", "text"),
    Column("models", "", "training jobs run at once (K), each in its own cgroup"),
    Column("memory_setting", "", "none, a dataset:memory ratio ('2.5:1') or a size ('6GiB')", "text"),
    Column("dataset_source", "", "preprocess (the preprocess stage's TFRecords) or generated", "text"),
    Column("dataset_records", "", "TFRecord records in the dataset"),
    Column("dataset_bytes", _B, "bytes of the dataset's TFRecord files"),
    Column("input_size", "px", "ResNet50 input size (square)"),
    Column("batch_size", "", "images per training step"),
    Column("batches", "", "class-balanced (batch_size / num_classes records of each class; generated sets) or "
           "as read (the shuffled read order)", "text"),
    Column("epochs", "", "epochs each job trains"),
    Column("num_classes", "", "classes of the model's output"),
    Column("steps_per_epoch", "", "training steps per epoch (records / batch size)"),
    Column("cpus_per_job", "", "CPUs each job is pinned to"),
    Column("ingest_target_mb_per_s", "MB/s", "the ingest writer's set rate; 0: no ingest"),
    Column("checkpoint_every_steps", "", "checkpoint interval in steps; 0: the long default interval"),
    Column("checkpoint_interval_s", "s", "the default checkpoint interval in seconds; 0 when every_steps is set"),
    Column("foreign_cache_drops", "", "page-cache drops by other processes during the run"),
    Column("tf_device", "", "the device TensorFlow trained on (CPU or GPU)", "text"),
    Column("memory_limit_bytes", _B, "the job's memory cgroup limit; empty: none"),
    Column("memory_need_bytes", _B, "the most memory a job held that reclaim could not take"),
    Column("memory_anon_growth_bytes", _B, "growth of the job's anonymous memory after ready"),
    Column("page_cache_cap_bytes", _B, "a ratio run's page-cache share per job (dataset x memory/dataset); the run's jobs share jobs x this"),
    Column("dataset_to_memory_ratio", "", "dataset bytes / page-cache cap"),
    Column("page_cache_reclaims", "", "polls at which the page-cache cap evicted dataset pages"),
    Column("page_cache_reclaimed_bytes", _B, "dataset bytes the page-cache cap evicted"),
    Column("page_cache_mean_bytes", _B, "the dataset's bytes in the page cache, mean while training (mincore)"),
    Column("memory_peak_bytes", _B, "the jobs' peak cgroup memory"),
    Column("memory_failcnt", "", "times a job's memory met its cgroup limit"),
    Column("oom_kills", "", "OOM kills in the jobs' cgroups"),
    Column("training_time_s", "s", "from go to the last job's end"),
    Column("training_time_min", "min", "training_time_s in minutes"),
    Column("images", "", "images trained on, all jobs"),
    Column("images_per_s", "images/s", "images per second, all jobs"),
    Column("images_per_s_per_job", "images/s", "images per second of one job, mean over jobs"),
    Column("startup_s_max", "s", "the slowest job's start-up (TensorFlow, model, warm-up); a job taken over from "
           "an earlier run on the target: its re-arming only"),
    Column("job_reused_from", "", "the earlier run whose (one) job this run took over, already started; "
           "empty: its jobs were started for it"),
    Column("loss_first_epoch", "", "training loss of the first epoch, mean over jobs"),
    Column("loss_last_epoch", "", "training loss of the last epoch, mean over jobs"),
    Column("accuracy_last_epoch", "", "training accuracy of the last epoch, mean over jobs"),
    Column("loss_max_step_last_epoch", "", "the largest per-step (one batch) training loss of the last epoch, "
           "over jobs: a spike above ln(num_classes) in a converged model is a broken step, not noise"),
    Column("pipeline_bytes", _B, "record bytes the tf.data pipelines consumed"),
    Column("job_read_bytes", _B, "bytes the jobs caused to be read from storage (/proc/<pid>/io)"),
    Column("read_amplification", "", "job_read_bytes / pipeline_bytes"),
    Column("reread_ratio", "", "epochs >= 2: bytes read from storage / bytes consumed"),
    Column("checkpoints", "", "checkpoints written, all jobs"),
    Column("checkpoint_bytes", _B, "bytes of the checkpoints written"),
    Column("checkpoint_s_total", "s", "seconds spent writing (and fsyncing) checkpoints"),
    Column("checkpoint_s_mean", "s", "seconds per checkpoint"),
    Column("checkpoint_mb", "MB", "size of one checkpoint"),
    Column("ingest_bytes", _B, "bytes the ingest writer wrote during the run"),
    Column("ingest_mb_per_s", "MB/s", "the ingest writer's achieved rate"),
    Column("device_read_mib_per_s_avg", "MiB/s", "device read throughput over the run"),
    Column("device_write_mib_per_s_avg", "MiB/s", "device write throughput over the run"),
    Column("device_read_mib_per_s_active", "MiB/s", "device read throughput, mean over intervals with reads"),
    Column("device_read_iops_active", "IO/s", "device reads per second, mean over intervals with reads"),
    Column("device_read_per_consumed", "", "device read bytes / pipeline_bytes"),
)
# The runs.csv columns this study's brief and arithmetic use unconditionally, and what they hold; the
# brief's gate (brief/inputs.py) refuses a runs.csv without them, so the code below may assume them.
RUNS_COLUMNS = columns.kinds(("sweep", "memory_setting", "models", "ingest_target_mb_per_s", "checkpoint_every_steps"),
                             # absent when every run failed (a failed run's row has no measurements)
                             COLUMNS, may_be_absent=("training_time_s", "images_per_s", "job_read_bytes"))


# --------------------------------------------------------------------------- one run's rows
def _active_mean(series: list[dict], key: str) -> float:
    """Mean over intervals where the device did read (the Samsung SDC 2023 study discards zero intervals)."""
    vals = [r[key] for r in series if r.get("read_iops", 0) > 0]
    return float(np.mean(vals)) if vals else 0.0


def _job_row(base: dict, j) -> dict:
    """jobs.csv: one training job of a run (its own time, reads, memory, loss, checkpoints)."""
    images = sum(e["images"] for e in j.epochs)
    later = j.epochs[1:]
    return {
        "run_id": base["run_id"], "target": base["target"], "job": j.index, "cpus": len(j.spec["cpus"]),
        "tf_device": j.ready["device"], "startup_s": j.ready["startup_s"], "reused_from": j.reused_from,
        "training_time_s": j.done["seconds"], "images": images, "images_per_s": images / j.done["seconds"],
        "memory_limit_bytes": j.limit_bytes, "page_cache_cap_bytes": j.cache_share_bytes or None,
        "page_cache_mean_bytes": j.cache_sum / j.cache_samples if j.cache_samples else None,
        "memory_need_bytes": j.need_bytes,
        "memory_anon_ready_bytes": j.anon_ready or None,
        "memory_anon_growth_bytes": (j.anon_max - j.anon_ready) if j.anon_ready else None,
        "memory_peak_bytes": j.stats.get("memory_peak_bytes"), "memory_failcnt": j.stats.get("memory_failcnt"),
        "oom_kills": j.stats.get("oom_kills"), "job_read_bytes": sum(e["read_bytes"] for e in j.epochs),
        "pipeline_bytes": sum(e["pipeline_bytes"] for e in j.epochs),
        "reread_ratio": (sum(e["read_bytes"] for e in later) / max(1, sum(e["pipeline_bytes"] for e in later))
                         if later else np.nan),
        "loss_first_epoch": j.epochs[0]["loss"], "loss_last_epoch": j.epochs[-1]["loss"],
        "accuracy_last_epoch": j.epochs[-1]["accuracy"],
        "loss_max_step_last_epoch": j.epochs[-1].get("loss_max_step", np.nan), "checkpoints": j.done["checkpoints"],
        "checkpoint_bytes": j.done["checkpoint_bytes"], "checkpoint_s_total": j.done["checkpoint_s"]}


def _epoch_rows(base: dict, j) -> list[dict]:
    """epochs.csv: one row per epoch of a job."""
    return [{"run_id": base["run_id"], "target": base["target"], "job": j.index, "epoch": e["epoch"],
             "seconds": e["seconds"], "images": e["images"], "job_read_bytes": e["read_bytes"],
             "pipeline_bytes": e["pipeline_bytes"], "loss": e["loss"], "accuracy": e["accuracy"],
             "loss_max_step": e.get("loss_max_step"),
             "step_losses": " ".join(f"{x:.4g}" for x in e.get("step_losses", [])),
             "memory_anon_bytes": e.get("anon_bytes"), "memory_cache_bytes": e.get("cache_bytes")}
            for e in j.epochs]


def _memory_columns(jr: list[dict], ds_bytes: int, cgroup: bool, cap) -> dict:
    """Memory columns of a run; without any job cgroup (no memory controller) the counters are NaN."""
    limit = jr[0]["memory_limit_bytes"]
    out = {
        "memory_limit_bytes": limit if limit else np.nan,
        "memory_need_bytes": max(r["memory_need_bytes"] or 0 for r in jr),
        "memory_anon_growth_bytes": max((r["memory_anon_growth_bytes"] or 0) for r in jr),
        # Ratio runs: the page cache each job may hold (dataset x memory/dataset), what it held on
        # average while training, and how often the cap evicted dataset pages (cachecap.py).
        "page_cache_cap_bytes": jr[0]["page_cache_cap_bytes"] or np.nan,
        "dataset_to_memory_ratio": ds_bytes / jr[0]["page_cache_cap_bytes"] if jr[0]["page_cache_cap_bytes"]
        else np.nan,
        "page_cache_reclaims": cap.evictions if cap is not None else 0,
        "page_cache_reclaimed_bytes": cap.evicted_bytes if cap is not None else 0,
        "page_cache_mean_bytes": float(np.mean([r["page_cache_mean_bytes"] for r in jr]))
        if all(r["page_cache_mean_bytes"] is not None for r in jr) else np.nan,
        "memory_peak_bytes": max((r["memory_peak_bytes"] or 0) for r in jr) or np.nan,
        "memory_failcnt": sum(r["memory_failcnt"] or 0 for r in jr),
        "oom_kills": sum(r["oom_kills"] or 0 for r in jr),
    }
    if not cgroup:   # unknown, not zero: nothing counted them
        out.update(memory_anon_growth_bytes=np.nan, memory_failcnt=np.nan, oom_kills=np.nan)
    return out


def _training_columns(jr: list[dict], epoch_rows: list[dict], elapsed: float) -> dict:
    """Time, throughput, loss, reads and checkpoints of a run, over all its jobs."""
    images = sum(r["images"] for r in jr)
    pipeline = sum(r["pipeline_bytes"] for r in jr)
    job_read = sum(r["job_read_bytes"] for r in jr)
    later_read = sum(e["job_read_bytes"] for e in epoch_rows if e["epoch"] > 1)
    later_pipe = sum(e["pipeline_bytes"] for e in epoch_rows if e["epoch"] > 1)
    ck_count = sum(r["checkpoints"] for r in jr)
    return {
        "training_time_s": elapsed, "training_time_min": elapsed / 60, "images": images,
        "images_per_s": images / elapsed, "images_per_s_per_job": float(np.mean([r["images_per_s"] for r in jr])),
        "startup_s_max": max(r["startup_s"] for r in jr),
        "job_reused_from": ";".join(sorted({r["reused_from"] for r in jr if r["reused_from"]})),
        "loss_first_epoch": float(np.mean([r["loss_first_epoch"] for r in jr])),
        "loss_last_epoch": float(np.mean([r["loss_last_epoch"] for r in jr])),
        "accuracy_last_epoch": float(np.mean([r["accuracy_last_epoch"] for r in jr])),
        "loss_max_step_last_epoch": float(np.max([r["loss_max_step_last_epoch"] for r in jr])),
        "pipeline_bytes": pipeline, "job_read_bytes": job_read,
        "read_amplification": job_read / pipeline if pipeline else np.nan,
        "reread_ratio": later_read / later_pipe if later_pipe else np.nan,
        "checkpoints": ck_count, "checkpoint_bytes": sum(r["checkpoint_bytes"] for r in jr),
        "checkpoint_s_total": sum(r["checkpoint_s_total"] for r in jr),
        "checkpoint_s_mean": (sum(r["checkpoint_s_total"] for r in jr) / ck_count) if ck_count else np.nan,
        "checkpoint_mb": sum(r["checkpoint_bytes"] for r in jr) / ck_count / 1e6 if ck_count else np.nan,
    }


def _rows(base: dict, jobs: list, elapsed: float, summary: dict, series: list[dict], ingest: dict,
          emulated: bool, ds) -> tuple[dict, list, list]:
    """(run row, per-job rows, per-epoch rows) of a run whose jobs all finished."""
    job_rows = [_job_row(base, j) for j in jobs]
    epoch_rows = [e for j in jobs for e in _epoch_rows(base, j)]
    jr = job_rows
    training = _training_columns(jr, epoch_rows, elapsed)
    memory = _memory_columns(jr, ds.bytes, any(j.group is not None for j in jobs), jobs[0].cache_cap)
    row = {
        **base, "emulated": emulated, "tf_device": jr[0]["tf_device"],
        **memory,
        **training,
        **({"ingest_bytes": ingest.get("ingest_bytes", 0), "ingest_mb_per_s": ingest.get("ingest_mb_per_s", 0.0)}
           if ingest else {"ingest_bytes": 0, "ingest_mb_per_s": 0.0}),
        **summary,
    }
    if "device_read_mb_per_s_avg" in summary:
        pipeline = training["pipeline_bytes"]
        row["device_read_mib_per_s_avg"] = mib_per_s(summary["device_read_mb_per_s_avg"])
        row["device_write_mib_per_s_avg"] = mib_per_s(summary["device_write_mb_per_s_avg"])
        row["device_read_mib_per_s_active"] = mib_per_s(_active_mean(series, "read_mb_per_s"))
        row["device_read_iops_active"] = _active_mean(series, "read_iops")
        row["device_read_per_consumed"] = summary["device_read_bytes"] / pipeline if pipeline else np.nan
    return row, job_rows, epoch_rows


# --------------------------------------------------------------------------- the study's figures
def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other on matched scenarios, then the Samsung SDC 2023 study's finding per
    target: a memory limit vs none (the job's device reads and its training time)."""
    from ...report import compare, formatting, versus_reference

    keys = ["sweep", "models", "memory_setting", "ingest_target_mb_per_s", "checkpoint_every_steps"]
    out = versus_reference(ok_runs(frame), target_names, keys,
                           [("training_time_s", "lower", "ResNet50 training time"),
                            ("images_per_s", "higher", "ResNet50 training throughput (images/s)")])
    ok = ok_runs(frame)
    mem = ok[ok.sweep == "memory"] if "sweep" in ok else ok.iloc[0:0]
    for name in target_names:
        m = mem[mem.target == name]
        for setting in sorted(s for s in set(m.memory_setting) if s != "none"):
            # The memory setting takes the place of the target in compare(): limited vs none.
            pair = m[m.memory_setting.isin([setting, "none"])].assign(target=lambda f: f.memory_setting)
            for metric, label in (("job_read_bytes", "Device reads of one training job"),
                                  ("training_time_s", "Training time")):
                h = compare(pair, metric, "higher", ["models"], setting, "none", f"{label}, {name}")
                d = h["delta_percent"]
                if d is not None:   # a signed change reads better than "never higher" for an effect
                    h["text"] = formatting.change(d)
                out.append({**h, "id": f"{metric}:{name}|{setting}_vs_none", "hint": "the limit's effect",
                            "ref": f"memory {setting}", "other": "no limit"})
    return out


def pd_zero(frame):
    import pandas as pd
    return pd.Series(0, index=frame.index)


def memory_effect(frame, target: str) -> dict | None:
    """Baseline (no limit) vs the most limited ratio run of one model on a target."""
    ok = ok_runs(frame)
    mem = ok[(ok.sweep == "memory") & (ok.target == target)]
    base = mem[mem.memory_setting == "none"]
    lim = mem[mem.memory_setting != "none"]
    if base.empty or lim.empty:
        return None
    worst = lim.groupby("memory_setting").job_read_bytes.mean().idxmax()
    b, l = base.mean(numeric_only=True), lim[lim.memory_setting == worst].mean(numeric_only=True)
    drops = float(mem.get("foreign_cache_drops", pd_zero(mem)).sum())
    return {"setting": worst, "read_ratio": (l.job_read_bytes / b.job_read_bytes) if b.job_read_bytes else math.inf,
            "foreign_cache_drops": drops,
            "time_change_percent": (l.training_time_s / b.training_time_s - 1) * 100,
            "base_reread": b.reread_ratio, "limited_reread": l.reread_ratio}


def _per_target(g) -> dict:
    """metrics.json for one target's ok runs: throughput, the baseline's time, the memory limit's effect."""
    baseline = (g.sweep == "memory") & (g.memory_setting == "none")
    d = {"max_images_per_s": float(g.images_per_s.max()),
         "baseline_training_time_s": float(g[baseline].training_time_s.mean()) if baseline.any() else None}
    eff = memory_effect(g, g.target.iloc[0])
    if eff:
        ratio = eff["read_ratio"]
        d["limited_device_read_ratio"] = None if math.isinf(ratio) else round(float(ratio), 2)
        d["limited_training_time_change_percent"] = round(float(eff["time_change_percent"]), 1)
    return d


def metrics(frame, target_names: list[str]) -> dict:
    return runs.metrics(frame, target_names, headlines, _per_target)
