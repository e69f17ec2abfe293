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

One TensorFlow job serves every scenario on every target (TfJob, kept in the sweep's state, stopped by
close()): TensorFlow's import and tracing are paid once, off every clock and unthrottled. The job is a
fresh Python process in its own cgroup (memory and blkio), started in a new session with
PR_SET_PDEATHSIG; the cgroup kills what is left in it when removed. While a run measures it, the
cgroup carries that target's emulated throttle (set before the clock, cleared after) and, for
`limited`, the memory limit. A job that dies mid-scenario is a failed row with its exit status; the
next scenario starts a fresh one.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ...core import cache, cgroups, targets as targets_mod
from ...core.columns import Column
from ...core.procs import die_with_parent, group_members, kill_all
from ...core.sweep import Measurement, Point
from ...formats.tfrecord import frame
from ...kit.events import drain_events
from ...kit.ingest import IngestWriter
from . import dataset

MIB = 1 << 20
JOB = "tensorflow"        # the key of the sweep's one job in CheckpointState.framework
BOOT = ("import sys, json; a = json.loads(sys.argv[1]); from storagebrief.core.cgroups import join; "
        "join(a['procs']); from storagebrief.studies.checkpoint.framework_worker import worker_main; "
        "worker_main(a['spec'])")
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


class JobDied(RuntimeError):
    pass


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
    state = cgroups.capabilities().get("memory", "unavailable")
    return None if state.startswith("v") and "not writable" not in state else state


def folder(target) -> Path:
    return target.study_dir("checkpoint") / "framework"


def _ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class TfJob:
    """The sweep's TensorFlow job: its process, its cgroup (None without cgroups), its events."""

    def __init__(self, targets, f, out_dir: Path, log=print):
        self.events = queue.Queue()
        self.group = self._cgroup(targets, log)
        self.log_path = out_dir / "logs" / "framework-tensorflow.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.spec = {"layers": f.layers, "hidden": f.hidden, "heads": f.heads, "ffn": f.ffn, "seq_len": f.seq_len,
                     "vocab": f.vocab, "predictions": f.predictions, "batch_size": f.batch_size, "seed": 0,
                     "learning_rate": f.learning_rate, "threads": f.threads or os.cpu_count() or 1}
        self.proc: subprocess.Popen | None = None
        self.ready: dict = {}

    @staticmethod
    def _cgroup(targets, log):
        """Memory (limit: all RAM until a limited run) and, where a target has a device, blkio unthrottled."""
        io = next(filter(None, (targets_mod.io_limits(t, accounting=True) for t in targets)), None)
        try:
            group = cgroups.Cgroup("framework-tensorflow", memory_limit_bytes=_ram_bytes(), io=io).create()
        except cgroups.CgroupUnavailable as exc:
            log(f"framework sweep: the TensorFlow job runs without a cgroup: {exc}")
            return None
        group.kill_on_remove = True     # nothing of the job outlives its cgroup
        return group

    def start(self, timeout_s: float) -> dict:
        rfd, wfd = os.pipe()
        spec_path = self.log_path.with_suffix(".json")
        spec_path.write_text(json.dumps({**self.spec, "event_fd": wfd}))
        lib = str(Path(__file__).resolve().parents[3])      # the storagebrief this process runs
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join([lib, *filter(None, [os.environ.get("PYTHONPATH")])])}
        arg = json.dumps({"procs": self.group.procs_files if self.group else [], "spec": str(spec_path)})
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen([sys.executable, "-c", BOOT, arg], stdin=subprocess.PIPE, stdout=log,
                                             stderr=subprocess.STDOUT, pass_fds=(wfd,), env=env,
                                             start_new_session=True, preexec_fn=die_with_parent)
            finally:
                os.close(wfd)
        drain_events(rfd, self.events)
        self.ready = self.wait("ready", timeout_s)
        return self.ready

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, name: str, timeout_s: float, seen: list | None = None) -> dict:
        """The next `name` event (others go to `seen`); JobDied when the job ends or times out first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ev = self.events.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise JobDied(f"the TensorFlow job sent no '{name}' in {timeout_s:.0f} s")
                continue
            if ev.get("event") == name:
                return ev
            if ev.get("event") == "eof":
                code = self.proc.wait(timeout=30) if self.proc else None
                raise JobDied(f"the TensorFlow job ended (exit {code}) before '{name}'"
                              + self._tail())
            if seen is not None:
                seen.append(ev)

    def _tail(self, n: int = 800) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines()
                     if ln.strip() and "WARNING" not in ln]
        except OSError:
            return ""
        return (": " + "\n".join(lines)[-n:]) if lines else ""

    def send(self, cmd: dict) -> None:
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def stop(self) -> None:
        """Ask the job to quit, kill its process group if it does not, remove its cgroup."""
        if self.alive:
            try:
                self.send({"quit": True})
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc is not None and self.proc.poll() is None:
            kill_all(group_members(self.proc.pid))       # its own session: the job and anything it started
            self.proc.wait()
        if self.group is not None:
            self.group.remove()


def _job(run, f) -> TfJob:
    """The sweep's job, started (off the clock) when there is none or the last one died."""
    jobs = run.sweep.state.framework
    job = jobs.get(JOB)
    if job is not None and not job.alive:
        jobs.pop(JOB).stop()
        job = None
    if job is None:
        job = jobs[JOB] = TfJob(run.sweep.targets, f, run.sweep.out_dir, run.log)
        job.start(f.timeout_s)
    return job


def close(state) -> None:
    for job in state.framework.values():
        job.stop()
    state.framework.clear()


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


def _limit(job: TfJob, f, scenario: str) -> tuple[int | None, int | None]:
    """(need, limit): the job's need now; for `limited`, the memory limit set on its cgroup."""
    need = _need(job.group)
    if scenario != "limited":
        return need, None
    if job.group is None or need is None:
        raise JobDied(f"limited memory needs a memory cgroup: {memory_unavailable() or 'the job has none'}")
    limit = need + f.memory_headroom_mib * MIB
    os.sync()                   # dirty pages written first: what the limit reclaims is clean cache
    try:
        job.group.set_memory_limit(limit)
    except OSError as exc:
        raise JobDied(f"memory limit of {limit / MIB:,.0f} MiB not applied: {exc}") from None
    return need, limit


def _ingest(run, f, scenario: str) -> IngestWriter | None:
    if scenario != "ingest":
        return None
    group = run.throttle("ingest")
    return IngestWriter(folder(run.target) / f"ingest-{run.run_id}", [], f.ingest_mb_per_s,
                        group.procs_files if group else [], payload=ingest_payload(f))


def _own_writes(job: TfJob, target) -> tuple[int, int] | None:
    dev = target.device
    if job.group is None or dev is None or dev.major is None:
        return None
    return job.group.io_stats((dev.major, dev.minor), "Write")


def _train(run, job: TfJob, f, config, where: Path, writer) -> tuple[dict, list]:
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


def _memory_stats(job: TfJob) -> dict:
    """Peak and the cumulative failcnt of the job's cgroup (a run's count is the difference)."""
    return job.group.memory_stats() if job.group is not None else {}


def _settle(where: Path) -> str:
    """Before the clock: earlier runs' dirty pages written back (none is written in this run), the run's own
    folder evicted. Not drop_caches: it would evict TensorFlow's own code pages, whose re-reads would then be
    this run's I/O (a write workload has nothing else to make cold)."""
    os.sync()
    cache.fadvise_dontneed([where])
    return "fadvise_dontneed (the run's checkpoint folder, after os.sync; not drop_caches: TensorFlow's code stays cached)"


def _throttle(run, job: TfJob):
    """The target's emulated profile on the job's cgroup for this run (None: unthrottled target)."""
    io = targets_mod.io_limits(run.target)
    if io is None:
        return None
    if job.group is None or "blkio" not in job.group.dirs:
        run.unthrottled("the TensorFlow job has no blkio cgroup")
        return None
    try:
        job.group.set_io(io)
    except (cgroups.CgroupUnavailable, cgroups.CgroupLimitError) as exc:
        raise JobDied(f"the target's emulated profile not applied to the TensorFlow job: {exc}") from None
    run.emulated = True
    return io


def _release(job: TfJob | None, io) -> None:
    """After a run: the job's cgroup back to all RAM and an unthrottled device."""
    if job is None or job.group is None or not job.alive:
        return
    job.group.set_memory_limit(_ram_bytes())
    if io is not None:
        job.group.clear_io_limits(io)


def measure(run, config) -> Measurement:
    """One scenario on run.target: its row, or a failed row with the reason (a dead job, a limit refused)."""
    f = run.p.framework
    where = folder(run.target) / run.run_id
    dataset.remove(folder(run.target), run.target, "checkpoint")    # what a killed run left (the outdir delete guard)
    where.mkdir(parents=True)
    base = base_row(f, config)
    writer = io = None
    try:
        job = _job(run, f)
        base["bert_parameters"] = job.ready.get("parameters")
        run.cache_method = _settle(where)
        io = _throttle(run, job)
        need, limit = _limit(job, f, config.mode)
        base.update(memory_need_bytes=need, memory_limit_bytes=limit)
        writer = _ingest(run, f, config.mode)
        before = _memory_stats(job)
        done, saves = _train(run, job, f, config, where, writer)
        ingest, writer = (writer.stop() if writer else {}), None
        stats = _memory_stats(job)
        stats["memory_failcnt"] = stats.get("memory_failcnt", 0) - before.get("memory_failcnt", 0)
    except JobDied as exc:
        run.log(f"[{run.run_id}] failed: {exc}")
        dead = run.sweep.state.framework.get(JOB)
        if dead is not None and not dead.alive:          # its cgroup (and anything left in it) goes now
            run.sweep.state.framework.pop(JOB).stop()
        return Measurement(base, ok=False, failure_reason=str(exc))
    finally:
        if writer is not None:
            writer.stop()
        _release(run.sweep.state.framework.get(JOB), io)
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
