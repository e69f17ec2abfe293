"""ResNet50 training from TFRecords under cgroup memory limits: disk profiles.

Reproduces the training half of "Benchmarking Storage with AI Workloads"
(Samsung, SDC): benchmark datasets fit in the page cache, so training never
stresses storage; capping memory so the dataset:memory ratio is 2.5:1 instead
of 1:5 makes every epoch read from the device. Scenarios, each on every target:

  memory      one model, each memory setting (none, a dataset:memory ratio, a size)
  parallel    K models at once, cores split, each job in its own cgroup
  ingest      one model while a writer ingests new TFRecords at a set rate
  checkpoint  one model checkpointing every N steps (vs the long default interval)

Each training job is a fresh Python process (`python -c BOOT`) that joins its
cgroup before anything else, so all its memory (TensorFlow, page cache of the
records it reads) is charged there and an OOM kill takes only that job, which
becomes a failed run row with its reason. The job imports TensorFlow, builds
`tf.keras.applications.ResNet50(weights=None)`, warms up on in-memory tensors
(traces the train step), reports ready and waits. The parent then makes the
cache cold, applies ratio limits, starts the monitor and says go; the measured
phase is the real tf.data pipeline (parallel interleaved reads, parse, decode,
random crop + flip, batch, prefetch, AUTOTUNE) feeding a real train step.

Memory limit from a ratio (documented choice): the ratio caps the page cache the
job may hold at dataset_bytes x (memory / dataset); every 50 ms the job's cgroup
reclaims whatever unmapped page cache exceeds that (least recently used first;
Cgroup.reclaim). A pure 2.5:1 ratio of a 100 MB dataset would be 40 MB, far below
TensorFlow's own ~1.5 GB, and TensorFlow's own memory swings by 200+ MB while it
trains, so capping the whole job cannot hold the cache at the ratio (see
cap_page_cache). An absolute size limits the whole job from its start, as
`docker run -m` would; exceeding it is an OOM kill and a failed row.
"""
from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from . import cache, cgroups, inventory, monitor, results, targets as targets_mod
from .config import Params, ParamsError, Strict, sorted_counts

STUDY = "train_resnet50"
MIB = 1 << 20
SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
RATIO_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$")
RESNET50_MIN_INPUT = 32  # keras.applications.ResNet50 refuses smaller inputs


# --------------------------------------------------------------------------- memory settings
@dataclass(frozen=True)
class MemorySetting:
    """'none', a dataset:memory ratio ('2.5:1') or an absolute size ('2GiB')."""

    text: str
    kind: Literal["none", "ratio", "bytes"]
    value: float = 0.0          # memory per dataset byte (ratio) or bytes (size)

    @property
    def limited(self) -> bool:
        return self.kind != "none"


def parse_memory(text) -> MemorySetting:
    """Parse a memory setting; ValueError says what is allowed."""
    raw = str(text).strip()
    if raw.lower() in ("none", "null", "unlimited", ""):
        return MemorySetting("none", "none")
    m = RATIO_RE.match(raw)
    if m:
        data, mem = float(m.group(1)), float(m.group(2))
        if data <= 0 or mem <= 0:
            raise ValueError(f"memory ratio '{raw}': both sides of dataset:memory must be > 0")
        return MemorySetting(raw, "ratio", mem / data)
    m = SIZE_RE.match(raw)
    if m and m.group(2).lower() in SIZE_UNITS:
        n = float(m.group(1)) * SIZE_UNITS[m.group(2).lower()]
        if n < 16 * MIB:
            raise ValueError(f"memory limit '{raw}' = {n:.0f} bytes is below 16 MiB; "
                             "TensorFlow alone needs over a GiB")
        return MemorySetting(raw, "bytes", n)
    raise ValueError(f"memory setting '{raw}' is not 'none', a dataset:memory ratio such as '2.5:1' or "
                     "'1:5', nor a size such as '2GiB', '1500MiB' or '3G'")


class TrainParams(Strict):
    targets: list[str] = Field(default_factory=list)   # subset of target names; [] = every target
    dataset: Literal["auto", "preprocess", "generated"] = "auto"
    dataset_images: int = Field(160, ge=1, le=50_000_000)  # generated set size (auto: if > preprocess)
    preprocess_outputs: str = "reports/preprocess/outputs.json"
    record_kib: int = Field(1024, ge=8, le=16_384)     # generated record size (paper: 110, ImageNet JPEG)
    shards: int = Field(4, ge=1, le=4096)               # generated TFRecord files
    num_classes: int = Field(4, ge=2, le=100_000)
    input_size: int = Field(32, ge=RESNET50_MIN_INPUT, le=1024)
    batch_size: int = Field(32, ge=1, le=65_536)
    epochs: int = Field(2, ge=1, le=10_000)
    learning_rate: float = Field(0.01, gt=0, le=10)
    shuffle_buffer: int = Field(64, ge=1, le=1_000_000)
    read_parallelism: int = Field(4, ge=1, le=1024)     # TFRecord files read at once (interleave)
    warmup_steps: int = Field(2, ge=1, le=100)
    memory_limits: list[str] = Field(default_factory=lambda: ["none", "2.5:1"], min_length=1)
    memory_margin_mib: int = Field(48, ge=0, le=1 << 20)
    parallel_models: list[int] = Field(default_factory=lambda: [1, 2])
    parallel_memory: str = "2.5:1"
    ingest_mb_per_s: float = Field(20.0, ge=0, le=100_000)   # 0 = no ingest scenario
    ingest_memory: str = "none"
    checkpoint_every_steps: int = Field(4, ge=0, le=10_000_000)  # 0 = no checkpoint scenario
    checkpoint_default_interval_s: float = Field(600.0, gt=0)     # tf.estimator's default
    checkpoint_memory: str = "none"
    repeats: int = Field(1, ge=1, le=100)
    stall_timeout_s: float = Field(240.0, ge=10, le=86_400)
    seed: int = 0

    @field_validator("memory_limits")
    @classmethod
    def _limits(cls, v: list) -> list[str]:
        out = []
        for item in v:
            parse_memory(item)
            text = str(item).strip()
            if text not in out:
                out.append(text)
        return out

    @field_validator("parallel_memory", "ingest_memory", "checkpoint_memory")
    @classmethod
    def _one_limit(cls, v) -> str:
        parse_memory(v)
        return str(v).strip()

    @field_validator("parallel_models")
    @classmethod
    def _models(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "model counts", 1, 256)

    @model_validator(mode="after")
    def _consistent(self):
        if self.dataset != "preprocess" and self.dataset_images < self.batch_size:
            raise ValueError(f"dataset_images={self.dataset_images} is smaller than batch_size="
                             f"{self.batch_size}: an epoch would have no full batch")
        return self


# --------------------------------------------------------------------------- datasets
@dataclass
class Dataset:
    files: list[str]
    records: int
    bytes: int
    source: str      # "preprocess" or "generated"


def _frame_sizes(path: Path) -> list[int]:
    """Record payload lengths of a TFRecord file."""
    from .preprocess import record_lengths
    return record_lengths(path)


def generate_dataset(target, p: TrainParams, log=print, name: str = "dataset") -> Dataset:
    """ImageNet-like TFRecords (JPEG, ~record_kib each, class-dependent content) on the target."""
    import cv2
    from .preprocess import class_pattern

    directory = target.study_dir(STUDY) / name
    spec = {"images": p.dataset_images, "record_kib": p.record_kib, "shards": p.shards,
            "classes": p.num_classes, "seed": p.seed, "version": 1}
    manifest = directory / "manifest.json"
    if manifest.exists():
        try:
            saved = json.loads(manifest.read_text())
            files = [str(directory / f) for f in saved.get("files", [])]
            if saved.get("spec") == spec and files and all(Path(f).exists() for f in files):
                return Dataset(files, saved["records"], saved["bytes"], "generated")
        except ValueError:
            pass
    targets_mod.check_free_space(target, int(p.dataset_images * p.record_kib * 1024 * 1.1),
                                 "the generated TFRecord dataset")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(p.seed)
    # JPEG size grows with area: calibrate the side once so records land near record_kib.
    probe = class_pattern(0, p.num_classes, 256, 256, rng, 3, 8)
    ok, enc = cv2.imencode(".jpg", probe, [cv2.IMWRITE_JPEG_QUALITY, 95])
    side = int(np.clip(256 * math.sqrt(p.record_kib * 1024 / len(enc)), 64, 4096))
    shards = min(p.shards, p.dataset_images)
    names = [f"train-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    writers = [tf.io.TFRecordWriter(str(directory / n)) for n in names]
    f = tf.train.Feature
    try:
        for i in range(p.dataset_images):
            label = i % p.num_classes
            rgb = class_pattern(label, p.num_classes, side, side, rng, 3, 8)
            ok, jpg = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 95])
            if not ok:
                raise OSError("OpenCV could not encode a JPEG")
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": f(bytes_list=tf.train.BytesList(value=[jpg.tobytes()])),
                "image/format": f(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
                "image/height": f(int64_list=tf.train.Int64List(value=[side])),
                "image/width": f(int64_list=tf.train.Int64List(value=[side])),
                "image/channels": f(int64_list=tf.train.Int64List(value=[3])),
                "image/class/label": f(int64_list=tf.train.Int64List(value=[label])),
                "image/filename": f(bytes_list=tf.train.BytesList(value=[f"img_{i:08d}.jpg".encode()])),
            }))
            writers[i % shards].write(example.SerializeToString())
    finally:
        for w in writers:
            w.close()
    files = [str(directory / n) for n in names]
    for fpath in files:   # on the device before the manifest says the set is complete
        fd = os.open(fpath, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    total = sum(os.path.getsize(fp) for fp in files)
    results.write_json(manifest, {"spec": spec, "files": names, "records": p.dataset_images, "bytes": total})
    log(f"generated {p.dataset_images} JPEG TFRecords ({total / p.dataset_images / 1024:.0f} KiB each, "
        f"{side}x{side}) in {directory}")
    return Dataset(files, p.dataset_images, total, "generated")


def resolve_dataset(params: Params, target, p: TrainParams, log=print) -> Dataset:
    """The preprocessing stage's TFRecords for this target, or a generated ImageNet-like set."""
    outputs = Path(p.preprocess_outputs)
    pre: list[str] = []
    if outputs.exists():
        try:
            pre = json.loads(outputs.read_text()).get("tfrecords", {}).get(target.name, [])
        except ValueError as exc:
            raise ParamsError(f"train_resnet50.preprocess_outputs = '{outputs}' is not valid JSON: {exc}")
    missing = [f for f in pre if not Path(f).exists()]
    if p.dataset == "preprocess":
        if not pre:
            raise ParamsError(f"train_resnet50.dataset = preprocess: no TFRecords for target '{target.name}' in "
                              f"'{outputs}' (missing file or target); run `storagebrief preprocess` first")
        if missing:
            raise ParamsError(f"train_resnet50.dataset = preprocess: TFRecords listed in '{outputs}' are missing: "
                              f"{missing[:3]}; rerun the preprocess stage")
    if pre and not missing and p.dataset in ("auto", "preprocess"):
        sizes = [_frame_sizes(Path(f)) for f in pre]
        records = sum(len(s) for s in sizes)
        if p.dataset == "preprocess" or records >= p.dataset_images:
            if records < p.batch_size:
                raise ParamsError(f"the preprocessing output for '{target.name}' holds {records} records, fewer "
                                  f"than train_resnet50.batch_size = {p.batch_size}")
            return Dataset(list(pre), records, sum(os.path.getsize(f) for f in pre), "preprocess")
    return generate_dataset(target, p, log)


# --------------------------------------------------------------------------- worker (one training job)
BOOT = ("import sys, os, json; a = json.loads(sys.argv[1]); "
        "[open(f, 'w').write(str(os.getpid())) for f in a['procs']]; "
        "from storagebrief.train_resnet50 import worker_main; worker_main(a['spec'])")


def _proc_io_read_bytes() -> int:
    """Bytes this process (all threads) caused to be read from storage."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def build_dataset(files: list[str], spec: dict, tf, warmup: bool = False):
    """The tf.data pipeline: parallel reads, parse, decode, random crop + flip, batch, prefetch.

    warmup=True feeds the same pipeline from one cached record (read before the cold
    cache), so its kernels, threads and buffers exist before the job's need is measured.
    """
    auto = tf.data.AUTOTUNE
    size, batch = spec["input_size"], spec["batch_size"]
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, features)
        img = tf.io.decode_image(ex["image/encoded"], channels=3, expand_animations=False)
        shape = tf.shape(img)
        side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * 0.875, tf.int32)
        img = tf.image.random_crop(img, tf.stack([side, side, 3]))
        img = tf.image.resize(img, [size, size])            # float32
        img = tf.image.random_flip_left_right(img) / 255.0
        return img, ex["image/class/label"], tf.cast(tf.strings.length(record), tf.int64)

    if warmup:
        # Distinct copies, so the shuffle buffer holds as many bytes as it will in training.
        ds = tf.data.TFRecordDataset(files[:1]).take(1).cache().repeat().map(lambda r: tf.strings.join([r, ""]))
    else:
        ds = tf.data.Dataset.from_tensor_slices(files)
        ds = ds.shuffle(len(files), seed=spec["seed"], reshuffle_each_iteration=True)
        ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f),
                           cycle_length=min(spec["read_parallelism"], len(files)),
                           num_parallel_calls=auto, deterministic=False)
    ds = ds.shuffle(spec["shuffle_buffer"], seed=spec["seed"], reshuffle_each_iteration=True)
    ds = ds.map(parse, num_parallel_calls=auto, deterministic=False)
    # Batch then repeat: an epoch reads every record once; the partial last batch is dropped
    # so the train step is traced once.
    ds = ds.batch(batch, drop_remainder=True).repeat().prefetch(auto)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = max(1, spec["threads"])
    return ds.with_options(opts)


def _emit(fd: int, **event) -> None:
    os.write(fd, (json.dumps(event) + "\n").encode())


def worker_main(spec_path: str) -> None:
    """Entry point of a training job (already in its cgroup): warm up, wait for go, train."""
    spec = json.loads(Path(spec_path).read_text())
    fd = int(spec["event_fd"])
    if spec.get("cpus"):
        try:
            os.sched_setaffinity(0, spec["cpus"])
        except OSError:
            pass
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.perf_counter()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(max(2, spec["threads"]))
    tf.keras.utils.set_random_seed(spec["seed"] + spec["job"])
    gpus = tf.config.list_physical_devices("GPU")
    device = f"GPU ({gpus[0].name})" if gpus else "CPU"
    size, batch, classes = spec["input_size"], spec["batch_size"], spec["num_classes"]
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=classes)
    opt = tf.keras.optimizers.SGD(spec["learning_rate"], momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function(jit_compile=False)   # XLA is slower on this class of CPU (DESIGN.md)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            probs = model(x, training=True)
            loss = loss_fn(y, probs)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(probs, axis=1), y), tf.float32))
        return loss, acc

    # Warm-up: traces the step, allocates model + optimizer state and runs the input pipeline
    # on one cached record, so the memory measured at "ready" is the job's steady need.
    warm = iter(build_dataset(spec["files"], spec, tf, warmup=True))
    for _ in range(spec["warmup_steps"]):
        xb, yb, _ = next(warm)
        train_step(xb, tf.math.floormod(yb, classes))
    del warm
    ckpt_dir = Path(spec["checkpoint_dir"])
    manager = None
    if ckpt_dir:
        ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
        manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=2)
    ds = build_dataset(spec["files"], spec, tf)
    it = iter(ds)   # iterator and reader threads exist before go; no record is read before next()
    import resource
    _emit(fd, event="ready", startup_s=time.perf_counter() - t0, device=device,
          rss_peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if sys.stdin.readline().strip() != "go":
        return
    steps_per_epoch = spec["steps_per_epoch"]
    every, interval = spec["checkpoint_every_steps"], spec["checkpoint_interval_s"]
    ck = {"count": 0, "bytes": 0, "seconds": 0.0}

    def checkpoint():
        t = time.perf_counter()
        prefix = manager.save()
        written = [f for f in ckpt_dir.glob(Path(prefix).name + "*")] + [ckpt_dir / "checkpoint"]
        for f in written:   # count the write as done only when it is on the device
            if f.exists():
                fdesc = os.open(f, os.O_RDONLY)
                os.fsync(fdesc)
                os.close(fdesc)
        ck["seconds"] += time.perf_counter() - t
        ck["count"] += 1
        ck["bytes"] += sum(f.stat().st_size for f in written if f.exists())

    t_start = last_ck = time.perf_counter()
    step = 0
    for epoch in range(1, spec["epochs"] + 1):
        e0, r0 = time.perf_counter(), _proc_io_read_bytes()
        losses, accs, consumed = [], [], 0
        for _ in range(steps_per_epoch):
            xb, yb, nb = next(it)
            if int(tf.reduce_max(yb)) >= classes:
                raise ValueError(f"record label {int(tf.reduce_max(yb))} >= num_classes={classes}; "
                                 "raise train_resnet50.num_classes")
            loss, acc = train_step(xb, yb)
            losses.append(float(loss))
            accs.append(float(acc))
            consumed += int(tf.reduce_sum(nb))
            step += 1
            if manager is not None and ((every and step % every == 0)
                                        or (not every and time.perf_counter() - last_ck >= interval)):
                checkpoint()
                last_ck = time.perf_counter()
            _emit(fd, event="step", step=step)
        _emit(fd, event="epoch", epoch=epoch, seconds=time.perf_counter() - e0, images=steps_per_epoch * batch,
              read_bytes=_proc_io_read_bytes() - r0, pipeline_bytes=consumed,
              loss=float(np.mean(losses)), accuracy=float(np.mean(accs)),
              loss_first_step=losses[0], loss_last_step=losses[-1])
    import resource
    _emit(fd, event="done", seconds=time.perf_counter() - t_start, steps=step, checkpoints=ck["count"],
          checkpoint_bytes=ck["bytes"], checkpoint_s=ck["seconds"],
          rss_peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


# --------------------------------------------------------------------------- job control
class JobFailed(RuntimeError):
    pass


def cap_page_cache(j) -> None:
    """Hold a ratio job's unmapped page cache at its share (dataset x memory/dataset).

    Called every poll (50 ms): whatever exceeds the share is reclaimed by the group's own memory
    controller, least recently used first, as a machine whose memory were that small would evict
    it. The job's own memory (anonymous, mapped code, kernel) is not what the ratio caps: it swings
    by 200+ MB within and between epochs as tf.data fills and frees buffers (measured), so a fixed
    limit hands whatever the job does not use at the moment to the page cache (a 96 MB dataset
    stayed 83 % cached under a fixed 2.5:1 limit), and a limit that follows the job's need lets a
    buffer spike fail a read with ENOMEM (measured).
    """
    try:
        b = j.group.memory_breakdown()
    except (OSError, ValueError):
        return
    cached = max(0, b.get("cache_bytes", 0) - b.get("mapped_file_bytes", 0))
    excess = cached - j.cache_share_bytes
    if excess < MIB:
        return
    try:
        j.group.reclaim(excess)
    except OSError:   # the kernel could not reclaim that much right now: try again next poll
        return
    j.reclaims += 1
    j.reclaimed_bytes += excess


def memory_need(group) -> int | None:
    """What the job holds that reclaim cannot take: usage minus unmapped page cache.

    Unmapped cache (library files read once at import, the dataset) is reclaimable; anonymous
    memory, mapped code and kernel memory are what the job needs to keep running.
    """
    usage = group.memory_usage()
    if usage is None:
        return None
    b = group.memory_breakdown()
    return usage - max(0, b.get("cache_bytes", 0) - b.get("mapped_file_bytes", 0))


def cold_dataset(files: list[str], enabled: bool) -> str:
    """Evict the dataset's pages only (sync + fadvise DONTNEED).

    Not cache.cold_cache's drop_caches: dropping everything would also evict TensorFlow's
    not-yet-mapped code pages, whose re-reads would then be charged to the training run.
    """
    if not enabled:
        return "none (run.cold_cache is false)"
    os.sync()
    cache.fadvise_dontneed(files)
    return "fadvise_dontneed (dataset files)"


def foreign_cache_drops() -> int:
    """Kernel count of drop_caches writes (another process dropping caches mid-run spoils hits)."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("drop_pagecache "):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class Job:
    index: int
    spec: dict
    group: object | None
    log_path: Path
    proc: subprocess.Popen | None = None
    events: "queue.Queue" = field(default_factory=queue.Queue)
    ready: dict | None = None
    done: dict | None = None
    epochs: list = field(default_factory=list)
    last_progress: float = 0.0
    need_bytes: int | None = None
    limit_bytes: int | None = None
    anon_ready: int = 0
    anon_max: int = 0
    memory_trace: list = field(default_factory=list)   # polled every 0.25 s while training
    cache_share_bytes: int = 0      # a ratio limit's page-cache share (0: not a ratio run)
    reclaims: int = 0               # ratio runs: page-cache reclaims and the bytes asked for
    reclaimed_bytes: int = 0
    cache_sum: int = 0              # unmapped page cache in the group, summed over polls
    cache_samples: int = 0
    stats: dict = field(default_factory=dict)

    def start(self, spec_path: Path) -> None:
        rfd, wfd = os.pipe()
        self.spec["event_fd"] = wfd
        spec_path.write_text(json.dumps(self.spec))
        arg = json.dumps({"procs": self.group.procs_files if self.group else [], "spec": str(spec_path)})
        # Two malloc arenas and a fixed mmap threshold: otherwise TensorFlow's threads grow an arena
        # each and freed decode buffers stay in the heap, so the job's memory drifts by 100+ MB after
        # warm-up (measured) and a ratio limit's page-cache share would be unpredictable.
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "MALLOC_ARENA_MAX": "2",
               "MALLOC_MMAP_THRESHOLD_": "65536"}
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", BOOT, arg], stdin=subprocess.PIPE,
                                         stdout=log, stderr=subprocess.STDOUT, pass_fds=(wfd,), env=env,
                                         start_new_session=True)   # our signal handling decides its end
        finally:
            os.close(wfd)
            log.close()
        threading.Thread(target=self._read, args=(rfd,), daemon=True).start()
        self.last_progress = time.monotonic()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as fh:
            for line in fh:
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    pass
        self.events.put({"event": "eof"})

    def go(self) -> None:
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def log_tail(self, n: int = 1500) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip() and "WARNING" not in ln and "I0000" not in ln]
        return "\n".join(lines)[-n:]


def _poll(jobs: list[Job], until: str, stall_s: float, timeout_s: float) -> None:
    """Drain events until every job reached `until` ('ready' or 'done'); raise JobFailed otherwise.

    While training, samples each job's anonymous memory (v1 has no anon peak counter).
    """
    deadline = time.monotonic() + timeout_s
    next_sample = 0.0
    while True:
        if until == "done":
            for j in jobs:
                if j.group is not None and j.cache_share_bytes and j.done is None:
                    cap_page_cache(j)
        if until == "done" and time.monotonic() >= next_sample:
            next_sample = time.monotonic() + 0.25
            for j in jobs:
                if j.group is not None:
                    try:
                        b = j.group.memory_breakdown()
                    except (OSError, ValueError):
                        continue
                    j.anon_max = max(j.anon_max, b.get("anon_bytes", 0))
                    if j.done is None:
                        cached = max(0, b.get("cache_bytes", 0) - b.get("mapped_file_bytes", 0))
                        j.cache_sum += cached
                        j.cache_samples += 1
                        j.memory_trace.append({"t": time.monotonic(), "job": j.index, "epoch": len(j.epochs) + 1,
                                               "anon_bytes": b.get("anon_bytes", 0), "page_cache_bytes": cached,
                                               "mapped_file_bytes": b.get("mapped_file_bytes", 0)})
        pending = [j for j in jobs if (j.ready if until == "ready" else j.done) is None]
        if not pending:
            return
        for j in pending:
            while True:
                try:
                    ev = j.events.get_nowait()
                except queue.Empty:
                    break
                kind = ev.get("event")
                j.last_progress = time.monotonic()
                if kind == "ready":
                    j.ready = ev
                elif kind == "epoch":
                    if j.group is not None:
                        try:
                            ev["anon_bytes"] = j.group.memory_breakdown().get("anon_bytes")
                            ev["cache_bytes"] = j.group.memory_breakdown().get("cache_bytes")
                        except (OSError, ValueError):
                            pass
                    j.epochs.append(ev)
                elif kind == "done":
                    j.done = ev
                elif kind == "eof":
                    j.proc.wait()
                    if (j.ready if until == "ready" else j.done) is None:
                        raise JobFailed(_exit_reason(j))
        now = time.monotonic()
        stalled = [j for j in pending if now - j.last_progress > stall_s]
        if stalled:
            j = stalled[0]
            raise JobFailed(f"job {j.index} made no progress for {stall_s:.0f} s (train_resnet50.stall_timeout_s)"
                            + (f" under a {j.limit_bytes / MIB:,.0f} MiB memory limit: the job is thrashing; "
                               "raise the limit" if j.limit_bytes else "") + "; killed")
        if now > deadline:
            raise JobFailed(f"jobs did not reach '{until}' within {timeout_s:.0f} s; killed")
        time.sleep(0.05)


def _exit_reason(j: Job) -> str:
    code = j.proc.returncode
    stats = {}
    if j.group is not None and "memory" in getattr(j.group, "dirs", {}):
        try:
            stats = j.group.memory_stats()
        except OSError:
            pass
    limit = j.limit_bytes
    if stats.get("oom_kills") or (code in (-9, 137) and limit):
        need = f" TensorFlow's measured need in this job was {j.need_bytes / MIB:,.0f} MiB;" if j.need_bytes else ""
        peak = stats.get("memory_peak_bytes")
        return (f"job {j.index} was OOM-killed by the kernel (exit {code}): memory limit "
                f"{(limit or 0) / MIB:,.0f} MiB is below what TensorFlow needs for this model, input size and "
                f"batch.{need} Use at least the baseline run's memory_need_bytes + memory_anon_growth_bytes + "
                "memory_margin_mib (see runs.csv), or give the limit as a dataset:memory ratio, which caps "
                "only the page cache" + (f" (peak before the kill {peak / MIB:,.0f} MiB)" if peak else ""))
    tail = j.log_tail()
    return f"job {j.index} exited with code {code}" + (f": {tail.splitlines()[-1]}" if tail else "")


# --------------------------------------------------------------------------- ingest writer
def _ingest_loop(path: str, payload: bytes, rate: float, stop, counter, procs_files: list[str]) -> None:
    """Append TFRecord frames at `rate` bytes/s, fsync twice a second (runs in a forked child)."""
    try:
        if procs_files:
            cgroups.join(procs_files)
        start = last_sync = time.monotonic()
        written = 0
        shard = 0
        fh = open(f"{path}-{shard:03d}.tfrecord", "wb")
        while not stop.is_set():
            due = rate * (time.monotonic() - start) - written
            if due >= len(payload):
                fh.write(payload)
                written += len(payload)
                counter.value = written
                if fh.tell() > (256 << 20):   # roll files like an ingest job writing shards
                    fh.close()
                    shard += 1
                    fh = open(f"{path}-{shard:03d}.tfrecord", "wb")
            else:
                time.sleep(min(0.05, (len(payload) - due) / rate))
            if time.monotonic() - last_sync >= 0.5:
                fh.flush()
                os.fsync(fh.fileno())
                last_sync = time.monotonic()
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
    except BaseException:
        os._exit(1)


class IngestWriter:
    group = None

    def __init__(self, directory: Path, source_files: list[str], mb_per_s: float, procs_files: list[str]):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        # Real records: the first frames of the dataset, read before the measured phase.
        with open(source_files[0], "rb") as fh:
            self.payload = fh.read(4 << 20)
        self.rate = mb_per_s * 1e6
        ctx = mp.get_context("fork")
        self.stop_event = ctx.Event()
        self.counter = ctx.Value("q", 0)
        self.proc = ctx.Process(target=_ingest_loop, daemon=True,
                                args=(str(directory / "ingest"), self.payload, self.rate, self.stop_event,
                                      self.counter, procs_files))
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.proc.start()

    def stop(self) -> dict:
        self.stop_event.set()
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        out = {"ingest_bytes": int(self.counter.value), "ingest_mb_per_s": self.counter.value / elapsed / 1e6}
        shutil.rmtree(self.directory, ignore_errors=True)
        return out


# --------------------------------------------------------------------------- one measured run
@dataclass(frozen=True)
class RunSpec:
    sweep: str                 # memory | parallel | ingest | checkpoint
    models: int
    memory: str
    ingest_mb_per_s: float = 0.0
    checkpoint_every_steps: int = 0


def plan(p: TrainParams) -> list[RunSpec]:
    """Run order; the parallel sweep's K=1 point is the memory sweep's run when settings match."""
    runs = [RunSpec("memory", 1, m) for m in sorted(p.memory_limits, key=lambda m: parse_memory(m).limited)]
    have_one = p.parallel_memory in p.memory_limits
    runs += [RunSpec("parallel", k, p.parallel_memory) for k in p.parallel_models if not (k == 1 and have_one)]
    if p.ingest_mb_per_s > 0:
        runs.append(RunSpec("ingest", 1, p.ingest_memory, ingest_mb_per_s=p.ingest_mb_per_s))
    if p.checkpoint_every_steps > 0:
        runs.append(RunSpec("checkpoint", 1, p.checkpoint_memory, checkpoint_every_steps=p.checkpoint_every_steps))
    return runs


def run_id_for(spec: RunSpec, target: str, repeat: int) -> str:
    mem = re.sub(r"[^A-Za-z0-9.]+", "_", spec.memory)
    extra = (f"-ingest{spec.ingest_mb_per_s:g}" if spec.ingest_mb_per_s else "") + \
            (f"-ckpt{spec.checkpoint_every_steps}" if spec.checkpoint_every_steps else "")
    return f"{STUDY}-{spec.sweep}-{target}-k{spec.models}-mem{mem}{extra}-r{repeat}"


def cpu_split(models: int, ncpu: int | None = None) -> list[list[int]]:
    """Cores per job: an equal share of this process's CPUs; jobs share cores when K > CPUs."""
    cpus = sorted(os.sched_getaffinity(0)) if ncpu is None else list(range(ncpu))
    if models >= len(cpus):
        return [[cpus[i % len(cpus)]] for i in range(models)]
    per = len(cpus) // models
    return [cpus[i * per:(i + 1) * per] for i in range(models)]


def execute_run(spec: RunSpec, target, ds: Dataset, p: TrainParams, params: Params, run_id: str, repeat: int,
                out_dir: Path, need_hint: int | None = None, log=print) -> tuple[dict, list, list, list]:
    """Run one measured configuration: (run row, per-job rows, per-epoch rows, monitor series).

    A job failure (OOM, crash, stall) is a row with status=failed and its reason; an
    interrupt (SIGINT/SIGTERM) propagates after every job is killed and every cgroup removed.
    """
    setting = parse_memory(spec.memory)
    io = targets_mod.io_limits(target)
    steps_per_epoch = ds.records // p.batch_size
    splits = cpu_split(spec.models)
    base = {"study": STUDY, "run_id": run_id, "sweep": spec.sweep, "target": target.name,
            "profile": target.profile_name or "", "repeat": repeat, "started_at": results.utc_now(),
            "cache_method": "", "status": "ok", "failure_reason": "", "models": spec.models,
            "memory_setting": setting.text, "dataset_source": ds.source, "dataset_records": ds.records,
            "dataset_bytes": ds.bytes, "input_size": p.input_size, "batch_size": p.batch_size,
            "epochs": p.epochs, "num_classes": p.num_classes, "steps_per_epoch": steps_per_epoch, "cpus_per_job": len(splits[0]),
            "ingest_target_mb_per_s": spec.ingest_mb_per_s,
            "checkpoint_every_steps": spec.checkpoint_every_steps,
            "checkpoint_interval_s": 0.0 if spec.checkpoint_every_steps else p.checkpoint_default_interval_s}
    if setting.kind == "bytes" and need_hint and setting.value < need_hint:
        minimum = need_hint + p.memory_margin_mib * MIB
        return ({**base, "status": "failed", "emulated": io is not None,
                 "failure_reason": f"not run: memory limit {setting.text} ({setting.value / MIB:,.0f} MiB) is below "
                 f"what TensorFlow needs for this model on this target ({need_hint / MIB:,.0f} MiB measured in an "
                 f"earlier run); use at least {minimum / MIB:,.0f} MiB"}, [], [], [])
    ram = total_memory_bytes()
    tmp = out_dir / "jobs"
    tmp.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    jobs: list[Job] = []
    writer: IngestWriter | None = None
    mon = monitor.Monitor(target.device.name if target.device else None, params.run.monitor_interval_s)
    emulated = False
    try:
        for i, cpus in enumerate(splits):
            initial = int(setting.value) if setting.kind == "bytes" else ram
            group = None
            try:
                # Every job gets a memory cgroup, even unlimited (limit = RAM), for its peak and OOM stats.
                group = cgroups.Cgroup(f"{run_id}-j{i}", memory_limit_bytes=initial, io=io).create()
                emulated = io is not None
            except cgroups.CgroupUnavailable as exc:
                if setting.limited:
                    raise   # the caller records why limited runs are skipped
                if io is not None:
                    msg = f"target '{target.name}': emulated profile not applied: {exc}"
                    if msg not in target.warnings:
                        target.warnings.append(msg)
            ckdir = target.study_dir(STUDY) / "checkpoints" / f"{run_id}-j{i}"
            shutil.rmtree(ckdir, ignore_errors=True)
            job = Job(i, {"job": i, "files": ds.files, "input_size": p.input_size, "batch_size": p.batch_size,
                          "num_classes": p.num_classes, "epochs": p.epochs, "steps_per_epoch": steps_per_epoch,
                          "learning_rate": p.learning_rate, "shuffle_buffer": p.shuffle_buffer,
                          "read_parallelism": p.read_parallelism, "warmup_steps": p.warmup_steps,
                          "seed": p.seed + 1000 * repeat, "threads": len(cpus), "cpus": cpus,
                          "checkpoint_dir": str(ckdir), "checkpoint_every_steps": spec.checkpoint_every_steps,
                          "checkpoint_interval_s": p.checkpoint_default_interval_s},
                      group, out_dir / "logs" / f"{run_id}-j{i}.log",
                      limit_bytes=initial if setting.kind == "bytes" else None)
            jobs.append(job)
        for j in jobs:
            j.start(tmp / f"{run_id}-j{j.index}.json")
        _poll(jobs, "ready", p.stall_timeout_s, p.stall_timeout_s * 2)
        if spec.ingest_mb_per_s:   # built (and its payload read) before the cache is made cold
            ingest_group = None
            if io is not None:
                try:
                    ingest_group = cgroups.Cgroup(f"{run_id}-ingest", io=io).create()
                except cgroups.CgroupUnavailable:
                    ingest_group = None
            writer = IngestWriter(target.study_dir(STUDY) / "ingest" / run_id, ds.files, spec.ingest_mb_per_s,
                                  ingest_group.procs_files if ingest_group else [])
            writer.group = ingest_group
        base["cache_method"] = cold_dataset(ds.files, params.run.cold_cache)
        for j in jobs:
            j.need_bytes = memory_need(j.group) or j.ready.get("rss_peak_bytes")
            if j.group is not None:
                j.anon_ready = j.anon_max = j.group.memory_breakdown().get("anon_bytes", 0)
            if setting.kind == "ratio" and j.group is not None:
                # From go on, cap_page_cache holds the job's page cache at this share.
                j.cache_share_bytes = max(1, int(ds.bytes * setting.value))
                cap_page_cache(j)
            j.group.reset_memory_peak()
        drops0 = foreign_cache_drops()
        mon.start()
        t0, t_go = time.perf_counter(), time.monotonic()
        if writer:
            writer.start()
        for j in jobs:
            j.go()
        _poll(jobs, "done", p.stall_timeout_s, max(3600.0, p.stall_timeout_s * 10) * p.epochs)
        elapsed = time.perf_counter() - t0
        mon.stop()
        base["foreign_cache_drops"] = foreign_cache_drops() - drops0
        ingest = writer.stop() if writer else {}
        for j in jobs:
            j.stats = j.group.memory_stats() if j.group is not None else {}
            j.stats.update(j.group.memory_breakdown() if j.group is not None else {})
            j.proc.wait(timeout=60)
    except JobFailed as exc:
        if mon.snapshots and mon._thread is not None:
            mon.stop()
        if writer:
            writer.stop()
        for j in jobs:
            j.kill()
        reason = str(exc)
        log(f"[{run_id}] failed: {reason}")
        first = next((j for j in jobs if j.limit_bytes), None)
        return ({**base, "status": "failed", "failure_reason": reason, "emulated": emulated,
                 "memory_limit_bytes": first.limit_bytes if first else np.nan,
                 "memory_need_bytes": max((j.need_bytes or 0 for j in jobs), default=0) or np.nan,
                 **_sum_stats(jobs)}, [], [], [])
    finally:
        for j in jobs:
            j.kill()
            if j.group is not None:
                j.group.remove()
        if writer is not None and getattr(writer, "group", None) is not None:
            writer.group.remove()
        if writer is not None and writer.proc.is_alive():
            writer.proc.kill()
        shutil.rmtree(target.study_dir(STUDY) / "checkpoints", ignore_errors=True)
        shutil.rmtree(target.study_dir(STUDY) / "ingest", ignore_errors=True)
    trace = [{"t_s": round(m["t"] - t_go, 3), **{k: v for k, v in m.items() if k != "t"}}
             for j in jobs for m in j.memory_trace]
    if trace:   # the job's own memory vs its page cache over time (the brief's memory figure)
        import pandas as pd
        (out_dir / "timeseries").mkdir(exist_ok=True)
        results.write_csv(out_dir / "timeseries" / f"{run_id}-memory.csv", pd.DataFrame(trace))
    return _rows(base, jobs, elapsed, mon, ingest, emulated, ds)


def _sum_stats(jobs: list[Job]) -> dict:
    stats = [j.stats or ({} if j.group is None else _safe_stats(j.group)) for j in jobs]
    out = {"memory_peak_bytes": max((s.get("memory_peak_bytes", 0) for s in stats), default=0) or np.nan,
           "memory_failcnt": sum(s.get("memory_failcnt", 0) for s in stats),
           "oom_kills": sum(s.get("oom_kills", 0) for s in stats)}
    return out


def _safe_stats(group) -> dict:
    try:
        return group.memory_stats()
    except (OSError, ValueError):
        return {}


def _active_mean(series: list[dict], key: str) -> float:
    """Mean over intervals where the device did read (the seed discards zero intervals)."""
    vals = [r[key] for r in series if r.get("read_iops", 0) > 0]
    return float(np.mean(vals)) if vals else 0.0


def _rows(base: dict, jobs: list[Job], elapsed: float, mon, ingest: dict, emulated: bool,
          ds: Dataset) -> tuple[dict, list, list, list]:
    job_rows, epoch_rows = [], []
    for j in jobs:
        images = sum(e["images"] for e in j.epochs)
        later = j.epochs[1:]
        job_rows.append({
            "run_id": base["run_id"], "target": base["target"], "job": j.index, "cpus": len(j.spec["cpus"]),
            "tf_device": j.ready["device"], "startup_s": j.ready["startup_s"],
            "training_time_s": j.done["seconds"], "images": images, "images_per_s": images / j.done["seconds"],
            "memory_limit_bytes": j.limit_bytes, "page_cache_cap_bytes": j.cache_share_bytes or None,
            "page_cache_reclaims": j.reclaims, "page_cache_reclaimed_bytes": j.reclaimed_bytes,
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
            "accuracy_last_epoch": j.epochs[-1]["accuracy"], "checkpoints": j.done["checkpoints"],
            "checkpoint_bytes": j.done["checkpoint_bytes"], "checkpoint_s_total": j.done["checkpoint_s"]})
        epoch_rows += [{"run_id": base["run_id"], "target": base["target"], "job": j.index, "epoch": e["epoch"],
                        "seconds": e["seconds"], "images": e["images"], "job_read_bytes": e["read_bytes"],
                        "pipeline_bytes": e["pipeline_bytes"], "loss": e["loss"], "accuracy": e["accuracy"],
                        "memory_anon_bytes": e.get("anon_bytes"), "memory_cache_bytes": e.get("cache_bytes")}
                       for e in j.epochs]
    jr = job_rows
    summary = mon.summary()
    series = mon.timeseries()
    images = sum(r["images"] for r in jr)
    pipeline = sum(r["pipeline_bytes"] for r in jr)
    job_read = sum(r["job_read_bytes"] for r in jr)
    later_read = sum(e["job_read_bytes"] for e in epoch_rows if e["epoch"] > 1)
    later_pipe = sum(e["pipeline_bytes"] for e in epoch_rows if e["epoch"] > 1)
    ck_count = sum(r["checkpoints"] for r in jr)
    limit = jr[0]["memory_limit_bytes"]
    row = {
        **base, "emulated": emulated, "tf_device": jr[0]["tf_device"],
        "memory_limit_bytes": limit if limit else np.nan,
        "memory_need_bytes": max(r["memory_need_bytes"] or 0 for r in jr),
        "memory_anon_growth_bytes": max((r["memory_anon_growth_bytes"] or 0) for r in jr),
        # Ratio runs: the page cache each job may hold (dataset x memory/dataset), what it held on
        # average while training, and how often the cap had to reclaim.
        "page_cache_cap_bytes": jr[0]["page_cache_cap_bytes"] or np.nan,
        "dataset_to_memory_ratio": ds.bytes / jr[0]["page_cache_cap_bytes"] if jr[0]["page_cache_cap_bytes"]
        else np.nan,
        "page_cache_reclaims": sum(r["page_cache_reclaims"] for r in jr),
        "page_cache_reclaimed_bytes": sum(r["page_cache_reclaimed_bytes"] for r in jr),
        "page_cache_mean_bytes": float(np.mean([r["page_cache_mean_bytes"] for r in jr]))
        if all(r["page_cache_mean_bytes"] is not None for r in jr) else np.nan,
        "memory_peak_bytes": max((r["memory_peak_bytes"] or 0) for r in jr) or np.nan,
        "memory_failcnt": sum(r["memory_failcnt"] or 0 for r in jr),
        "oom_kills": sum(r["oom_kills"] or 0 for r in jr),
        "training_time_s": elapsed, "training_time_min": elapsed / 60, "images": images,
        "images_per_s": images / elapsed, "images_per_s_per_job": float(np.mean([r["images_per_s"] for r in jr])),
        "startup_s_max": max(r["startup_s"] for r in jr),
        "loss_first_epoch": float(np.mean([r["loss_first_epoch"] for r in jr])),
        "loss_last_epoch": float(np.mean([r["loss_last_epoch"] for r in jr])),
        "accuracy_last_epoch": float(np.mean([r["accuracy_last_epoch"] for r in jr])),
        "pipeline_bytes": pipeline, "job_read_bytes": job_read,
        "read_amplification": job_read / pipeline if pipeline else np.nan,
        "reread_ratio": later_read / later_pipe if later_pipe else np.nan,
        "checkpoints": ck_count, "checkpoint_bytes": sum(r["checkpoint_bytes"] for r in jr),
        "checkpoint_s_total": sum(r["checkpoint_s_total"] for r in jr),
        "checkpoint_s_mean": (sum(r["checkpoint_s_total"] for r in jr) / ck_count) if ck_count else np.nan,
        "checkpoint_mb": sum(r["checkpoint_bytes"] for r in jr) / ck_count / 1e6 if ck_count else np.nan,
        **({"ingest_bytes": ingest.get("ingest_bytes", 0), "ingest_mb_per_s": ingest.get("ingest_mb_per_s", 0.0)}
           if ingest else {"ingest_bytes": 0, "ingest_mb_per_s": 0.0}),
        **summary,
    }
    if "device_read_mb_per_s_avg" in summary:
        row["device_read_mib_per_s_avg"] = summary["device_read_mb_per_s_avg"] * 1e6 / MIB
        row["device_write_mib_per_s_avg"] = summary["device_write_mb_per_s_avg"] * 1e6 / MIB
        row["device_read_mib_per_s_active"] = _active_mean(series, "read_mb_per_s") * 1e6 / MIB
        row["device_read_iops_active"] = _active_mean(series, "read_iops")
        row["device_read_per_consumed"] = summary["device_read_bytes"] / pipeline if pipeline else np.nan
    return row, job_rows, epoch_rows, series


# --------------------------------------------------------------------------- study
def warm_libraries(log=print) -> None:
    """Import TensorFlow once outside every job's cgroup, so its library pages are cached already.

    After an earlier stage's drop_caches the first job would otherwise read ~400 MB of libraries,
    charged to its cgroup as page cache (measured: 444 MiB 'held' by the first baseline vs 94 MiB
    by the next), which skews its startup, its page cache and a ratio run's cap.
    """
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow as tf; tf.keras.applications.ResNet50"],
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True, timeout=600)
    log(f"TensorFlow libraries cached ({time.perf_counter() - t:.1f} s)")


def _memory_capability() -> str | None:
    """None when memory cgroups work here, else the reason limited runs are skipped."""
    try:
        with cgroups.Cgroup("probe", memory_limit_bytes=total_memory_bytes()):
            return None
    except cgroups.CgroupUnavailable as exc:
        return str(exc)


def run_study(params: Params, out_dir: str | Path = "reports/train_resnet50", log=print) -> "pd.DataFrame":
    """Run every scenario on every target; write runs.csv and friends to out_dir."""
    import pandas as pd

    p: TrainParams = params.section(STUDY)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("timeseries", "logs", "jobs"):
        shutil.rmtree(out_dir / sub, ignore_errors=True)
        (out_dir / sub).mkdir()
    for name in p.targets:
        params.target(name)   # unknown name -> ParamsError naming the allowed ones
    tlist = [t for t in targets_mod.resolve_all(params) if not p.targets or t.name in p.targets]
    datasets = {t.name: resolve_dataset(params, t, p, log) for t in tlist}
    warm_libraries(log)
    for t in tlist:
        targets_mod.check_profile_speed(t, [Path(f) for f in datasets[t.name].files[:4]])
    notes: list[str] = []
    reason = _memory_capability()
    runs = plan(p)
    if reason:
        skipped = [r for r in runs if parse_memory(r.memory).limited]
        runs = [r for r in runs if not parse_memory(r.memory).limited]
        notes.append(f"memory-limited runs skipped ({len(skipped)} per target and repeat: "
                     f"{', '.join(sorted({r.memory for r in skipped}))}): memory cgroups unavailable: {reason}")
    table = results.RunTable(out_dir / "runs.csv")
    job_rows: list[dict] = []
    epoch_rows: list[dict] = []
    results.write_json(out_dir / "inventory.json", inventory.collect(params, tlist))
    need: dict[str, int] = {}
    for repeat in range(1, p.repeats + 1):
        for spec in runs:
            for t in tlist:
                run_id = run_id_for(spec, t.name, repeat)
                log(f"[{run_id}] {spec.models} model(s), memory {spec.memory}, {datasets[t.name].records} records")
                out = execute_run(spec, t, datasets[t.name], p, params, run_id, repeat, out_dir,
                                  need_hint=need.get(t.name), log=log)
                row, jobs, epochs, series = out
                if row["status"] == "ok":
                    results.write_csv(out_dir / "timeseries" / f"{run_id}.csv", pd.DataFrame(series))
                    need[t.name] = max(need.get(t.name, 0), int(row["memory_need_bytes"]))
                    if row.get("foreign_cache_drops"):
                        notes.append(f"{run_id}: another process dropped the page cache {row['foreign_cache_drops']} "
                                     "time(s) during the run, so its cache hits (re-read ratio) understate caching")
                table.append(row)
                job_rows += jobs
                epoch_rows += epochs
                results.write_csv(out_dir / "jobs.csv", pd.DataFrame(job_rows))
                results.write_csv(out_dir / "epochs.csv", pd.DataFrame(epoch_rows))
    shutil.rmtree(out_dir / "jobs", ignore_errors=True)
    frame = table.frame()
    results.write_json(out_dir / "notes.json", {"warnings": [w for t in tlist for w in t.warnings] + notes})
    results.write_json(out_dir / "metrics.json", metrics(frame, [t.name for t in tlist]))
    return frame


# --------------------------------------------------------------------------- analysis
def _ok(frame):
    return frame[frame.status == "ok"] if "status" in frame else frame


def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other on matched scenarios, then the seed's finding per
    target: a memory limit vs none (the job's device reads and its training time)."""
    from .report import compare, versus_reference

    keys = ["sweep", "models", "memory_setting", "ingest_target_mb_per_s", "checkpoint_every_steps"]
    out = versus_reference(_ok(frame), target_names, keys,
                           [("training_time_s", "lower", "ResNet50 training time"),
                            ("images_per_s", "higher", "ResNet50 training throughput (images/s)")])
    ok = _ok(frame)
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
                    h["text"] = f"{d:+.1f}%" + (f" (×{1 + d / 100:.1f})" if metric == "job_read_bytes" else "")
                out.append({**h, "id": f"{metric}:{name}|{setting}_vs_none", "hint": "the limit's effect",
                            "ref": f"memory {setting}", "other": "no limit"})
    return out


def pd_zero(frame):
    import pandas as pd
    return pd.Series(0, index=frame.index)


def memory_effect(frame, target: str) -> dict | None:
    """Baseline (no limit) vs the most limited ratio run of one model on a target."""
    ok = _ok(frame)
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


def metrics(frame, target_names: list[str]) -> dict:
    out: dict = {"runs": int(len(frame)), "failed_runs": int((frame.status != "ok").sum()) if len(frame) else 0}
    ok = _ok(frame)
    for name, g in ok.groupby("target"):
        d = {"max_images_per_s": float(g.images_per_s.max()),
             "baseline_training_time_s": float(g[(g.sweep == "memory") & (g.memory_setting == "none")]
                                               .training_time_s.mean()) if ((g.sweep == "memory") &
                                                                            (g.memory_setting == "none")).any() else None}
        eff = memory_effect(frame, name)
        if eff:
            d["limited_device_read_ratio"] = None if math.isinf(eff["read_ratio"]) else round(float(eff["read_ratio"]), 2)
            d["limited_training_time_change_percent"] = round(float(eff["time_change_percent"]), 1)
        out[name] = d
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out


TITLE = "ResNet50 training under memory limits"


def _mib(v) -> float:
    return v / MIB if v == v and v is not None else float("nan")


def profile_table(frame, target: str):
    """The seed's 'baseline vs limited memory' disk-profile table for one target."""
    import pandas as pd

    ok = _ok(frame)
    mem = ok[(ok.sweep == "memory") & (ok.target == target)]
    if mem.empty:
        return pd.DataFrame()
    order = sorted(mem.memory_setting.unique(), key=lambda s: (parse_memory(s).limited, s))
    g = mem.groupby("memory_setting").mean(numeric_only=True)
    def limit_text(r) -> str:
        if r.name == "none":
            return "none"
        if parse_memory(r.name).kind == "ratio":
            return f"page cache ≤ {_mib(r.page_cache_cap_bytes):,.0f} MiB"
        return f"{_mib(r.memory_limit_bytes):,.0f} MiB (whole job)"

    rows = [("Memory limit", limit_text),
            ("Page cache held, mean MiB", lambda r: _mib(r.get("page_cache_mean_bytes", np.nan))),
            ("Avg. IOPS (device, read)", lambda r: r.get("device_read_iops_avg", np.nan)),
            ("Avg. IOPS, active intervals", lambda r: r.get("device_read_iops_active", np.nan)),
            ("Avg. throughput MiB/s", lambda r: r.get("device_read_mib_per_s_avg", np.nan)),
            ("Avg. throughput MiB/s, active", lambda r: r.get("device_read_mib_per_s_active", np.nan)),
            ("Avg. block size KiB", lambda r: r.get("device_avg_read_kib", np.nan)),
            ("Avg. response time µs", lambda r: r.get("device_read_latency_us", np.nan)),
            ("Device utilization %", lambda r: r.get("device_util_percent_avg", np.nan)),
            ("Job reads MiB (all epochs)", lambda r: _mib(r.job_read_bytes)),
            ("Re-read ratio, epochs ≥ 2", lambda r: r.reread_ratio),
            ("Training time s", lambda r: r.training_time_s),
            ("Images/s", lambda r: r.images_per_s),
            ("CPU user / sys / iowait %", lambda r: f"{r.get('cpu_user_percent', np.nan):.0f} / "
                                                    f"{r.get('cpu_system_percent', np.nan):.0f} / "
                                                    f"{r.get('cpu_iowait_percent', np.nan):.1f}"),
            ("Peak memory MiB", lambda r: _mib(r.memory_peak_bytes)),
            ("Failcnt / OOM kills", lambda r: f"{r.memory_failcnt:.0f} / {r.oom_kills:.0f}")]
    out = {"Metric": [name for name, _ in rows]}
    for s in order:
        r = g.loc[s]
        out["baseline (none)" if s == "none" else f"limited {s}"] = [f(r) for _, f in rows]
    return pd.DataFrame(out)


def parallel_table(frame, target: str, memory: str):
    """The seed's 'parallel models' table: aggregate profile per K."""
    import pandas as pd

    ok = _ok(frame)
    sel = ok[(ok.target == target) & (ok.memory_setting == memory) & (ok.sweep.isin(["memory", "parallel"]))]
    if sel.models.nunique() < 2:
        return pd.DataFrame()
    g = sel.groupby("models").mean(numeric_only=True)
    rows = {"Parallel models": [int(k) for k in g.index],
            "CPUs per job": g.cpus_per_job.astype(int).tolist(),
            "Batch size": g.batch_size.astype(int).tolist(),
            "Disk IOPS": g.get("device_read_iops_avg", pd.Series(np.nan, g.index)).tolist(),
            "Throughput MiB/s": g.get("device_read_mib_per_s_avg", pd.Series(np.nan, g.index)).tolist(),
            "Block KiB": g.get("device_avg_read_kib", pd.Series(np.nan, g.index)).round().tolist(),
            "Response time µs": g.get("device_read_latency_us", pd.Series(np.nan, g.index)).round().tolist(),
            "Images/s (all jobs)": g.images_per_s.tolist(),
            "Images/s per job": g.images_per_s_per_job.tolist(),
            "Training time s": g.training_time_s.tolist(),
            "CPU busy %": g.get("cpu_busy_percent", pd.Series(np.nan, g.index)).tolist()}
    return pd.DataFrame(rows)


def _series(study_dir: Path, run_id: str):
    import pandas as pd
    f = study_dir / "timeseries" / f"{run_id}.csv"
    if not f.exists() or f.stat().st_size < 5:
        return None
    try:
        return pd.read_csv(f)
    except (ValueError, pd.errors.EmptyDataError):
        return None


def brief_section(study_dir, frame, names: list[str]) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd
    from .report import show_figure, show_md, show_table, style

    style()
    study_dir = Path(study_dir)
    ok = _ok(frame)
    if ok.empty:
        show_md("No training run succeeded; the failed runs and their reasons are listed below.")
    else:
        r0 = ok.iloc[0]
        show_md(
            f"**What ran.** `tf.keras.applications.ResNet50(weights=None)` trained from TFRecords "
            f"({int(r0.dataset_records)} records, {r0.dataset_bytes / 1e6:.1f} MB, source: {r0.dataset_source}) at "
            f"{int(r0.input_size)}×{int(r0.input_size)} input, batch {int(r0.batch_size)}, {int(r0.epochs)} epochs "
            f"on {r0.tf_device}, through a `tf.data` pipeline (parallel interleaved reads, parse, decode, random "
            "crop + flip, batch, prefetch, AUTOTUNE). Every job ran in its own memory cgroup. A dataset:memory "
            "ratio caps the page cache the job may hold at dataset × memory/dataset: every 50 ms the cgroup's "
            "memory controller reclaims whatever exceeds it, least recently used first. TensorFlow's own memory "
            "(1–2 GB here) is not capped, since a bare 2.5:1 of a small dataset would be far below it. An absolute size "
            "limits the whole job, as `docker run -m` does. The cache was made cold "
            "before every measured phase; device counters were sampled during training. Disk figures are device-"
            "wide; *job reads* are the bytes each training process caused to be read from storage.")
    for n in names:
        t = profile_table(frame, n)
        if t.empty:
            continue
        show_table(t, f"{n}: disk profile of one model, baseline vs limited memory (means over repeats; "
                      "'active' averages discard intervals without reads, as the seed's tables do; a ratio run's "
                      "failcnt counts charges that met the limit while the page-cache cap reclaimed).")
    lines = []
    over = (" Over 100 % means read amplification: with so little page cache, pages the kernel read ahead were "
            "evicted before the pipeline consumed them and were read again.")
    for n in names:
        eff = memory_effect(frame, n)
        if eff is None:
            continue
        ratio = "from zero" if math.isinf(eff["read_ratio"]) else f"×{eff['read_ratio']:.1f}"
        verb = "raised" if math.isinf(eff["read_ratio"]) or eff["read_ratio"] >= 1 else "changed"
        caveat = (f" Caution: another process dropped the page cache {eff['foreign_cache_drops']:.0f} time(s) during "
                  "these runs, which forces re-reads in any run." if eff["foreign_cache_drops"] else "")
        lines.append(f"- **{n}**: limiting memory ({eff['setting']}) {verb} the job's device reads {ratio} while "
                     f"training time changed by {eff['time_change_percent']:+.1f} %; after the first epoch "
                     f"{eff['limited_reread'] * 100:.0f} % of the bytes the pipeline consumed came from the device "
                     f"(baseline {eff['base_reread'] * 100:.0f} %).{over if eff['limited_reread'] > 1.02 else ''}"
                     f"{caveat}")
    if lines:
        show_md("**Analysis.**\n\n" + "\n".join(lines) + "\n\nResNet50 on this CPU is compute-bound, so extra "
                "reads cost little time unless the device is slow: the same finding as the seed (×48 throughput, "
                "training time nearly unchanged on fast storage).")
    # Time series of the memory sweep
    mem = ok[ok.sweep == "memory"]
    if not mem.empty:
        fig, axes = plt.subplots(1, 3, figsize=(11.5, 3.4))
        for _, r in mem.drop_duplicates(["target", "memory_setting"]).iterrows():
            s = _series(study_dir, r.run_id)
            label = f"{r.target}, {r.memory_setting}"
            if s is not None and not s.empty:
                axes[0].plot(s.t_s, s.read_mb_per_s * 1e6 / MIB, label=label)
                axes[1].plot(s.t_s, s.read_iops, label=label)
            m = _series(study_dir, f"{r.run_id}-memory")
            if m is not None and not m.empty:
                m = m[m.job == 0]
                axes[2].plot(m.t_s, m.page_cache_bytes / MIB, label=label)
        axes[0].set(xlabel="seconds", ylabel="read MiB/s", title="Device read throughput")
        axes[1].set(xlabel="seconds", ylabel="read IOPS", title="Device read IOPS")
        axes[2].set(xlabel="seconds", ylabel="MiB", title="Page cache held by the job")
        axes[0].legend(fontsize=7)
        show_figure(fig, "One model training (first repeat): device reads and the unmapped page cache charged to "
                         "the job's cgroup. Reads after the first epoch are page-cache misses; the re-read "
                         "ratios are in the table above.")
    # Parallel models
    par = ok[ok.sweep == "parallel"]
    if not par.empty:
        memory = par.memory_setting.iloc[0]
        for n in names:
            t = parallel_table(frame, n, memory)
            if not t.empty:
                show_table(t, f"{n}: parallel models, each in its own cgroup with memory {memory} and an equal "
                              "share of the cores (device counters aggregate all jobs).")
        jobs_f = study_dir / "jobs.csv"
        if jobs_f.exists():
            jobs = pd.read_csv(jobs_f)
            jobs = jobs[jobs.run_id.isin(par.run_id)]
            if not jobs.empty:
                j = jobs[["target", "run_id", "job", "cpus", "images_per_s", "training_time_s", "job_read_bytes",
                          "memory_peak_bytes"]].copy()
                j["job_read_bytes"] /= MIB
                j["memory_peak_bytes"] /= MIB
                j["run_id"] = j.run_id.str.extract(r"-k(\d+)-")[0].astype(int)
                j.columns = ["Target", "Models", "Job", "CPUs", "Images/s", "Time s", "Job reads MiB", "Peak MiB"]
                show_table(j, "Per-job profile of the parallel runs.")
    # Ingest and checkpoint
    extra = []
    for n in names:
        base = ok[(ok.target == n) & (ok.sweep == "memory") & (ok.memory_setting == "none")]
        if base.empty:
            continue
        b = base.mean(numeric_only=True)
        ing = ok[(ok.target == n) & (ok.sweep == "ingest")]
        if not ing.empty:
            i = ing.mean(numeric_only=True)
            extra.append({"Target": n, "Scenario": f"ingest {i.ingest_target_mb_per_s:g} MB/s while training",
                          "Training time s": i.training_time_s, "Δ time vs baseline %": (i.training_time_s /
                                                                                          b.training_time_s - 1) * 100,
                          "CPU iowait %": i.get("cpu_iowait_percent", np.nan),
                          "Baseline iowait %": b.get("cpu_iowait_percent", np.nan),
                          "Device write MiB/s": i.get("device_write_mib_per_s_avg", np.nan),
                          "Achieved ingest MB/s": i.ingest_mb_per_s})
        ck = ok[(ok.target == n) & (ok.sweep == "checkpoint")]
        if not ck.empty:
            c = ck.mean(numeric_only=True)
            extra.append({"Target": n, "Scenario": f"checkpoint every {int(c.checkpoint_every_steps)} steps "
                          f"({c.checkpoints:.0f} × {c.checkpoint_mb:.0f} MB, {c.checkpoint_s_mean:.2f} s each)",
                          "Training time s": c.training_time_s,
                          "Δ time vs baseline %": (c.training_time_s / b.training_time_s - 1) * 100,
                          "CPU iowait %": c.get("cpu_iowait_percent", np.nan),
                          "Baseline iowait %": b.get("cpu_iowait_percent", np.nan),
                          "Device write MiB/s": c.get("device_write_mib_per_s_avg", np.nan),
                          "Achieved ingest MB/s": np.nan})
    if extra:
        show_table(pd.DataFrame(extra), "Ingest while training and frequent checkpoints, each against the "
                                        "baseline run of the same target (one model, no memory limit; its "
                                        "checkpoint interval is the long default).")
    # Training really happened
    if not ok.empty:
        show_md(f"**Training check.** Mean loss fell from {ok.loss_first_epoch.mean():.3f} (first epoch) to "
                f"{ok.loss_last_epoch.mean():.3f} (last epoch); last-epoch accuracy {ok.accuracy_last_epoch.mean():.2f} "
                f"on {ok.iloc[0].get('num_classes', 'the')} classes of class-dependent synthetic images.")
    bad = frame[frame.status != "ok"] if "status" in frame else frame.iloc[0:0]
    if not bad.empty:
        show_table(bad[["target", "sweep", "models", "memory_setting", "failure_reason"]],
                   "Failed runs (not included above).")
