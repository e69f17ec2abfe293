"""What a checkpoint costs training: an emulated training loop that checkpoints synchronously or
asynchronously, measured, plus the arithmetic that turns a measured write rate into a checkpoint
interval.

The loop is the emulate study's compute model: each step is `compute_s` of emulated accelerator
compute, a documented `time.sleep` (the one sleep that may stand for work), and nothing else. Every
`interval_steps` steps it checkpoints `checkpoint_bytes` of model state as `files` files into a
folder `global_epoch1_step<k>/` under the target, each file written and fsync'ed
(kit.checkpoint.write_file), then the folder and its parent fsync'ed, so a checkpoint counts only
when its bytes and its name are on the device. Modes:

  none   no checkpoints: the baseline training time;
  sync   training stops at a checkpoint step until every file is written and fsync'ed (the stall);
  async  training stops only to copy the state in memory (a real `bytes` copy, the snapshot, timed);
         a background thread then writes and fsyncs the copy while compute goes on. If the previous
         checkpoint is still being written at the next checkpoint step, training waits for it
         (counted as stall too): PyTorch DCP's `async_save` and Orbax's async checkpointer.

The state written is the state held: a buffer of `checkpoint_bytes` of incompressible bytes (an
incompressible chunk (kit.checkpoint), made before the clock, tiled over it), so compression or deduplication below the
file system cannot shrink a checkpoint below a chunk's worth of repetition.

Public names: run_training (one measured run), CostResult and CheckpointRecord (what it returns),
Cancelled (raised when the caller's cancel event is set), overhead_percent,
shortest_interval_for_overhead and restore_s (the model), MODES, STAGINGS, GIB.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..core.checkpoint_workloads import GIB, checkpoint_folder
from .checkpoint import fsync_dir, incompressible, write_file

MODES = ("none", "sync", "async")
STAGINGS = ("fresh", "reused")  # where an async snapshot is copied to (run_training)
CHUNK_BYTES = 32 << 20          # the incompressible chunk tiled over the state: made once, before the clock
WRITER_THREAD_NAME = "storagebrief-checkpoint-writer"
FOLDER_PREFIX = "storagebrief-checkpoint-cost-"


class Cancelled(Exception):
    """The caller's cancel event was set; the run stopped at the next step boundary (or between two
    files of a checkpoint being written) and cleaned up after itself."""


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint: taken after step `step` (1-based); `stall_s` is the training time it cost at
    that step (sync: the whole write; async: waiting for the previous one, the snapshot and
    starting the writer);
    `persist_s` is the writer's time from the first write to the last fsync."""
    step: int
    stall_s: float
    persist_s: float
    bytes: int
    snapshot_s: float = 0.0      # async: the in-memory copy
    wait_s: float = 0.0          # async: waiting for the previous checkpoint's writer


@dataclass(frozen=True)
class CostResult:
    """One run of the loop. `training_time_s` runs from the first step to the end of the job: the
    last step's compute and, async, the wait for the last checkpoint to be durable (`final_wait_s`:
    a job is not done while its last checkpoint is still in memory). Stall figures count only the
    checkpoint steps; `final_wait_s` is apart so the steady-state stall stays readable."""
    mode: str
    steps: int
    interval_steps: int
    compute_s: float
    files: int
    checkpoints: int
    checkpoint_bytes: int
    training_time_s: float
    stall_s_total: float
    stall_s_per_checkpoint: float     # mean over checkpoints; 0 without any
    persist_s_mean: float             # write + fsync per checkpoint, measured in the writer
    write_gib_per_s: float            # all checkpoints' bytes / all persist time; 0 without any
    snapshot_s_mean: float            # async; 0 otherwise
    overlap_wait_s_total: float       # async: waits for a previous writer at checkpoint steps
    final_wait_s: float               # async: after the last step, until the last checkpoint is durable
    records: tuple[CheckpointRecord, ...]
    folder: Optional[Path] = None     # where the checkpoints were, when kept
    staging: str = "fresh"            # async: where snapshots were copied to (STAGINGS)


def _check(mode: str, steps: int, interval_steps: int, compute_s: float, checkpoint_bytes: int,
           files: int) -> None:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    for name, value in (("steps", steps), ("interval_steps", interval_steps), ("files", files)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} {value!r}: a whole number of at least 1")
    if not compute_s >= 0:
        raise ValueError(f"compute_s {compute_s!r}: seconds, at least 0")
    if mode != "none" and (not isinstance(checkpoint_bytes, int) or checkpoint_bytes < files):
        raise ValueError(f"checkpoint_bytes {checkpoint_bytes!r}: at least one byte per file ({files})")


def _model_state(nbytes: int, chunk_bytes: int = CHUNK_BYTES) -> bytearray:
    """The state a checkpoint saves: `nbytes` of an incompressible chunk tiled (generating many GiB
    would take longer than the run; a chunk's worth of random bytes already defeats compression)."""
    chunk = incompressible(max(1, min(chunk_bytes, nbytes)))
    state = bytearray(nbytes)
    view = memoryview(state)
    for off in range(0, nbytes, len(chunk)):
        n = min(len(chunk), nbytes - off)
        view[off:off + n] = chunk[:n]
    return state


def _shares(total: int, parts: int) -> list[int]:
    """`total` bytes in `parts` files, the remainder to the first files (no byte lost)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def _persist(folder: Path, source: memoryview, files: int, stop: "_Stop") -> float:
    """Write `source` as `files` fsync'ed files in `folder`, fsync the folder and its parent; the
    seconds from the first write to the last fsync. Each file is one slice of the state, written by
    kit.checkpoint.write_file from a zero-copy view (one write call per file up to the kernel's
    ~2 GiB per call, not v3.0's 32 MiB: buffered writes land in the page cache whatever their size
    and the fsync carries the device's cost; past 2 GiB write_file repeats the slice's start, the
    same size of the same incompressible bytes). Stops between files when `stop` is set."""
    t = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    off = 0
    for i, n in enumerate(_shares(len(source), files)):
        if stop.is_set():
            raise Cancelled("checkpoint write stopped")
        write_file(folder / f"state_{i:04d}.bin", n, source[off:off + n])
        off += n
    fsync_dir(folder)
    fsync_dir(folder.parent)
    return time.perf_counter() - t


class _Writer:
    """The async checkpointer's background thread, one checkpoint at a time. `wait` joins it and
    re-raises what it raised, so a failed write fails the run at the next checkpoint or at the end."""

    def __init__(self, stop: "_Stop"):
        self.stop = stop
        self.thread: Optional[threading.Thread] = None
        self.persist_s = 0.0
        self.error: Optional[BaseException] = None

    def start(self, folder: Path, snapshot: bytes, files: int) -> None:
        def work():
            try:
                self.persist_s = _persist(folder, memoryview(snapshot), files, self.stop)
            except BaseException as e:          # handed to the training thread by wait()
                self.error = e
        self.persist_s, self.error = 0.0, None
        self.thread = threading.Thread(target=work, name=WRITER_THREAD_NAME, daemon=True)
        self.thread.start()

    def wait(self) -> float:
        """Join the running writer (if any); its persist seconds; re-raises its error."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
            if self.error is not None:
                err, self.error = self.error, None
                raise err
        return self.persist_s


def _sync_checkpoint(folder: Path, state: bytearray, files: int, stop: "_Stop") -> dict:
    t = time.perf_counter()
    persist = _persist(folder, memoryview(state), files, stop)   # training stopped: state is consistent
    return {"stall_s": time.perf_counter() - t, "persist_s": persist}


def _async_checkpoint(writer: _Writer, folder: Path, state: bytearray, files: int,
                      pending: list, staging: Optional[bytearray]) -> dict:
    """Wait for the previous writer (its persist time goes to its own record), snapshot, hand off.
    The snapshot goes into `staging` when given (safe: its previous writer has just been joined),
    else into fresh memory."""
    t0 = t1 = time.perf_counter()
    if pending:
        pending[-1]["persist_s"] = writer.wait()
        t1 = time.perf_counter()
    if staging is None:
        snapshot = bytes(state)         # the real copy training waits for, page faults included
    else:
        staging[:] = state              # the real copy, into memory already mapped
        snapshot = staging
    t2 = time.perf_counter()
    writer.start(folder, snapshot, files)
    rec = {"wait_s": t1 - t0, "snapshot_s": t2 - t1, "stall_s": time.perf_counter() - t0,
           "persist_s": 0.0}
    pending.append(rec)
    return rec


def run_training(target: Path, *, mode: str, steps: int, interval_steps: int, compute_s: float,
                 checkpoint_bytes: int = 0, files: int = 1, staging: str = "fresh",
                 cancel: Optional[threading.Event] = None, keep: bool = False) -> CostResult:
    """One measured run of `steps` training steps, checkpointing after every `interval_steps`-th
    step (mode sync or async) or never (none). Checkpoints go into a fresh folder under `target`,
    removed at the end unless `keep`; every one is kept until then, so the target needs
    checkpoints × checkpoint_bytes free (and memory: the state, plus one snapshot in async).
    `staging` (async): "fresh" copies each snapshot into newly allocated memory (PyTorch DCP's
    default async_save), "reused" into one buffer allocated before the clock (DCP's cached staging
    or a pinned host buffer kept across saves); the first pays the page faults at every save. Setting `cancel` stops the run with Cancelled (at the next
    step, or between two files of a checkpoint); no writer thread outlives the call, whatever
    happens."""
    _check(mode, steps, interval_steps, compute_s, checkpoint_bytes, files)
    if staging not in STAGINGS:
        raise ValueError(f"staging {staging!r}: one of {', '.join(STAGINGS)}")
    checkpointing = mode != "none"
    state = _model_state(checkpoint_bytes) if checkpointing else bytearray()   # before the clock
    # bytearray(n) zero-fills, so the reused buffer's pages are mapped before the clock too
    staging_buf = bytearray(checkpoint_bytes) if mode == "async" and staging == "reused" else None
    root = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=target)) if checkpointing else None
    failed = threading.Event()          # set when the run fails: a writer still busy stops early
    stop = _Stop(cancel, failed)
    writer, records = _Writer(stop), []
    try:
        t_start = time.perf_counter()
        for step in range(1, steps + 1):
            if stop.is_set():
                raise Cancelled(f"cancelled before step {step}")
            time.sleep(compute_s)       # the emulated accelerator's compute: the one stand-in for work
            if checkpointing and step % interval_steps == 0:
                folder = root / checkpoint_folder(step)
                rec = (_sync_checkpoint(folder, state, files, stop) if mode == "sync"
                       else _async_checkpoint(writer, folder, state, files, records, staging_buf))
                if mode == "sync":
                    records.append(rec)
                rec["step"] = step
        t_steps = time.perf_counter()
        if mode == "async" and records:
            records[-1]["persist_s"] = writer.wait()   # the job ends when its last checkpoint is durable
        t_end = time.perf_counter()
    except BaseException:
        failed.set()
        raise
    finally:
        if writer.thread is not None:
            writer.thread.join()        # no thread outlives the run
        if root is not None and not keep:
            shutil.rmtree(root, ignore_errors=True)
    result = _result(mode, steps, interval_steps, compute_s, files, checkpoint_bytes, t_end - t_start,
                     t_end - t_steps, records, root if keep else None)
    return replace(result, staging=staging)


class _Stop:
    """Set when the caller cancels or the run failed: what the loop and the writer look at."""

    def __init__(self, cancel: Optional[threading.Event], failed: threading.Event):
        self.cancel, self.failed = cancel, failed

    def is_set(self) -> bool:
        return self.failed.is_set() or (self.cancel is not None and self.cancel.is_set())


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _result(mode: str, steps: int, interval_steps: int, compute_s: float, files: int,
            checkpoint_bytes: int, training_time_s: float, final_wait_s: float, recs: list[dict],
            folder: Optional[Path]) -> CostResult:
    records = tuple(CheckpointRecord(step=r["step"], stall_s=r["stall_s"], persist_s=r["persist_s"],
                                     bytes=checkpoint_bytes, snapshot_s=r.get("snapshot_s", 0.0),
                                     wait_s=r.get("wait_s", 0.0)) for r in recs)
    persist_total = sum(r.persist_s for r in records)
    return CostResult(
        mode=mode, steps=steps, interval_steps=interval_steps, compute_s=compute_s, files=files,
        checkpoints=len(records), checkpoint_bytes=checkpoint_bytes if mode != "none" else 0,
        training_time_s=training_time_s,
        stall_s_total=float(sum(r.stall_s for r in records)),
        stall_s_per_checkpoint=_mean([r.stall_s for r in records]),
        persist_s_mean=_mean([r.persist_s for r in records]),
        write_gib_per_s=(len(records) * checkpoint_bytes / GIB / persist_total) if persist_total else 0.0,
        snapshot_s_mean=_mean([r.snapshot_s for r in records]) if mode == "async" else 0.0,
        overlap_wait_s_total=float(sum(r.wait_s for r in records)),
        final_wait_s=final_wait_s if mode == "async" else 0.0,
        records=records, folder=folder)


def overhead_percent(result: CostResult, baseline: CostResult) -> float:
    """How much longer training took with checkpoints than without: (training time − the baseline's)
    ÷ the baseline's × 100. The baseline is a run of the same steps and compute (mode none)."""
    if (baseline.steps, baseline.compute_s) != (result.steps, result.compute_s):
        raise ValueError(f"baseline of {baseline.steps} steps × {baseline.compute_s} s does not match "
                         f"{result.steps} steps × {result.compute_s} s")
    if baseline.training_time_s <= 0:
        raise ValueError("baseline training time is not positive")
    return (result.training_time_s - baseline.training_time_s) / baseline.training_time_s * 100.0


def _positive(**values: float) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or math.isinf(v):
            raise ValueError(f"{name} {v!r}: a positive number")


def _ceil(x: float) -> int:
    # 15 s / (0.03 s × 1 %) is 50000.00000000001 in floating point: do not let that become 50001 steps.
    return max(1, math.ceil(round(x, 9)))


def shortest_interval_for_overhead(write_gib_per_s: float, checkpoint_bytes: int, step_s: float,
                                   limit_percent: float = 5.0, mode: str = "sync",
                                   snapshot_gib_per_s: Optional[float] = None) -> int:
    """The smallest checkpoint interval, in steps, whose modelled overhead is at most `limit_percent`.

    The model (steady state, one checkpoint per interval, rates as measured):
      persist_s  = checkpoint_bytes / (write_gib_per_s · 2^30)      the write + fsync
      snapshot_s = checkpoint_bytes / (snapshot_gib_per_s · 2^30)   the in-memory copy (async)
      sync:  overhead = persist_s / (interval · step_s)
             → interval = ceil(persist_s / (step_s · limit))
      async: overhead = snapshot_s / (interval · step_s), and the writer must finish before the next
             checkpoint (else training waits for it): interval · step_s ≥ persist_s
             → interval = max(ceil(snapshot_s / (step_s · limit)), ceil(persist_s / step_s))
    Assumptions: the write rate does not depend on the interval (no contention with the training's
    own I/O, a device that is not slower when written in bursts), the async writer's I/O does not
    slow compute (no CPU or memory-bandwidth contention), the overhead is relative to compute time
    alone, and the stall of the job's last checkpoint is left out (it is paid once, not per interval).
    Example: 1 GiB at 1 GiB/s with 0.1 s steps and 5 % → sync: 1 s / (0.1 s × 0.05) = 200 steps."""
    if mode not in ("sync", "async"):
        raise ValueError(f"mode {mode!r}: sync or async")
    _positive(write_gib_per_s=write_gib_per_s, checkpoint_bytes=checkpoint_bytes, step_s=step_s,
              limit_percent=limit_percent)
    limit = limit_percent / 100.0
    persist_s = checkpoint_bytes / (write_gib_per_s * GIB)
    if mode == "sync":
        return _ceil(persist_s / (step_s * limit))
    if snapshot_gib_per_s is None:
        raise ValueError("async needs snapshot_gib_per_s (the measured in-memory copy rate)")
    _positive(snapshot_gib_per_s=snapshot_gib_per_s)
    snapshot_s = checkpoint_bytes / (snapshot_gib_per_s * GIB)
    return max(_ceil(snapshot_s / (step_s * limit)), _ceil(persist_s / step_s))


def restore_s(checkpoint_bytes: int, read_gib_per_s: float) -> float:
    """The seconds a restore takes at a measured read rate: checkpoint_bytes / (read_gib_per_s · 2^30)."""
    _positive(checkpoint_bytes=checkpoint_bytes, read_gib_per_s=read_gib_per_s)
    return checkpoint_bytes / (read_gib_per_s * GIB)
