"""Emulated-accelerator training study (DLIO / MLPerf Storage style).

Reproduces "Accelerating Machine Learning Performance / Decreasing Training
Times with KIOXIA CM7 Series SSDs" (2024), which ran DLIO's unet3d workload
with 8..18 emulated V100s, and MLPerf Storage's rule: a storage system
supports the largest number of accelerators whose utilization (AU) stays at or
above a threshold (90 % unet3d/resnet50, 70 % cosmoflow).

An emulated accelerator is one process (no MPI) with its own loader: a pool of
read threads that each produce whole batches in turn (PyTorch DataLoader
semantics: worker k makes batches k, k+T, ...; `prefetch` ready batches per
thread). Every epoch the files are shuffled with a seeded RNG and dealt to the
accelerators round robin. Each step the accelerator

  1. takes the next batch from its loader (waits if the data is not read yet),
  2. "computes": sleeps for the workload's compute time per batch — the only
     stand-in for work; the sleep's overshoot is measured,
  3. optionally writes a checkpoint (rank 0, every N steps),
  4. meets the other accelerators at a barrier (the all-reduce), so the
     slowest sets the pace.

AU % = compute time ÷ step wall time over all steps but the first. The
emulator's own overheads — the sleep overshoot of the accelerator that closed
the step and the barrier's release latency after the last arrival — are
measured per step and taken out of the wall time, so they never look like
storage slowness; they are reported as columns.

The loader keeps running across epoch boundaries (like persistent PyTorch
workers that prefetch the next epoch): with the scaled-down quick datasets a
per-epoch restart would otherwise dominate the few steps an epoch has.

Page cache: a small dataset read for several epochs would come from memory.
Two ways to keep reads on the device (recorded per run, `dataset_sizing`):
  mlperf      the dataset is at least 5 × the host's memory (MLPerf Storage rule);
  memory_cap  the accelerators run in a child cgroup whose memory limit caps
              their page cache (cgroup v1 and v2 charge page cache to the
              cgroup); the dataset must be at least 5 × that cap, so at most
              ~20 % of reads can hit the cache. Loader buffers are allocated
              before the processes join, so the cap is almost all page cache.
              Without a memory cgroup the loader evicts each file after reading
              it (fadvise DONTNEED) instead, and the run says so.
`odirect: true` bypasses the page cache altogether (aligned reads).

MB = 10^6 bytes, MiB = 2^20 bytes; column names say which.
"""
from __future__ import annotations

import array
import ctypes
import json
import math
import mmap
import multiprocessing as mp
import os
import queue
import shutil
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from . import cache, cgroups, inventory, monitor, results, targets as targets_mod
from .config import Params, ParamsError, Strict, sorted_counts

STUDY = "emulate"
TITLE = "Emulated-accelerator training (DLIO / MLPerf Storage style)"
ALIGN = 4096                 # O_DIRECT alignment (offset, length and buffer)
MLPERF_DATASET_FACTOR = 5    # dataset >= 5 x memory available to the run
LAT_BINS_PER_DECADE = 20
LAT_EDGES_US = np.logspace(0, 8, 8 * LAT_BINS_PER_DECADE + 1)   # 1 us .. 100 s
BARRIER_TIMEOUT_S = 600.0


# --------------------------------------------------------------------------- parameters
class WorkloadSpec(Strict):
    """One training workload as DLIO / MLPerf Storage describe it."""

    description: str = ""
    format: Literal["npz", "tfrecord"]
    samples_per_file: int = Field(1, ge=1, le=1_000_000)
    record_bytes: int = Field(ge=1, le=1 << 40)          # bytes of one sample
    record_bytes_stdev: int = Field(0, ge=0, le=1 << 40)
    batch_size: int = Field(ge=1, le=1_000_000)
    batch_size_by_accelerator: dict[str, int] = Field(default_factory=dict)
    compute_s: dict[str, float]                          # accelerator type -> s per batch
    read_threads: int = Field(4, ge=1, le=256)
    au_threshold_percent: float = Field(90.0, gt=0, le=100)

    @field_validator("compute_s")
    @classmethod
    def _compute(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("compute_s needs at least one accelerator type, e.g. {v100: 1.3604}")
        bad = {k: s for k, s in v.items() if s is None or not s > 0 or not math.isfinite(s)}
        if bad:
            raise ValueError(f"compute time per batch must be > 0 seconds, got {bad}")
        return v

    @field_validator("batch_size_by_accelerator")
    @classmethod
    def _batches(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: b for k, b in v.items() if not isinstance(b, int) or b < 1}
        if bad:
            raise ValueError(f"batch sizes must be whole numbers >= 1, got {bad}")
        return v

    def batch_for(self, accelerator: str) -> int:
        return self.batch_size_by_accelerator.get(accelerator, self.batch_size)


# Reference values used by DLIO / MLPerf Storage (issue 4's table).
WORKLOADS: dict[str, dict] = {
    "unet3d": dict(description="3D U-Net, medical image segmentation (KiTS19): one sample per npz file",
                   format="npz", samples_per_file=1, record_bytes=146_600_628,
                   record_bytes_stdev=68_341_808, batch_size=7, batch_size_by_accelerator={"v100": 4},
                   compute_s={"v100": 1.3604, "a100": 0.636, "h100": 0.323}, read_threads=4,
                   au_threshold_percent=90.0),
    "resnet50": dict(description="ResNet-50, ImageNet: 1,251 samples per TFRecord file",
                     format="tfrecord", samples_per_file=1251, record_bytes=114_660,
                     record_bytes_stdev=0, batch_size=400, batch_size_by_accelerator={"v100": 64},
                     compute_s={"v100": 0.195, "a100": 0.435, "h100": 0.224}, read_threads=8,
                     au_threshold_percent=90.0),
    "cosmoflow": dict(description="CosmoFlow, cosmology 3D CNN: one sample per TFRecord file",
                      format="tfrecord", samples_per_file=1, record_bytes=2_828_486,
                      record_bytes_stdev=71_311, batch_size=1,
                      compute_s={"a100": 0.00551, "h100": 0.00350}, read_threads=4,
                      au_threshold_percent=70.0),
}


def merged_spec(name: str, overrides: dict[str, dict]) -> WorkloadSpec:
    """Built-in reference values with the user's overrides on top (or a new workload)."""
    base = dict(WORKLOADS.get(name, {}))
    extra = overrides.get(name) or {}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    try:
        return WorkloadSpec.model_validate(base)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])} = {e.get('input')!r}: {e['msg']}"
                 for e in exc.errors()]
        raise ValueError(f"workload '{name}': " + "; ".join(lines)) from None


class EmulateParams(Strict):
    workloads: list[str] = Field(default_factory=lambda: ["unet3d"], min_length=1)
    accelerator_type: str = "v100"                  # key of each workload's compute_s
    workload_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    accelerators: list[int] = Field(default_factory=lambda: [1, 2, 3, 4], min_length=1)
    stop_below_threshold: bool = False              # stop a target's sweep once AU < threshold
    repeats: int = Field(3, ge=1, le=100)
    epochs: int = Field(3, ge=1, le=10_000)
    num_files: int | None = Field(336, ge=1, le=100_000_000)
    dataset_sizing: Literal["mlperf", "memory_cap", "fixed"] = "memory_cap"
    memory_limit_mib: int = Field(32, ge=16, le=1 << 24)
    odirect: bool = False
    readahead: bool | None = None                   # None: off under the memory cap, else the kernel's
    read_threads: int | None = Field(None, ge=1, le=256)   # None: the workload's own
    prefetch: int = Field(2, ge=1, le=64)           # ready batches per read thread
    read_block_kib: int = Field(1024, ge=4, le=65536)
    checkpoint_every_steps: int = Field(0, ge=0)    # 0 = no checkpoints
    checkpoint_mib: float = Field(0, ge=0, le=1 << 20)
    seed: int = 0

    @field_validator("accelerators")
    @classmethod
    def _accelerators(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "accelerator counts", 1, 1024)

    @field_validator("read_block_kib")
    @classmethod
    def _block(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"read_block_kib must be a multiple of 4 (O_DIRECT alignment), got {v}")
        return v

    @model_validator(mode="after")
    def _check(self):
        known = sorted(set(WORKLOADS) | set(self.workload_overrides))
        unknown = [w for w in self.workloads if w not in known]
        if unknown:
            raise ValueError(f"unknown workload(s) {unknown}; allowed: {known} "
                             "(define new ones under emulate.workload_overrides)")
        if len(set(self.workloads)) != len(self.workloads):
            raise ValueError(f"workloads listed twice: {self.workloads}")
        for name in self.workload_overrides:
            merged_spec(name, self.workload_overrides)   # raises with the workload's name
        for name in self.workloads:
            spec = merged_spec(name, self.workload_overrides)
            if self.accelerator_type not in spec.compute_s:
                raise ValueError(f"workload '{name}' has no compute time for accelerator_type "
                                 f"'{self.accelerator_type}'; it has {sorted(spec.compute_s)}")
            if self.num_files is not None:
                per_acc = self.num_files // max(self.accelerators) * spec.samples_per_file
                batch = spec.batch_for(self.accelerator_type)
                if per_acc < batch:
                    raise ValueError(
                        f"workload '{name}': num_files = {self.num_files} gives each of "
                        f"{max(self.accelerators)} accelerators {per_acc} samples per epoch, fewer "
                        f"than one batch of {batch}; raise num_files to at least "
                        f"{math.ceil(batch / spec.samples_per_file) * max(self.accelerators)}")
        if self.dataset_sizing in ("memory_cap", "fixed") and self.num_files is None:
            raise ValueError(f"dataset_sizing = {self.dataset_sizing} needs num_files (only mlperf "
                             "derives the file count from the host's memory)")
        if self.dataset_sizing == "memory_cap":
            cap = self.memory_limit_mib * 2**20
            for name in self.workloads:
                spec = merged_spec(name, self.workload_overrides)
                size = self.num_files * spec.samples_per_file * spec.record_bytes
                if size < MLPERF_DATASET_FACTOR * cap:
                    need = math.ceil(MLPERF_DATASET_FACTOR * cap / (spec.samples_per_file * spec.record_bytes))
                    raise ValueError(
                        f"workload '{name}': dataset of {size / 1e6:.0f} MB is smaller than "
                        f"{MLPERF_DATASET_FACTOR} x memory_limit_mib ({MLPERF_DATASET_FACTOR * cap / 1e6:.0f} MB), "
                        f"so page-cache hits could exceed 20 %; raise num_files to >= {need} or lower "
                        "memory_limit_mib")
        if (self.checkpoint_every_steps > 0) != (self.checkpoint_mib > 0):
            raise ValueError("checkpoints need both checkpoint_every_steps > 0 and checkpoint_mib > 0 "
                             "(or both 0 to disable)")
        return self

    def spec(self, name: str) -> WorkloadSpec:
        return merged_spec(name, self.workload_overrides)


# --------------------------------------------------------------------------- dataset
def sample_sizes(spec: WorkloadSpec, num_files: int, seed: int) -> np.ndarray:
    """Bytes of every sample, shape (files, samples_per_file): normal(mean, stdev), clipped."""
    rng = np.random.default_rng([seed, 17])
    shape = (num_files, spec.samples_per_file)
    if spec.record_bytes_stdev == 0:
        return np.full(shape, spec.record_bytes, dtype=np.int64)
    sizes = rng.normal(spec.record_bytes, spec.record_bytes_stdev, size=shape)
    hi = spec.record_bytes + 4 * spec.record_bytes_stdev
    return np.clip(np.rint(sizes), min(4096, spec.record_bytes), hi).astype(np.int64)


def _write_npz(path: Path, nbytes: int, rng: np.random.Generator) -> tuple[int, int]:
    """One uncompressed npz holding a uint8 array of nbytes random bytes; (offset, length) read."""
    arr = np.frombuffer(rng.bytes(int(nbytes)), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, x=arr)
    return 0, path.stat().st_size   # the loader reads the whole file, as np.load would


def _masked_crc(data: bytes) -> int:
    """TFRecord masked CRC-32C (only used on the 8-byte length headers: cheap in Python)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _write_tfrecord(path: Path, sizes: np.ndarray, rng: np.random.Generator) -> list[tuple[int, int]]:
    """TFRecord framing (length, length CRC, data, data CRC) around random payloads.

    The data CRC is written as 0 (computing CRC-32C of GBs in Python would dominate
    generation; no reader here checks it). Returns (offset, frame length) per sample.
    """
    import struct

    spans = []
    with open(path, "wb") as fh:
        pos = 0
        for n in sizes:
            n = int(n)
            header = struct.pack("<Q", n)
            fh.write(header + struct.pack("<I", _masked_crc(header)))
            fh.write(rng.bytes(n))
            fh.write(b"\0\0\0\0")
            spans.append((pos, n + 16))
            pos += n + 16
    return spans


def dataset_spec(name: str, spec: WorkloadSpec, num_files: int, seed: int) -> dict:
    return {"workload": name, "format": spec.format, "num_files": num_files,
            "samples_per_file": spec.samples_per_file, "record_bytes": spec.record_bytes,
            "record_bytes_stdev": spec.record_bytes_stdev, "seed": seed, "version": 1}


def generate_dataset(directory: Path, name: str, spec: WorkloadSpec, num_files: int, seed: int,
                     log=print) -> dict:
    """Write the workload's files with real random bytes; reuse a matching set.

    Returns {"files": [...], "spans": [[(offset, length), ...] per file], "bytes": total}.
    """
    want = dataset_spec(name, spec, num_files, seed)
    manifest = directory / "manifest.json"
    if manifest.exists():
        try:
            old = json.loads(manifest.read_text())
            files = [directory / f for f in old.get("files", [])]
            if old.get("spec") == want and all(f.exists() for f in files):
                return {"files": [str(f) for f in files], "spans": old["spans"], "bytes": old["bytes"]}
        except (ValueError, KeyError):
            pass
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    sizes = sample_sizes(spec, num_files, seed)
    rng = np.random.default_rng([seed, 23])
    ext = "npz" if spec.format == "npz" else "tfrecord"
    names, spans = [], []
    for i in range(num_files):
        fname = f"img_{i:07d}_of_{num_files:07d}.{ext}"
        path = directory / fname
        if spec.format == "npz":
            spans.append([list(_write_npz(path, sizes[i, 0], rng))])
        else:
            spans.append([list(s) for s in _write_tfrecord(path, sizes[i], rng)])
        names.append(fname)
    total = sum((directory / n).stat().st_size for n in names)
    os.sync()
    results.write_json(manifest, {"spec": want, "files": names, "spans": spans, "bytes": total})
    log(f"generated {num_files} {spec.format} files for {name} ({total / 1e6:.1f} MB) in {directory}")
    return {"files": [str(directory / n) for n in names], "spans": spans, "bytes": total}


def planned_files(p: EmulateParams, spec: WorkloadSpec) -> int:
    """Files to generate: num_files, or at least 5 x host memory under the MLPerf rule."""
    if p.dataset_sizing in ("memory_cap", "fixed"):
        return int(p.num_files)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    per_file = spec.samples_per_file * spec.record_bytes
    return max(p.num_files or 0, math.ceil(MLPERF_DATASET_FACTOR * mem / per_file))


# --------------------------------------------------------------------------- schedule
def steps_per_epoch(num_files: int, samples_per_file: int, accelerators: int, batch: int) -> int:
    """Synchronous steps per epoch: every accelerator needs a full batch (drop_last)."""
    return (num_files // accelerators) * samples_per_file // batch


def epoch_files(num_files: int, accelerators: int, rank: int, epoch: int, seed: int) -> np.ndarray:
    """This accelerator's files in epoch `epoch`: seeded shuffle, dealt round robin."""
    order = np.random.default_rng([seed, epoch]).permutation(num_files)
    return order[rank::accelerators]


def batch_plan(spans: list, num_files: int, accelerators: int, rank: int, epochs: int, seed: int,
               batch: int, steps: int) -> list[list[tuple[int, int, int]]]:
    """All batches of one accelerator over all epochs: [(file index, offset, length), ...]."""
    out = []
    for epoch in range(epochs):
        samples = [(int(f), s[0], s[1]) for f in epoch_files(num_files, accelerators, rank, epoch, seed)
                   for s in spans[f]]
        out += [samples[i * batch:(i + 1) * batch] for i in range(steps)]
    return out


# --------------------------------------------------------------------------- loader
HUGE_PAGE = 2 << 20


def read_buffer(size: int) -> tuple[mmap.mmap, memoryview]:
    """A zeroed, 2 MiB-aligned read buffer, backed by transparent huge pages where allowed.

    With 4 KiB pages a 1 MiB O_DIRECT read needs 256 scatter-gather segments and is
    split into two device requests on disks that allow fewer (virtio: 254), which
    halves the request size a throttle's IOPS cap sees; fio's buffers avoid that, and
    so do these. Touching the pages now charges them before the process joins a cgroup.
    """
    span = -(-size // HUGE_PAGE) * HUGE_PAGE
    mm = mmap.mmap(-1, span + HUGE_PAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    off = (-addr) % HUGE_PAGE
    try:
        mm.madvise(mmap.MADV_HUGEPAGE, off, span)
    except (AttributeError, OSError, ValueError):
        pass
    view = memoryview(mm)[off:off + size]
    view[:] = bytes(size)
    return mm, view


class Loader:
    """T read threads; thread k reads batches k, k+T, ... into its own bounded queue.

    Reads are real: every byte of every sample is read with preadv into a
    preallocated (page-aligned) buffer in blocks of `block` bytes; each read call
    is timed. Buffers are allocated here, before the process joins a cgroup.
    """

    def __init__(self, files: list[str], batches: list, threads: int, prefetch: int, block: int,
                 odirect: bool = False, evict: bool = False, readahead: bool = True):
        self.files, self.batches = files, batches
        self.readahead = readahead
        self.threads = max(1, min(threads, len(batches) or 1))
        self.block, self.odirect, self.evict = block, odirect, evict
        self.queues = [queue.Queue(maxsize=prefetch) for _ in range(self.threads)]
        self._maps = [read_buffer(block) for _ in range(self.threads)]
        self.buffers = [view for _, view in self._maps]
        self.latencies = [array.array("d") for _ in range(self.threads)]
        self.bytes = [0] * self.threads
        self.stop = threading.Event()
        self.workers: list[threading.Thread] = []
        self.next_index = 0

    def start(self) -> None:
        for k in range(self.threads):
            t = threading.Thread(target=self._run, args=(k,), daemon=True, name=f"loader-{k}")
            t.start()
            self.workers.append(t)

    def _open(self, f: int) -> int:
        flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if self.odirect else 0)
        fd = os.open(self.files[f], flags)
        if not self.readahead and not self.odirect:
            # Many concurrent streams' readahead would overflow a small page-cache cap and be
            # evicted unread (device bytes > loader bytes); without it each call reads its block.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd

    def _close(self, fd: int) -> None:
        if self.evict:   # no memory cgroup: keep later epochs on the device
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    def read_sample(self, k: int, fd: int, offset: int, length: int) -> int:
        view, lat, block = self.buffers[k], self.latencies[k], self.block
        if self.odirect:   # aligned range covering the sample
            end = -(-(offset + length) // ALIGN) * ALIGN
            offset -= offset % ALIGN
        else:
            end = offset + length
        got_total, pos, clock = 0, offset, time.perf_counter
        while pos < end:
            n = min(block, end - pos)
            if self.odirect:
                n = -(-n // ALIGN) * ALIGN
            t0 = clock()
            got = os.preadv(fd, [view[:n]], pos)
            lat.append(clock() - t0)
            if got <= 0:
                break
            got_total += got
            pos += got
        return got_total

    def read_batch(self, k: int, batch) -> int:
        total, fd, open_f = 0, None, None
        try:
            for f, offset, length in batch:
                if f != open_f:   # consecutive samples of one file share the descriptor
                    if fd is not None:
                        self._close(fd)
                    fd, open_f = self._open(f), f
                total += self.read_sample(k, fd, offset, length)
        finally:
            if fd is not None:
                self._close(fd)
        return total

    def _run(self, k: int) -> None:
        q = self.queues[k]
        try:
            for i in range(k, len(self.batches), self.threads):
                n = self.read_batch(k, self.batches[i])
                self.bytes[k] += n
                while not self.stop.is_set():
                    try:
                        q.put((i, n, None), timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
        except BaseException:   # the consumer re-raises it with the step that needed it
            q.put((-1, 0, traceback.format_exc()))

    def next(self) -> int:
        """Bytes of the next batch, in order; blocks until it is read."""
        i = self.next_index
        got, n, err = self.queues[i % self.threads].get()
        if err is not None:
            raise RuntimeError(f"loader thread failed:\n{err}")
        if got != i:
            raise RuntimeError(f"loader delivered batch {got}, expected {i}")
        self.next_index += 1
        return n

    def close(self) -> None:
        self.stop.set()
        for q in self.queues:   # unblock producers waiting on a full queue
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for t in self.workers:
            t.join(timeout=5)

    def read_latencies(self) -> np.ndarray:
        return np.concatenate([np.frombuffer(a, dtype=np.float64) for a in self.latencies]) \
            if any(len(a) for a in self.latencies) else np.zeros(0)


def _die_with_parent() -> None:
    """Children get SIGKILL if the parent dies (no orphaned readers on the throttled disk)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def warm_up(block: int, odirect: bool) -> None:
    """Run the read path once on an in-memory file, before joining the cgroup.

    drop_caches evicts code pages too; without this the first real read would
    page in interpreter and numpy code through the throttle.
    """
    fd = os.memfd_create("storagebrief-warmup")
    try:
        os.write(fd, os.urandom(3 * ALIGN))
        loader = Loader([f"/proc/self/fd/{fd}"], [[(0, 0, 3 * ALIGN)]], 1, 1, block, odirect=False)
        loader.start()
        loader.next()
        loader.close()
        loader.read_latencies()
    finally:
        os.close(fd)
    np.percentile(np.arange(10.0), [50, 99])


def _accelerator(rank: int, n: int, cfg: dict, procs_files: list[str], barrier, start, out_q) -> None:
    """One emulated accelerator (a forked process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent handles Ctrl-C and stops us
    _die_with_parent()
    try:
        batches = batch_plan(cfg["spans"], len(cfg["files"]), n, rank, cfg["epochs"], cfg["seed"],
                             cfg["batch"], cfg["steps_per_epoch"])
        warm_up(cfg["block"], cfg["odirect"])
        loader = Loader(cfg["files"], batches, cfg["read_threads"], cfg["prefetch"], cfg["block"],
                        odirect=cfg["odirect"], evict=cfg["evict"], readahead=cfg["readahead"])
        ckpt_every, ckpt_bytes = cfg["checkpoint_every_steps"], cfg["checkpoint_bytes"]
        ckpt_buf = os.urandom(min(ckpt_bytes, 4 << 20)) if (rank == 0 and ckpt_bytes) else b""
        if cfg.get("fail_rank") == rank and cfg.get("fail_at_step") is None:
            raise RuntimeError("injected failure before the first step (test hook)")
        if procs_files:
            cgroups.join(procs_files)
        out_q.put(("ready", rank, None))
        start.wait()
        loader.start()
        compute, clock = cfg["compute_s"], time.perf_counter
        total = len(batches)
        times = np.zeros((total, 5))
        ckpt_s, ckpts = 0.0, 0
        for s in range(total):
            t0 = clock()
            loader.next()
            t1 = clock()
            time.sleep(compute)          # the only stand-in for work
            t2 = clock()
            if cfg.get("fail_rank") == rank and cfg.get("fail_at_step") == s:
                os._exit(3)              # test hook: die mid-run without a word
            if ckpt_buf and ckpt_every and (s + 1) % ckpt_every == 0:
                write_checkpoint(Path(cfg["checkpoint_dir"]), ckpt_bytes, ckpt_buf)
                ckpts += 1
                ckpt_s += clock() - t2
            t3 = clock()
            barrier.wait(BARRIER_TIMEOUT_S)   # the all-reduce: the slowest sets the pace
            times[s] = (t0, t1, t2, t3, clock())
        loader.close()
        out_q.put(("done", rank, {"times": times, "bytes": int(sum(loader.bytes)),
                                  "latencies": loader.read_latencies().astype(np.float32),
                                  "checkpoint_s": ckpt_s, "checkpoints": ckpts}))
    except threading.BrokenBarrierError:
        out_q.put(("aborted", rank, "barrier broken (another accelerator failed)"))
    except BaseException:
        out_q.put(("error", rank, traceback.format_exc()))


def write_checkpoint(directory: Path, nbytes: int, chunk: bytes) -> None:
    """Write nbytes (repeating a random chunk) and fsync, as a synchronous checkpoint would."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "checkpoint-rank0.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[:min(len(chunk), left)])
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- arithmetic
def job_metrics(times: np.ndarray, compute_s: float, batch: int, t_start: float) -> dict:
    """AU and timing from per-step timestamps, shape (accelerators, steps, 5).

    Columns per step: t0 batch wanted, t1 batch in hand, t2 compute done,
    t3 at barrier, t4 released. Step boundaries are the barrier releases (the
    same instant for every accelerator up to release latency). The first step is
    excluded from AU and samples/s (start-up: empty prefetch queues).
    """
    n, steps, _ = times.shape
    release = times[:, :, 4].max(axis=0)                 # step ends (last accelerator out)
    last_in = times[:, :, 3].max(axis=0)                 # last arrival at the barrier
    closer = times[:, :, 3].argmax(axis=0)               # accelerator that closed each step
    overshoot = (times[:, :, 2] - times[:, :, 1]) - compute_s
    release_lat = np.clip(release - last_in, 0, None)
    crit_overshoot = np.clip(overshoot[closer, np.arange(steps)], 0, None)
    bounds = np.concatenate([[t_start], release])
    wall = np.diff(bounds)                               # step wall time, job view
    overhead = np.minimum(crit_overshoot + release_lat, wall)
    data_wait = times[:, :, 1] - times[:, :, 0]
    peer_wait = times[:, :, 4] - times[:, :, 3]
    m = slice(1, None) if steps > 1 else slice(0, None)
    measured = float(wall[m].sum() - overhead[m].sum())
    au = 100.0 * compute_s * len(wall[m]) / measured if measured > 0 else 0.0
    own = 100.0 * compute_s * len(wall[m]) / (compute_s * len(wall[m]) + data_wait[:, m].sum(axis=1))
    window = float(release[-1] - (release[0] if steps > 1 else t_start))
    samples_m = n * batch * len(wall[m])
    return {
        "total_time_s": float(release[-1] - t_start),
        "measured_time_s": float(wall[m].sum()),
        "au_percent": min(100.0, au),
        "au_own_percent": own,                            # per accelerator: compute / (compute + own data wait)
        "samples": int(n * batch * steps),
        "samples_per_s": samples_m / window if window > 0 else float("nan"),
        "steps": int(steps),
        "compute_overshoot_s_total": float(np.clip(overshoot, 0, None).sum()),
        "compute_overshoot_us_mean": float(overshoot.mean() * 1e6),
        "barrier_release_s_total": float(release_lat.sum()),
        "emulator_overhead_s": float(overhead[m].sum()),
        "data_wait_s": data_wait.sum(axis=1),             # per accelerator
        "peer_wait_s": peer_wait.sum(axis=1),
        "overshoot_s": np.clip(overshoot, 0, None).sum(axis=1),
    }


def latency_stats(lat_s: np.ndarray, prefix: str = "read_latency_us") -> dict:
    if lat_s.size == 0:
        return {f"{prefix}_{k}": float("nan") for k in ("mean", "p50", "p90", "p99", "max")}
    us = lat_s.astype(np.float64) * 1e6
    p50, p90, p99 = np.percentile(us, [50, 90, 99])
    return {f"{prefix}_mean": float(us.mean()), f"{prefix}_p50": float(p50), f"{prefix}_p90": float(p90),
            f"{prefix}_p99": float(p99), f"{prefix}_max": float(us.max())}


def latency_histogram(lat_s: np.ndarray) -> list[dict]:
    counts, _ = np.histogram(np.clip(lat_s.astype(np.float64) * 1e6, 1, 1e8 - 1), bins=LAT_EDGES_US)
    return [{"bin_lo_us": float(LAT_EDGES_US[i]), "bin_hi_us": float(LAT_EDGES_US[i + 1]), "count": int(c)}
            for i, c in enumerate(counts) if c]


def throttle_cap_mb_per_s(profile, request_bytes: float | None = None) -> float:
    """Read rate the throttle allows: min(bandwidth cap, IOPS cap x request size); NaN if uncapped.

    The IOPS cap binds when requests are small: a 1 MiB read split by the
    device's segment limit counts as two requests.
    """
    if profile is None:
        return float("nan")
    caps = []
    if profile.read_mb_per_s:
        caps.append(float(profile.read_mb_per_s))
    if profile.read_iops and request_bytes:
        caps.append(profile.read_iops * request_bytes / 1e6)
    return min(caps) if caps else float("nan")


def throttle_au_bound(cap_mb_per_s: float, accelerators: int, demand_mb_per_s: float) -> float:
    """AU the throttle allows: min(100, cap / (N x demand)); NaN when not capped."""
    if not cap_mb_per_s or math.isnan(cap_mb_per_s) or demand_mb_per_s <= 0:
        return float("nan")
    return min(100.0, 100.0 * cap_mb_per_s / (accelerators * demand_mb_per_s))


# --------------------------------------------------------------------------- one run
@contextmanager
def run_cgroup(target, run_id: str, memory_limit: int | None, warnings: list[str]):
    """A cgroup with the target's throttle and/or the page-cache cap; degrade with a warning.

    Yields (group or None, throttled: bool, capped: bool).
    """
    io = targets_mod.io_limits(target, accounting=True)
    limited = io is not None and any((io.read_bps, io.write_bps, io.read_iops, io.write_iops))
    if target.emulated and io is None:
        msg = f"target '{target.name}': emulated profile not applied: {target.device.reason}"
        if msg not in warnings:
            warnings.append(msg)
    attempts = [(memory_limit, io)]
    if memory_limit is not None and io is not None:
        attempts += [(None, io), (memory_limit, None)]   # keep what the machine allows
    group, last_err = None, None
    for mem, lim in attempts:
        if mem is None and lim is None:
            continue
        try:
            group = cgroups.Cgroup(f"{STUDY}-{target.name}-{run_id}", memory_limit_bytes=mem, io=lim).create()
            break
        except cgroups.CgroupUnavailable as exc:
            last_err = exc
    throttled = limited and group is not None and group.io is not None
    capped = group is not None and group.memory_limit_bytes is not None
    if limited and not throttled:
        msg = f"target '{target.name}': emulated profile not applied: {last_err}"
        if msg not in warnings:
            warnings.append(msg)
    if memory_limit is not None and not capped:
        msg = (f"page cache not capped (memory cgroup unavailable: {last_err}); the loader evicted each "
               "file after reading it (fadvise DONTNEED) instead")
        if msg not in warnings:
            warnings.append(msg)
    try:
        yield group, throttled, capped
    finally:
        if group is not None:
            group.remove()


def cgroup_read_stats(group, device) -> tuple[int, int] | None:
    """(bytes, requests) the run's own processes read from the target's device."""
    if group is None or device is None or device.major is None:
        return None
    return group.io_read_stats((device.major, device.minor))


class CgroupIoSampler:
    """Samples the run's own device reads (cgroup blkio counters) at the monitor's interval.

    The monitor's counters are device-wide, so other work on a shared disk shows up
    in them; these count only the accelerators' requests (throttled or not).
    """

    def __init__(self, group, device, interval_s: float):
        self.group, self.device, self.interval_s = group, device, interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        st = cgroup_read_stats(self.group, self.device)
        if st is not None:
            self.samples.append((time.monotonic(), st[0]))

    def start(self) -> None:
        self._take()
        if not self.samples:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True, name="storagebrief-cgroup-io")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._take()

    def timeseries(self) -> list[dict]:
        t0 = self.samples[0][0] if self.samples else 0.0
        return [{"t_s": round(b[0] - t0, 4), "cgroup_read_mb_per_s": (b[1] - a[1]) / max(b[0] - a[0], 1e-9) / 1e6}
                for a, b in zip(self.samples, self.samples[1:]) if b[0] - a[0] >= self.interval_s * 0.2]

    def summary(self) -> dict:
        series = self.timeseries()
        if not series:
            return {}
        return {"cgroup_read_mb_per_s_max": max(r["cgroup_read_mb_per_s"] for r in series)}


def run_once(cfg: dict, accelerators: int, procs_files: list[str] | None, on_start=None,
             start_timeout_s: float = 120.0) -> dict:
    """Run N emulated accelerators once; returns raw results or raises with the reason.

    A failed or killed accelerator stops the run: the barrier is broken, the other
    accelerators are terminated, and RuntimeError names who failed and why.
    """
    ctx = mp.get_context("fork")
    barrier, start, out_q = ctx.Barrier(accelerators), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_accelerator, args=(r, accelerators, cfg, procs_files or [], barrier, start, out_q),
                         daemon=True, name=f"accelerator-{r}") for r in range(accelerators)]
    for pr in procs:
        pr.start()
    done: dict[int, dict] = {}
    failure = None
    try:
        ready, deadline = 0, time.monotonic() + start_timeout_s
        while ready < accelerators and failure is None:
            try:
                kind, rank, payload = out_q.get(timeout=0.5)
            except queue.Empty:
                failure = _dead(procs, done) or (f"accelerators not ready after {start_timeout_s:.0f} s"
                                                 if time.monotonic() > deadline else None)
                continue
            if kind == "ready":
                ready += 1
            else:
                failure = f"accelerator {rank} failed before the first step:\n{payload}"
        if failure is None:
            if on_start:
                on_start()
            t_start = time.perf_counter()
            start.set()
            while len(done) < accelerators and failure is None:
                try:
                    kind, rank, payload = out_q.get(timeout=0.5)
                except queue.Empty:
                    failure = _dead(procs, done)
                    continue
                if kind == "done":
                    done[rank] = payload
                elif kind == "error":
                    failure = f"accelerator {rank} failed:\n{payload}"
                elif kind == "aborted":
                    failure = failure or _dead(procs, done) or f"accelerator {rank}: {payload}"
        if failure is not None:
            raise RuntimeError(failure)
    finally:
        if failure is not None or len(done) < accelerators:
            barrier.abort()
            for pr in procs:
                if pr.is_alive():
                    pr.terminate()
        for pr in procs:
            pr.join(timeout=5)
            if pr.is_alive():
                pr.kill()
                pr.join()
        out_q.close()
        out_q.cancel_join_thread()
    return {"t_start": t_start, "ranks": [done[r] for r in range(accelerators)]}


def _dead(procs, done) -> str | None:
    """A reason when an accelerator exited without reporting its results."""
    for r, pr in enumerate(procs):
        if r not in done and pr.exitcode is not None:
            code = pr.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            hint = " (SIGKILL: out of memory in the memory-capped cgroup?)" if code == -signal.SIGKILL else ""
            return f"accelerator {r} died: {how}{hint} before reporting its results"
    return None


def summarize(raw: dict, cfg: dict, accelerators: int) -> tuple[dict, list[dict], np.ndarray]:
    """Run-level metrics, per-accelerator rows and all read latencies (seconds)."""
    times = np.stack([r["times"] for r in raw["ranks"]])
    jm = job_metrics(times, cfg["compute_s"], cfg["batch"], raw["t_start"])
    lat = np.concatenate([r["latencies"] for r in raw["ranks"]])
    loader_bytes = sum(r["bytes"] for r in raw["ranks"])
    total = jm["total_time_s"]
    row = {k: v for k, v in jm.items() if not isinstance(v, np.ndarray)}
    row.update({
        "au_own_percent_min": float(jm["au_own_percent"].min()),
        "au_own_percent_mean": float(jm["au_own_percent"].mean()),
        "data_wait_s_total": float(jm["data_wait_s"].sum()),
        "loader_bytes": int(loader_bytes),
        "loader_read_mb_per_s": loader_bytes / total / 1e6,
        "loader_read_mib_per_s": loader_bytes / total / 2**20,
        "reads": int(lat.size),
        **latency_stats(lat),
        "checkpoints": int(sum(r["checkpoints"] for r in raw["ranks"])),
        "checkpoint_s_total": float(sum(r["checkpoint_s"] for r in raw["ranks"])),
    })
    per = []
    for r, rk in enumerate(raw["ranks"]):
        per.append({"accelerator": r, "steps": int(jm["steps"]), "samples": int(jm["steps"] * cfg["batch"]),
                    "au_own_percent": float(jm["au_own_percent"][r]),
                    "data_wait_s": float(jm["data_wait_s"][r]), "peer_wait_s": float(jm["peer_wait_s"][r]),
                    "compute_overshoot_s": float(jm["overshoot_s"][r]),
                    "loader_bytes": int(rk["bytes"]), "loader_read_mb_per_s": rk["bytes"] / total / 1e6,
                    "reads": int(rk["latencies"].size), **latency_stats(rk["latencies"])})
    return row, per, lat


# --------------------------------------------------------------------------- study
def plan(p: EmulateParams) -> list[tuple[str, int, int]]:
    """(workload, accelerators, repeat) in run order (targets interleave inside)."""
    return [(w, n, r) for w in p.workloads for n in p.accelerators for r in range(1, p.repeats + 1)]


def run_config(p: EmulateParams, name: str, data: dict, accelerators: int, evict: bool,
               checkpoint_dir: Path, capped: bool = False) -> dict:
    spec = p.spec(name)
    batch = spec.batch_for(p.accelerator_type)
    return {"files": data["files"], "spans": [[tuple(s) for s in f] for f in data["spans"]],
            "epochs": p.epochs, "seed": p.seed, "batch": batch,
            "steps_per_epoch": steps_per_epoch(len(data["files"]), spec.samples_per_file, accelerators, batch),
            "compute_s": spec.compute_s[p.accelerator_type], "read_threads": p.read_threads or spec.read_threads,
            "prefetch": p.prefetch, "block": p.read_block_kib * 1024, "odirect": p.odirect, "evict": evict,
            "readahead": p.readahead if p.readahead is not None else not capped,
            "checkpoint_every_steps": p.checkpoint_every_steps,
            "checkpoint_bytes": int(p.checkpoint_mib * 2**20), "checkpoint_dir": str(checkpoint_dir)}


def run_study(params: Params, out_dir: str | Path = "reports/emulate", log=print, _fault: dict | None = None):
    """Sweep accelerators per workload and target; write runs.csv and friends to out_dir."""
    import pandas as pd

    p: EmulateParams = params.section(STUDY)
    out_dir = Path(out_dir)
    tlist = targets_mod.resolve_all(params)
    # ---- everything that can be wrong is checked before any measured work
    sizes: dict[str, int] = {}
    for name in p.workloads:
        spec = p.spec(name)
        files = planned_files(p, spec)
        steps = steps_per_epoch(files, spec.samples_per_file, max(p.accelerators), spec.batch_for(p.accelerator_type))
        if steps < 1:
            raise ParamsError(f"emulate: workload '{name}' with {files} files has no full step for "
                              f"{max(p.accelerators)} accelerators")
        sizes[name] = files
    per_fs: dict[int, int] = {}   # targets on one filesystem share its free space
    for t in tlist:
        need = 0
        for name in p.workloads:
            spec = p.spec(name)
            d = t.study_dir(STUDY) / name / "data"
            existing = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) if d.exists() else 0
            need += max(0, int(sizes[name] * spec.samples_per_file * (spec.record_bytes + 64)) - existing)
        need += int(p.checkpoint_mib * 2**20)
        probe = t.path
        while not probe.exists():
            probe = probe.parent
        dev = os.stat(probe).st_dev
        per_fs[dev] = per_fs.get(dev, 0) + need
        targets_mod.check_free_space(t, per_fs[dev], f"the emulate datasets ({', '.join(p.workloads)}) of this "
                                                     "and earlier targets on the same filesystem")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "timeseries").mkdir(exist_ok=True)
    warnings: list[str] = []
    datasets: dict[tuple[str, str], dict] = {}
    for t in tlist:
        for name in p.workloads:
            data = generate_dataset(t.study_dir(STUDY) / name / "data", name, p.spec(name), sizes[name], p.seed, log)
            datasets[(t.name, name)] = data
        sample = [Path(f) for f in datasets[(t.name, p.workloads[0])]["files"][:16]]
        targets_mod.check_profile_speed(t, sample)
    memory_limit = p.memory_limit_mib * 2**20 if p.dataset_sizing == "memory_cap" and not p.odirect else None
    results.write_json(out_dir / "inventory.json", inventory.collect(params, tlist))
    results.write_json(out_dir / "study.json", study_description(p, datasets, tlist))
    table = results.RunTable(out_dir / "runs.csv")
    acc_rows, hist_rows = [], []
    stopped: set[tuple[str, str]] = set()
    last_n: dict[str, int] = {}
    for name, n, repeat in plan(p):
        spec = p.spec(name)
        if p.stop_below_threshold and repeat == 1 and n != last_n.get(name):
            frame = table.frame()
            if not frame.empty and name in last_n:
                prev = frame[(frame.workload == name) & (frame.accelerators == last_n[name])]
                for tname, au in prev.groupby("target").au_percent.mean().items():
                    if au < spec.au_threshold_percent:
                        stopped.add((name, tname))
            last_n[name] = n
        for t in tlist:
            if (name, t.name) in stopped:
                continue
            data = datasets[(t.name, name)]
            run_id = f"{STUDY}-{name}-{t.name}-n{n}-r{repeat}"
            log(f"[{run_id}] {n} accelerator(s)")
            method = cache.cold_cache([Path(data["files"][0]).parent], params.run.cold_cache)
            mon = monitor.Monitor(t.device.name if t.device else None, params.run.monitor_interval_s)
            started = results.utc_now()
            with run_cgroup(t, run_id, memory_limit, warnings) as (group, throttled, capped):
                evict = memory_limit is not None and not capped
                cfg = run_config(p, name, data, n, evict, t.study_dir(STUDY) / "checkpoints", capped)
                if _fault:
                    cfg.update(_fault)
                cgio = CgroupIoSampler(group, t.device, params.run.monitor_interval_s)

                def on_start():
                    mon.start()
                    cgio.start()
                try:
                    raw = run_once(cfg, n, group.procs_files if group else None, on_start=on_start)
                finally:
                    cgio.stop()
                    if mon.snapshots:
                        mon.stop()
                mem_stats = group.memory_stats() if capped else {}
                cg = cgroup_read_stats(group, t.device)
            row, per, lat = summarize(raw, cfg, n)
            req = cg[0] / cg[1] if cg and cg[1] else None
            cap = throttle_cap_mb_per_s(t.profile if throttled else None, req)
            demand = cfg["batch"] * (data["bytes"] / (len(data["files"]) * spec.samples_per_file)) / cfg["compute_s"] / 1e6
            sizing = ("odirect (page cache bypassed)" if p.odirect else
                      "memory_cap" if capped else
                      "memory_cap->fadvise_evict (no memory cgroup)" if memory_limit else
                      "fixed (page cache not controlled)" if p.dataset_sizing == "fixed" else "mlperf")
            full = {"study": STUDY, "run_id": run_id, "target": t.name, "profile": t.profile_name or "",
                    "emulated": throttled, "workload": name, "accelerator_type": p.accelerator_type,
                    "accelerators": n, "repeat": repeat, "started_at": started, "cache_method": method,
                    "dataset_sizing": sizing, "memory_limit_bytes": memory_limit if capped else None,
                    "odirect": p.odirect, "num_files": len(data["files"]), "dataset_bytes": int(data["bytes"]),
                    "sample_bytes_mean": data["bytes"] / (len(data["files"]) * spec.samples_per_file),
                    "batch_size": cfg["batch"], "compute_s": cfg["compute_s"], "epochs": p.epochs,
                    "steps_per_epoch": cfg["steps_per_epoch"], "read_threads": cfg["read_threads"],
                    "prefetch": p.prefetch, "read_block_bytes": cfg["block"], "readahead": cfg["readahead"],
                    "demand_mb_per_s_per_accelerator": demand,
                    "throttle_cap_mb_per_s": cap,
                    "throttle_au_bound_percent": throttle_au_bound(cap, n, demand),
                    "au_threshold_percent": spec.au_threshold_percent, **row,
                    "au_pass": row["au_percent"] >= spec.au_threshold_percent,
                    "cgroup_read_bytes": cg[0] if cg else None,
                    "cgroup_read_requests": cg[1] if cg else None,
                    "cgroup_read_kib_per_request": cg[0] / cg[1] / 1024 if cg and cg[1] else None,
                    "cgroup_read_mb_per_s": cg[0] / row["total_time_s"] / 1e6 if cg else None,
                    "device_bytes_per_loader_byte": cg[0] / row["loader_bytes"] if cg and row["loader_bytes"] else None,
                    **cgio.summary(),
                    **mon.summary(), **mem_stats}
            results.write_csv(out_dir / "timeseries" / f"{run_id}.csv", pd.DataFrame(mon.timeseries()))
            if cgio.samples:
                results.write_csv(out_dir / "timeseries" / f"{run_id}-cgroup.csv", pd.DataFrame(cgio.timeseries()))
            table.append(full)
            ids = {"run_id": run_id, "target": t.name, "workload": name, "accelerators": n, "repeat": repeat}
            acc_rows += [{**ids, **r} for r in per]
            hist_rows += [{**ids, **h} for h in latency_histogram(lat)]
            results.write_csv(out_dir / "accelerators.csv", pd.DataFrame(acc_rows))
            results.write_csv(out_dir / "latency_histograms.csv", pd.DataFrame(hist_rows))
    for t in tlist:
        shutil.rmtree(t.study_dir(STUDY) / "checkpoints", ignore_errors=True)
    frame = table.frame()
    names = [t.name for t in tlist]
    results.write_json(out_dir / "notes.json", {"warnings": [w for t in tlist for w in t.warnings] + warnings})
    results.write_json(out_dir / "metrics.json", metrics(frame, names))
    results.write_json(out_dir / "mlperf_results.json", mlperf_results(frame))
    return frame


def study_description(p: EmulateParams, datasets: dict, tlist) -> dict:
    """What ran, for the brief: resolved workloads vs their reference values."""
    out = {"scale_note": "", "workloads": {}, "accelerator_type": p.accelerator_type, "epochs": p.epochs,
           "dataset_sizing": p.dataset_sizing, "memory_limit_mib": p.memory_limit_mib, "odirect": p.odirect}
    scaled = []
    for name in p.workloads:
        spec = p.spec(name)
        ref = WORKLOADS.get(name)
        entry = {"spec": spec.model_dump(), "reference": ref}
        data = datasets[(tlist[0].name, name)]
        entry["num_files"], entry["dataset_bytes"] = len(data["files"]), data["bytes"]
        if ref:
            ref_spec = WorkloadSpec.model_validate(ref)
            differs = (spec.record_bytes != ref_spec.record_bytes or
                       spec.compute_s.get(p.accelerator_type) != ref_spec.compute_s.get(p.accelerator_type) or
                       spec.batch_for(p.accelerator_type) != ref_spec.batch_for(p.accelerator_type))
            entry["scaled_down"] = differs
            if differs:
                scaled.append(
                    f"{name}: records {spec.record_bytes / 1e6:.2f} MB (reference {ref_spec.record_bytes / 1e6:.1f} MB), "
                    f"batch {spec.batch_for(p.accelerator_type)} (reference {ref_spec.batch_for(p.accelerator_type)}), "
                    f"compute {spec.compute_s[p.accelerator_type]} s per batch (reference "
                    f"{ref_spec.compute_s.get(p.accelerator_type)} s on {p.accelerator_type})")
        out["workloads"][name] = entry
    if scaled:
        out["scale_note"] = "; ".join(scaled)
    return out


# --------------------------------------------------------------------------- analysis
def supported(frame) -> "pd.DataFrame":
    """Accelerators supported per workload and target: largest N whose mean AU >= threshold."""
    import pandas as pd

    rows = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        thr = float(g.au_threshold_percent.iloc[0])
        au = g.groupby("accelerators").au_percent.mean()
        ok = au[au >= thr]
        n = int(ok.index.max()) if not ok.empty else 0
        rows.append({"workload": w, "target": t, "au_threshold_percent": thr, "accelerators_supported": n,
                     "au_percent_at_supported": float(au[n]) if n else float("nan"),
                     "max_accelerators_tested": int(au.index.max()),
                     "limited_by_sweep": bool(n == int(au.index.max()))})
    return pd.DataFrame(rows)


def drive_columns(frame) -> tuple[str, str, str]:
    """(average, maximum, source) columns for the drive-throughput tests.

    Prefer the run's own device reads (cgroup blkio counters, sampled like the
    monitor) when every run has them: the monitor's counters are device-wide and
    count other work on a shared disk too.
    """
    own = ("cgroup_read_mb_per_s", "cgroup_read_mb_per_s_max")
    if all(c in frame and frame[c].notna().all() for c in own):
        return own[0], own[1], "the run's own device reads (cgroup blkio counters)"
    return "device_read_mb_per_s_avg", "device_read_mb_per_s_max", "device-wide counters (/proc/diskstats)"


def headline_metrics(frame) -> list[tuple[str, str, str]]:
    avg, mx, _ = drive_columns(frame)
    return [("total_time_s", "lower", "Total time to complete training"),
            ("au_percent", "higher", "Average accelerator utilization"),
            ("samples_per_s", "higher", "Training sample throughput"),
            (avg, "higher", "Average drive read throughput (MB/s)"),
            (mx, "higher", "Maximum drive read throughput (MB/s)"),
            ("read_latency_us_mean", "lower", "Average read latency (loader, per read call)")]


def headlines(frame, target_names: list[str]) -> list[dict]:
    """The six KIOXIA tests: reference (first target) vs each other, over matched workload x N."""
    from .report import versus_reference

    return versus_reference(frame, target_names, ["workload", "accelerators"], headline_metrics(frame))


def metrics(frame, target_names: list[str]) -> dict:
    out: dict = {"runs": int(len(frame))}
    sup = supported(frame)
    for (w, t), g in frame.groupby(["workload", "target"]):
        means = g.groupby("accelerators")[["au_percent", "samples_per_s", "loader_read_mb_per_s"]].mean()
        s = sup[(sup.workload == w) & (sup.target == t)].iloc[0]
        out.setdefault(w, {})[t] = {
            "accelerators_supported": int(s.accelerators_supported),
            "au_percent_at_max_accelerators": float(means.au_percent.iloc[-1]),
            "max_samples_per_s": float(means.samples_per_s.max()),
            "max_loader_read_mb_per_s": float(means.loader_read_mb_per_s.max())}
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out


def mlperf_results(frame) -> dict:
    """MLPerf-Storage-like summary per workload, target and accelerator count (means over repeats).

    MLPerf Storage / DLIO report I/O as MB/s computed with 2^20 bytes; here the
    key says MiB. AU excludes the first step, as there.
    """
    out = {"benchmark": "storagebrief emulate (DLIO / MLPerf Storage style)", "results": [],
           "accelerators_supported": supported(frame).to_dict("records")}
    for (w, t, n), g in frame.groupby(["workload", "target", "accelerators"]):
        thr = float(g.au_threshold_percent.iloc[0])
        out["results"].append({
            "workload": w, "target": t, "accelerator_type": str(g.accelerator_type.iloc[0]),
            "num_accelerators": int(n), "repeats": int(len(g)),
            "train_au_percentage": [round(float(x), 3) for x in g.au_percent],
            "train_au_mean_percentage": float(g.au_percent.mean()),
            "train_au_stdev_percentage": float(g.au_percent.std(ddof=0)),
            "train_au_threshold_percentage": thr,
            "train_au_meet_expectation": "success" if g.au_percent.mean() >= thr else "fail",
            "train_throughput_mean_samples_per_second": float(g.samples_per_s.mean()),
            "train_io_mean_MiB_per_second": float(g.loader_read_mib_per_s.mean()),
            "train_io_mean_MB_per_second_1e6": float(g.loader_read_mb_per_s.mean()),
            "num_files": int(g.num_files.iloc[0]), "sample_bytes_mean": float(g.sample_bytes_mean.iloc[0]),
            "batch_size": int(g.batch_size.iloc[0]), "compute_s_per_batch": float(g.compute_s.iloc[0]),
            "epochs": int(g.epochs.iloc[0]), "dataset_sizing": str(g.dataset_sizing.iloc[0]),
        })
    return out


def days_saved_table(frame, ref: str, other: str, workload: str):
    """KIOXIA-style extrapolation: % faster, days saved per year, 100-epoch hours, models per year."""
    import pandas as pd

    g = frame[frame.workload == workload].groupby(["accelerators", "target"]).total_time_s.mean().unstack("target")
    if ref not in g or other not in g:
        return pd.DataFrame()
    epochs = int(frame[frame.workload == workload].epochs.iloc[0])
    rows = []
    for n, r in g[[ref, other]].dropna().iterrows():
        faster = (r[other] - r[ref]) / r[other] * 100
        h_ref, h_other = r[ref] * 100 / epochs / 3600, r[other] * 100 / epochs / 3600
        rows.append({"Accelerators": int(n), f"{ref}: s": r[ref], f"{other}: s": r[other],
                     f"{ref} faster %": faster, "Days saved / year": 365 * faster / 100,
                     f"{ref}: 100-epoch h": h_ref, f"{other}: 100-epoch h": h_other,
                     f"{ref}: models / year": 8760 / h_ref if h_ref else float("nan"),
                     f"{other}: models / year": 8760 / h_other if h_other else float("nan")})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- brief section
def figures(frame) -> list[tuple[str, str, str, str]]:
    """The six KIOXIA tests: (column, unit, title, hint)."""
    avg, mx, _ = drive_columns(frame)
    return [("total_time_s", "seconds", "Total time to complete training", "lower is better"),
            ("au_percent", "AU %", "Average accelerator utilization", "higher is better"),
            ("samples_per_s", "samples/s", "Training sample throughput", "higher is better"),
            (avg, "MB/s (10⁶ B)", "Average drive read throughput", "higher is better"),
            (mx, "MB/s (10⁶ B)", "Maximum drive read throughput", "higher is better"),
            ("read_latency_us_mean", "µs", "Average read latency (loader)", "lower is better")]


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def brief_section(study_dir, frame, names: list[str]) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns
    from .report import show_figure, show_md, show_table, style

    style()
    study_dir = Path(study_dir)
    desc_path = study_dir / "study.json"
    desc = json.loads(desc_path.read_text()) if desc_path.exists() else {}
    ref = names[0]
    repeats = int(frame.repeat.max())
    sizing = ", ".join(sorted(set(frame.dataset_sizing.astype(str))))
    show_md(
        f"**What ran.** Each emulated accelerator is a process with its own loader "
        f"({int(frame.read_threads.iloc[0])} read threads, {int(frame.prefetch.iloc[0])} batches prefetched per thread, "
        f"{int(frame.read_block_bytes.iloc[0]) // 1024} KiB reads) that reads every sample's bytes from the target, then "
        "sleeps for the accelerator's compute time per batch; all accelerators meet at a barrier every step "
        f"(the all-reduce). Files are reshuffled every epoch with a fixed seed. {int(frame.epochs.iloc[0])} epochs, "
        f"{repeats} repeat(s) per point, cold cache before every run, targets interleaved. AU % = compute ÷ wall time "
        "over all steps but the first, after removing the emulator's own measured overheads (sleep overshoot, "
        f"barrier release). Page cache kept out of the measurement by: **{sizing}**. "
        "MB = 10⁶ bytes, MiB = 2²⁰ bytes.")
    few = frame.loc[frame.steps.idxmin()]
    buffered = int(few.read_threads) * (int(few.prefetch) + 1)
    if buffered / int(few.steps) > 0.02:
        show_md(f"**Short runs.** The shortest run took {int(few.steps)} steps ({int(few.accelerators)} accelerators). Up to "
                f"{buffered} batches (read threads × (prefetch + 1)) are read during the first step, which AU excludes "
                "as DLIO does; on a storage-bound run those batches then arrive early, so its AU can be overstated by up "
                f"to about {100 * buffered / max(1, int(few.steps) - 1 - buffered):.0f} % of its value. The throttle "
                "bound in the analysis below is the steady-state figure.")
    if desc.get("scale_note"):
        show_md(f"**Scaled down.** This run's workload differs from the DLIO / MLPerf Storage reference values: "
                f"{desc['scale_note']}. The quick profile shrinks files and compute time so the sweep finishes in "
                "minutes on a small machine while each accelerator still demands a fixed bandwidth; absolute times "
                "are not comparable with published results, the shape of the curves is.")
    # Workload table
    wrows = []
    for w, g in frame.groupby("workload", sort=False):
        first = g.iloc[0]
        wrows.append({"Workload": w, "Files": int(first.num_files), "Dataset MB": first.dataset_bytes / 1e6,
                      "Sample MB (mean)": first.sample_bytes_mean / 1e6, "Batch": int(first.batch_size),
                      "Compute s / batch": first.compute_s, "Accelerator": first.accelerator_type,
                      "Demand MB/s per accelerator": first.demand_mb_per_s_per_accelerator,
                      "AU threshold %": first.au_threshold_percent})
    show_table(pd.DataFrame(wrows), "Workloads as run. Demand = batch × sample bytes ÷ compute time: the read "
                                    "rate one accelerator needs to stay busy.", floatfmt="{:,.3g}")
    palette = dict(zip(names, sns.color_palette("deep", len(names))))
    for w, g in frame.groupby("workload", sort=False):
        figs = figures(frame)
        for part, items in ((1, figs[:3]), (2, figs[3:])):
            fig, axes = plt.subplots(1, 3, figsize=(9.5, 3.1))
            for ax, (col, unit, title, hint) in zip(axes, items):
                if col not in g:
                    ax.set_visible(False)
                    continue
                sns.barplot(data=g, x="accelerators", y=col, hue="target", hue_order=names, palette=palette,
                            errorbar="sd", ax=ax)
                ax.set(xlabel="accelerators", ylabel=unit, title=f"{title}\n({hint})")
                ax.title.set_fontsize(9.5)
                if col == "au_percent":
                    thr = float(g.au_threshold_percent.iloc[0])
                    ax.axhline(thr, color="#c0392b", ls="--", lw=1)
                    ax.set_ylim(0, 105)
                if ax is not axes[0] and ax.get_legend():
                    ax.get_legend().remove()
                elif ax.get_legend():
                    ax.legend(fontsize=7, title=None)
            fig.tight_layout()
            cap = ("Tests 1–3: total time, AU (dashed: MLPerf threshold) and samples/s per accelerator count"
                   if part == 1 else
                   f"Tests 4–6: average and maximum drive read MB/s from {drive_columns(frame)[2]} (max = largest "
                   f"{frame.monitor_interval_s.iloc[0] if 'monitor_interval_s' in frame else ''} s window) and "
                   "average read latency per read call seen by the loaders")
            show_figure(fig, f"{w}: {cap}. Bars: means over repeats; error bars ±1 sd.")
        # Days saved
        for other in names[1:]:
            ds = days_saved_table(frame, ref, other, w)
            if ds.empty:
                continue
            show_table(ds, f"{w}: training days saved per year by {ref} over {other}, extrapolated as in the KIOXIA "
                           f"brief (365 days × the share of time saved; 100-epoch time = 100 ÷ {int(g.epochs.iloc[0])} × "
                           f"the {int(g.epochs.iloc[0])}-epoch time; models/year = 8,760 h ÷ 100-epoch hours).",
                       floatfmt="{:,.2f}")
            best = ds.loc[ds["Days saved / year"].idxmax()]
            show_md(f"**Analysis ({w}).** With {int(best.Accelerators)} accelerators {ref} finished "
                    f"{abs(best[f'{ref} faster %']):.1f} % {'faster' if best[f'{ref} faster %'] >= 0 else 'slower'} than "
                    f"{other} ({_fmt_s(best[f'{ref}: s'])} vs {_fmt_s(best[f'{other}: s'])}), which over a year of "
                    f"continuous training is ~{abs(best['Days saved / year']):.0f} days "
                    f"{'saved' if best['Days saved / year'] >= 0 else 'lost'}."
                    + (" The share of time saved carries over to full-size runs only as far as the scaled-down "
                       "workload keeps the same demand-to-bandwidth ratio; the hours and models per year are those "
                       "of the scaled-down run." if desc.get("scale_note") else ""))
    # Accelerators supported
    sup = supported(frame)
    tab = sup.rename(columns={"workload": "Workload", "target": "Target", "au_threshold_percent": "AU threshold %",
                              "accelerators_supported": "Accelerators supported",
                              "au_percent_at_supported": "AU % at that N",
                              "max_accelerators_tested": "Largest N tested",
                              "limited_by_sweep": "Limited by sweep"})
    show_table(tab, "Accelerators supported (MLPerf Storage rule): the largest accelerator count whose mean AU "
                    "stays at or above the threshold. 'Limited by sweep': the target passed at the largest N tried, "
                    "so it may support more.")
    # Fidelity / analysis text
    lines = []
    for (w, t), g in frame.groupby(["workload", "target"], sort=False):
        m = g.groupby("accelerators").agg(au=("au_percent", "mean"), dev=("device_read_mb_per_s_avg", "mean")
                                          if "device_read_mb_per_s_avg" in g else ("loader_read_mb_per_s", "mean"),
                                          loader=("loader_read_mb_per_s", "mean"),
                                          bound=("throttle_au_bound_percent", "mean"),
                                          lat=("read_latency_us_mean", "mean"),
                                          over=("emulator_overhead_s", "mean"), tot=("measured_time_s", "mean"))
        d = float(g.demand_mb_per_s_per_accelerator.iloc[0])
        nmax = int(m.index.max())
        s = sup[(sup.workload == w) & (sup.target == t)].iloc[0]
        text = (f"- **{t}** ({w}): AU {m.au.iloc[0]:.1f} % at {int(m.index[0])} accelerator(s) and {m.au.iloc[-1]:.1f} % at "
                f"{nmax}; loaders read {m.loader.iloc[-1]:.0f} MB/s at {nmax} against a demand of {nmax} × {d:.0f} = "
                f"{nmax * d:.0f} MB/s; supports {int(s.accelerators_supported)} accelerator(s) at ≥ "
                f"{s.au_threshold_percent:.0f} % AU")
        if not math.isnan(m.bound.iloc[-1]):
            text += (f". The throttle allows at most {m.bound.iloc[-1]:.0f} % AU at {nmax} (min(bandwidth cap, "
                     f"IOPS cap × measured request size) ÷ demand); measured {m.au.iloc[-1]:.0f} %")
        text += (f". Emulator overhead removed from the wall time: "
                 f"{100 * m.over.mean() / max(m.tot.mean(), 1e-9):.2f} % of it.")
        lines.append(text)
    show_md("**Analysis.**\n\n" + "\n".join(lines) + "\n\nWhen storage keeps up, AU stays near 100 % and total time "
            "falls as accelerators are added (the dataset is split among them); once N × demand exceeds what the "
            "target delivers, the loaders fall behind, the accelerators wait at the barrier for the slowest, AU drops "
            "roughly as delivered ÷ demanded, and total time stops improving.")
    # Latency histogram at the largest N
    hist_path = study_dir / "latency_histograms.csv"
    if hist_path.exists():
        h = pd.read_csv(hist_path)
        if not h.empty:
            nmax = int(h.accelerators.max())
            sub = h[h.accelerators == nmax].groupby(["workload", "target", "bin_lo_us", "bin_hi_us"],
                                                    as_index=False)["count"].sum()
            fig, ax = plt.subplots(figsize=(7.5, 3.0))
            for (w, t), g in sub.groupby(["workload", "target"], sort=False):
                share = g["count"] / g["count"].sum() * 100
                ax.step(g.bin_lo_us, share, where="post", label=f"{t} ({w})", color=palette.get(t))
            ax.set(xscale="log", xlabel="read latency per read call (µs, log scale)", ylabel="% of reads",
                   title=f"Read latency distribution at {nmax} accelerators")
            ax.legend(fontsize=8)
            show_figure(fig, f"Histogram of per-read latencies over all repeats at {nmax} accelerators "
                             f"({LAT_BINS_PER_DECADE} log bins per decade).")
    cols = ["workload", "target", "accelerators", "read_latency_us_mean", "read_latency_us_p50", "read_latency_us_p90",
            "read_latency_us_p99", "read_latency_us_max", "device_read_latency_us", "cpu_busy_percent"]
    cols = [c for c in cols if c in frame]
    lt = frame.groupby(["workload", "target", "accelerators"], as_index=False)[cols[3:]].mean()
    names_map = {"device_read_latency_us": "device read µs (avg)", "cpu_busy_percent": "CPU busy %"}
    show_table(lt.rename(columns=lambda c: names_map.get(c, c.replace("read_latency_us_", "read µs ").replace("_", " "))),
               "Read latency per read call as the loaders saw it (µs; includes throttle queueing), the device's own "
               "average (µs; after the throttle) and CPU busy %, means over repeats.")
