"""The "framework" sweep: TensorFlow's own checkpoints (the Samsung SDC 2023 study's BERT rows), through the engine.

One measured run = one scenario on one target: a Keras transformer of BERT's shape (framework_worker)
trains `framework.steps` steps and saves with tf.train.CheckpointManager every k steps (kit.checkpoint:
each save's files and folder fsync'ed). Scenarios: default (k = default_every_steps, BERT
run_pretraining's save_checkpoints_steps), every (k = every_steps), limited (default k; the job's
memory capped at what it holds apart from page cache + memory_headroom_mib, so the page cache of its
writes is reclaimed), ingest (default k; kit.ingest's writer appends BERT-shaped TFRecord frames at
ingest_mb_per_s on the same target). run.start_clock()/stop_clock() bracket the training, so the
engine's block trace records what TensorFlow's writer (and the ingest writer) did to the disk:
characterization.csv's request sizes, write % and randomness for the run_id.

One TensorFlow job serves every scenario on every target (a core.longjob.LongJob in sweep.jobs, which
the engine stops however the sweep ends): TensorFlow's import and tracing are paid once, off every
clock and unthrottled. The job is a fresh Python process in its own cgroup (memory and blkio), started
in a new session with PR_SET_PDEATHSIG; the cgroup kills what is left in it when removed. While a run
measures it, the cgroup carries that target's emulated throttle and, for `limited`, the memory limit,
both put on through the run (run.limit_job) and lifted when the run closes. A job that dies
mid-scenario is a failed row with its exit status; the next scenario starts a fresh one.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...core import cgroups, longjob, targets as targets_mod
from ...core.columns import Column
from ...core.longjob import JobDied, LongJob
from ...core.folders import folder_below, ours
from ...core.sweep import Measurement, Point
from ...formats.tfrecord import frame
from ...kit.ingest import IngestWriter
from . import dataset

MIB = 1 << 20
JOB = "framework-tensorflow"      # the key of the sweep's one job in sweep.jobs
ENTRY = "storagebrief.studies.checkpoint.framework_worker:worker_main"
LABELS = {"default": "default checkpoint interval", "every": "checkpoint every k steps",
          "limited": "limited memory, default checkpoint interval", "ingest": "simultaneous data ingestion"}

COLUMNS: tuple[Column, ...] = (
    Column("framework_scenario", "", "framework: default (a save every default_every_steps), every (every "
                                     "every_steps), limited (default interval under a memory limit) or ingest "
                                     "(default interval, an ingest writer alongside)", "text"),
    Column("bert_layers", "", "framework: encoder layers of the BERT-shaped model (BERT-base: 12)"),
    Column("bert_hidden", "", "framework: hidden size (BERT-base: 768)"),
    Column("bert_heads", "", "framework: attention heads (BERT-base: 12)"),
    Column("bert_ffn", "", "framework: feed-forward size (BERT-base: 3072)"),
    Column("bert_seq_len", "", "framework: tokens per sequence"),
    Column("bert_vocab", "", "framework: vocabulary (BERT's WordPiece: 30522)"),
    Column("bert_batch_size", "", "framework: sequences per step"),
    Column("bert_parameters", "", "framework: trainable parameters, as TensorFlow counted them"),
    Column("train_steps", "steps", "framework: training steps in the run"),
    Column("checkpoint_every_steps", "steps", "framework: a tf.train.CheckpointManager save every this many steps"),
    Column("max_to_keep", "", "framework: CheckpointManager's max_to_keep (older checkpoints deleted by TensorFlow)"),
    Column("tf_checkpoints", "", "framework: saves TensorFlow made in the run"),
    Column("tf_checkpoint_bytes_mean", "bytes", "framework: bytes of one save (its .index, .data and the "
                                                "`checkpoint` state file)"),
    Column("tf_checkpoint_bytes_total", "bytes", "framework: bytes of every save in the run"),
    Column("tf_checkpoint_files", "", "framework: files of one save, each fsync'ed (plus the folder)"),
    Column("tf_checkpoint_s_mean", "s", "framework: mean save time, from manager.save() until the files and the "
                                        "folder were fsync'ed"),
    Column("tf_checkpoint_s_max", "s", "framework: the longest save"),
    Column("tf_checkpoint_s_total", "s", "framework: all saves' time (training stopped for it)"),
    Column("tf_checkpoint_mb_per_s", "MB/s", "framework: tf_checkpoint_bytes_total ÷ tf_checkpoint_s_total"),
    Column("job_write_bytes", "bytes", "framework: bytes the TensorFlow job itself wrote to the target's device "
                                       "(its cgroup's blkio counters: writes submitted in its context, as fsync does)"),
    Column("job_write_ops", "", "framework: write requests of those (the device-wide trace has everyone's)"),
    Column("job_write_kib_mean", "KiB", "framework: job_write_bytes ÷ job_write_ops ÷ 1024"),
    Column("train_time_s", "s", "framework: first step to the last save's fsync"),
    Column("checkpoint_time_percent", "%", "framework: tf_checkpoint_s_total ÷ train_time_s × 100"),
    Column("tf_files_left", "", "framework: files in the checkpoint folder at the end (max_to_keep's)"),
    Column("memory_limit_bytes", "bytes", "framework, limited: the job's memory limit (its need + headroom)"),
    Column("memory_need_bytes", "bytes", "framework: what the job held apart from unmapped page cache before "
                                         "the run"),
    Column("memory_peak_bytes", "bytes", "framework: the job's cgroup's peak during the run (page cache included)"),
    Column("memory_failcnt", "", "framework: times the job's cgroup hit its limit (reclaim forced)"),
    Column("ingest_target_mb_per_s", "MB/s", "framework, ingest: the ingest writer's set rate"),
    Column("ingest_bytes", "bytes", "framework, ingest: bytes the ingest writer appended during the run"),
    Column("ingest_mb_per_s", "MB/s", "framework, ingest: the rate it achieved"),
)


def points(p, repeats: int, config, note) -> list[Point]:
    """After the other sweeps: per repeat, every scenario (memory-limited ones only where memory cgroups work)."""
    f = p.framework
    scenarios = list(f.scenarios)
    why = memory_unavailable() if "limited" in scenarios else None
    if why:
        scenarios.remove("limited")
        note(f"framework sweep: the limited-memory scenario skipped: memory cgroups unavailable ({why})")
    return [Point(config("framework", "bert", s, f.interval(s)), r,
                  f"framework {s}: {f.steps} steps, a TensorFlow checkpoint every {f.interval(s)}")
            for r in range(1, repeats + 1) for s in scenarios]


def memory_unavailable() -> str | None:
    """None when a memory cgroup can be made here, else why limited runs cannot run."""
    return longjob.memory_unavailable()


def folder(target) -> Path:
    return folder_below(target.study_dir("checkpoint"), "framework", create=False)


def _new_job(run, f) -> LongJob:
    """The sweep's TensorFlow job (not started): its cgroup counts memory (all RAM until a limited run) and,
    where a target has a device, io (unthrottled until a run throttles it)."""
    io = next(filter(None, (targets_mod.io_limits(t, accounting=True) for t in run.sweep.targets)), None)
    spec = {"layers": f.layers, "hidden": f.hidden, "heads": f.heads, "ffn": f.ffn, "seq_len": f.seq_len,
            "vocab": f.vocab, "predictions": f.predictions, "batch_size": f.batch_size, "seed": 0,
            "learning_rate": f.learning_rate, "threads": f.threads or os.cpu_count() or 1}
    job = LongJob("framework-tensorflow", ENTRY, spec, run.sweep.out_dir / "logs" / "framework-tensorflow.log",
                  io_device=io.device if io is not None else None, quit_command={"quit": True},
                  title="the TensorFlow job")
    if job.group is None:
        run.log(f"framework sweep: the TensorFlow job runs without a cgroup: {job.why_no_cgroup}")
    return job


def _job(run, f) -> LongJob:
    """The sweep's job (sweep.jobs), started (off the clock) when there is none or the last one died."""
    job = run.sweep.jobs.get(JOB, lambda: _new_job(run, f))
    if not job.started:
        job.start()
    if job.ready is None:              # started now, or its start-up outlived the last run's wait
        job.wait_ready(f.timeout_s)
    return job


def _need(group) -> int | None:
    """What the job holds that reclaim cannot take: usage minus unmapped page cache."""
    usage = group.memory_usage() if group is not None else None
    if usage is None:
        return None
    b = group.memory_breakdown()
    return usage - max(0, b.get("cache_bytes", 0) - b.get("mapped_file_bytes", 0))


def ingest_payload(f, records: int = 256) -> bytes:
    """BERT-shaped TFRecord frames (token ids, segment ids, masked positions as int32), about 1 MiB worth."""
    rng = np.random.default_rng(1)
    per = (2 * f.seq_len + 2 * f.predictions + 1) * 4
    n = max(1, min(records, (1 << 20) // per))
    return b"".join(frame(rng.integers(0, f.vocab, per // 4, dtype=np.int32).tobytes()) for _ in range(n))


def _limit(run, job: LongJob, f, scenario: str) -> tuple[int | None, int | None]:
    """(need, limit): the job's need now; this run's limits on its cgroup through the engine (lifted when the
    run closes): the target's emulated profile and, for `limited`, its need + headroom."""
    need = _need(job.group)
    limit = None
    if scenario == "limited":
        if job.group is None or need is None:
            raise JobDied(f"limited memory needs a memory cgroup: {memory_unavailable() or 'the job has none'}")
        limit = need + f.memory_headroom_mib * MIB
    try:
        run.limit_job(job, memory_limit_bytes=limit)
    except (cgroups.CgroupUnavailable, cgroups.CgroupLimitError) as exc:
        raise JobDied(f"the target's emulated profile not applied to the TensorFlow job: {exc}") from None
    except OSError as exc:
        raise JobDied(f"memory limit of {limit / MIB:,.0f} MiB not applied: {exc}") from None
    return need, limit


def _ingest(run, f, scenario: str) -> IngestWriter | None:
    if scenario != "ingest":
        return None
    group = run.throttle("ingest")
    return IngestWriter(folder(run.target) / f"ingest-{run.run_id}", [], f.ingest_mb_per_s,
                        group.procs_files if group else [], payload=ingest_payload(f))


def _own_writes(job: LongJob, target) -> tuple[int, int] | None:
    dev = target.device
    if job.group is None or dev is None or dev.major is None:
        return None
    return job.group.io_stats((dev.major, dev.minor), "Write")


def _train(run, job: LongJob, f, config, where: Path, writer) -> tuple[dict, list]:
    """The measured phase: the ingest writer (if any) and the job's scenario inside the clock."""
    saves: list = []
    if job.group is not None:
        job.group.reset_memory_peak()
    first = _own_writes(job, run.target)
    run.start_clock()
    try:
        if writer is not None:
            writer.start()
        job.send({"dir": str(where), "steps": f.steps, "every": config.interval_steps, "max_to_keep": f.max_to_keep})
        done = job.wait("done", f.timeout_s, saves)
    finally:
        run.stop_clock()
    last = _own_writes(job, run.target)
    if first is not None and last is not None:
        done["job_write_bytes"], done["job_write_ops"] = last[0] - first[0], last[1] - first[1]
    return done, [s for s in saves if s.get("event") == "checkpoint"]


def _memory_stats(job: LongJob) -> dict:
    """Peak and the cumulative failcnt of the job's cgroup (a run's count is the difference)."""
    return job.group.memory_stats() if job.group is not None else {}


def measure(run, config) -> Measurement:
    """One scenario on run.target: its row, or a failed row with the reason (a dead job, a limit refused)."""
    f = run.p.framework
    where = folder(run.target) / run.run_id
    dataset.remove(folder(run.target), run.target, "checkpoint")    # what a killed run left (the outdir delete guard)
    ours(where)                 # made, each step below storagebrief/ proven ours (core.folders)
    base = base_row(f, config)
    writer = None
    try:
        job = _job(run, f)
        base["bert_parameters"] = job.ready.get("parameters")
        run.settle_written(where)
        need, limit = _limit(run, job, f, config.mode)
        base.update(memory_need_bytes=need, memory_limit_bytes=limit)
        writer = _ingest(run, f, config.mode)
        before = _memory_stats(job)
        done, saves = _train(run, job, f, config, where, writer)
        ingest, writer = (writer.stop() if writer else {}), None
        stats = _memory_stats(job)
        stats["memory_failcnt"] = stats.get("memory_failcnt", 0) - before.get("memory_failcnt", 0)
    except JobDied as exc:
        run.log(f"[{run.run_id}] failed: {exc}")
        dead = run.sweep.jobs.find(JOB)
        if dead is not None and dead.started and not dead.alive:   # its cgroup (and anything left in it) goes now
            run.sweep.jobs.end(dead)
        return Measurement(base, ok=False, failure_reason=str(exc))
    finally:
        if writer is not None:
            writer.stop()
        try:
            dataset.remove(folder(run.target), run.target, "checkpoint")
        except OSError:
            pass                # a folder that cannot be emptied must not hide how the scenario ended
    return Measurement({**base, **row(done, saves, stats, ingest)})


def base_row(f, config) -> dict:
    return {"sweep": "framework", "model": config.model, "framework_scenario": config.mode, "bert_layers": f.layers,
            "bert_hidden": f.hidden, "bert_heads": f.heads, "bert_ffn": f.ffn, "bert_seq_len": f.seq_len,
            "bert_vocab": f.vocab, "bert_batch_size": f.batch_size, "train_steps": f.steps,
            "checkpoint_every_steps": config.interval_steps, "max_to_keep": f.max_to_keep,
            "ingest_target_mb_per_s": f.ingest_mb_per_s if config.mode == "ingest" else None}


def row(done: dict, saves: list, stats: dict, ingest: dict) -> dict:
    seconds = [s["seconds"] for s in saves]
    total_s = float(sum(seconds))
    return {"tf_checkpoints": done["checkpoints"],
            "tf_checkpoint_bytes_mean": done["bytes"] / done["checkpoints"] if done["checkpoints"] else None,
            "tf_checkpoint_bytes_total": done["bytes"],
            "tf_checkpoint_files": saves[0]["files"] if saves else None,
            "tf_checkpoint_s_mean": total_s / len(seconds) if seconds else None,
            "tf_checkpoint_s_max": max(seconds) if seconds else None, "tf_checkpoint_s_total": total_s,
            "tf_checkpoint_mb_per_s": done["bytes"] / total_s / 1e6 if total_s > 0 else None,
            "train_time_s": done["seconds"], "job_write_bytes": done.get("job_write_bytes"),
            "job_write_ops": done.get("job_write_ops"),
            "job_write_kib_mean": done["job_write_bytes"] / done["job_write_ops"] / 1024
            if done.get("job_write_ops") else None,
            "checkpoint_time_percent": 100 * total_s / done["seconds"] if done["seconds"] > 0 else None,
            "tf_files_left": done["files_left"], "memory_peak_bytes": stats.get("memory_peak_bytes"),
            "memory_failcnt": stats.get("memory_failcnt") if stats else None,
            "ingest_bytes": ingest.get("ingest_bytes"), "ingest_mb_per_s": ingest.get("ingest_mb_per_s")}
