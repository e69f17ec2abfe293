"""One training job, inside its own process (started by jobs.Job with `python -c BOOT`).

The job joins its cgroup before anything else (BOOT), imports TensorFlow, builds
`tf.keras.applications.ResNet50(weights=None)`, warms up on one cached record (traces the
train step), reports ready and waits for "go" on stdin; after a measured phase, "again <json>"
re-arms it for a later run (its files and settings, a fresh iterator). The measured phase is the real
tf.data pipeline (parallel interleaved reads, parse, decode, random crop + flip, batch,
prefetch, AUTOTUNE) feeding a real train step. Events go to the parent as JSON lines on
an inherited pipe. Kept light on imports: it runs in every job process.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ...kit import checkpoint
from ...kit.tf_import import tensorflow


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
    balanced = spec.get("balanced_batches", False)
    if balanced and warmup:
        # one record repeated has one label: cycle the labels so the balancer's buffers fill as in training
        ds = ds.enumerate().map(lambda i, x: (x[0], i % spec["num_classes"], x[2]))
    # Batch then repeat: an epoch reads every record once; the partial last batch is dropped
    # so the train step is traced once.
    ds = class_balanced_batches(ds, batch, spec["num_classes"], tf) if balanced \
        else ds.batch(batch, drop_remainder=True)
    ds = ds.repeat().prefetch(auto)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = max(1, spec["threads"])
    return ds.with_options(opts)


def class_balanced_batches(ds, batch: int, classes: int, tf):
    """Batches of batch // classes records of each class, in the order the records came (reads untouched).

    Why: batch normalisation in training mode normalises over the batch, and a batch of 16 whose class mix
    was skewed sent a converged model's loss from ~0.01 to 2.3-5.4 (docs/studies/train_resnet50.md).
    Records are grouped into per-class chunks of `share`; a chunk's round is how many chunks of its class
    came before it in this epoch, and a batch is round r's chunk of every class. Every record is read once
    an epoch; what cannot fill a whole balanced batch at the epoch's end is dropped, as drop_remainder does.
    On a set with equal classes that is records // batch batches (floor(floor(n / c) / k) = floor(n / ck))."""
    share = batch // classes

    def chunk(_label, window):
        return window.batch(share)

    def number(counts, item):
        label = tf.minimum(tf.maximum(item[1][0], 0), classes - 1)   # a bad label is reported by _train
        return tf.tensor_scatter_nd_add(counts, [[label]], [1]), (item, counts[label])

    def whole(parts):   # [classes, share, ...] -> [batch, ...]
        return tuple(tf.reshape(x, tf.concat([[batch], tf.shape(x)[2:]], 0)) for x in parts)

    ds = ds.group_by_window(lambda _x, y, _n: y, chunk, window_size=share)
    ds = ds.filter(lambda _x, y, _n: tf.shape(y)[0] == share)     # the epoch's last, partial chunks
    ds = ds.scan(tf.zeros([classes], tf.int64), number)
    ds = ds.group_by_window(lambda _item, rnd: rnd, lambda _r, w: w.map(lambda item, _rnd: item).batch(classes),
                            window_size=classes)
    ds = ds.filter(lambda _x, y, _n: tf.shape(y)[0] == classes)  # rounds some class never completed
    return ds.map(lambda *parts: whole(parts))


def _emit(fd: int, **event) -> None:
    os.write(fd, (json.dumps(event) + "\n").encode())


def _rss_peak_bytes() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _model(spec: dict, tf):
    """ResNet50 (no weights), SGD with momentum and the traced train step."""
    size, classes = spec["input_size"], spec["num_classes"]
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=classes)
    opt = tf.keras.optimizers.SGD(spec["learning_rate"], momentum=0.9)
    # its momentum slots made now, not inside the first trace: a variable made while tracing makes tf.function trace
    # the step a second time (measured here: the first step 14-16 s of CPU at 32 px, 7-8 s with the slots made first)
    opt.build(model.trainable_variables)
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

    return model, opt, train_step


class _Checkpointer:
    """Saves model + optimizer; a save counts as done only when its files are on the device."""

    def __init__(self, ckpt_dir: Path, model, opt, tf):
        self.dir = ckpt_dir
        self.manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=opt), str(ckpt_dir),
                                                  max_to_keep=2)
        self.tally = checkpoint.Tally()

    @property
    def count(self) -> int:
        return self.tally.count

    @property
    def bytes(self) -> int:
        return self.tally.bytes

    @property
    def seconds(self) -> float:
        return self.tally.seconds

    def _write(self) -> list[Path]:
        prefix = self.manager.save()
        return [f for f in self.dir.glob(Path(prefix).name + "*")] + [self.dir / "checkpoint"]

    def save(self) -> None:   # count the write as done only when it is on the device
        self.tally.add(checkpoint.save(self._write))


def _train(spec: dict, tf, it, train_step, checkpointer, fd: int) -> None:
    """The measured phase: every epoch's steps, checkpoints when due, one event per step and epoch."""
    steps_per_epoch, batch, classes = spec["steps_per_epoch"], spec["batch_size"], spec["num_classes"]
    every, interval = spec["checkpoint_every_steps"], spec["checkpoint_interval_s"]
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
            if checkpointer is not None and ((every and step % every == 0)
                                             or (not every and time.perf_counter() - last_ck >= interval)):
                checkpointer.save()
                last_ck = time.perf_counter()
            _emit(fd, event="step", step=step, loss=losses[-1], accuracy=accs[-1])
        _emit(fd, event="epoch", epoch=epoch, seconds=time.perf_counter() - e0, images=steps_per_epoch * batch,
              read_bytes=_proc_io_read_bytes() - r0, pipeline_bytes=consumed,
              loss=float(np.mean(losses)), accuracy=float(np.mean(accs)),
              loss_first_step=losses[0], loss_last_step=losses[-1], loss_max_step=max(losses),
              step_losses=losses)
    ck = checkpointer
    _emit(fd, event="done", seconds=time.perf_counter() - t_start, steps=step,
          checkpoints=ck.count if ck else 0, checkpoint_bytes=ck.bytes if ck else 0,
          checkpoint_s=ck.seconds if ck else 0.0, rss_peak_bytes=_rss_peak_bytes())


ITERATOR_FREE_S = 0.5


def _end_iterator(last: list) -> None:
    """Drop the last run's tf.data iterator (the only reference, in `last`) without waiting out
    tf.data's autotune thread.

    Its pipeline and buffers go first (TensorFlow's root iterator destroys its input before joining
    the autotune thread): the job's RSS fell by 14 MiB within 0.1 s and not at all after. The join then
    waits out that thread's timed sleep, 7-9 s of a kept job's re-arm measured here at no CPU. A
    background thread drops the reference and waits it out; os._exit ends it with the job."""
    ender = threading.Thread(target=last.clear, name="end-iterator", daemon=True)
    ender.start()
    ender.join(timeout=ITERATOR_FREE_S)


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
    tf = tensorflow()

    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(max(2, spec["threads"]))
    tf.keras.utils.set_random_seed(spec["seed"] + spec["job"])
    gpus = tf.config.list_physical_devices("GPU")
    device = f"GPU ({gpus[0].name})" if gpus else "CPU"
    model, opt, train_step = _model(spec, tf)
    # Warm-up: traces the step, allocates model + optimizer state and runs the input pipeline
    # on one cached record, so the memory measured at "ready" is the job's steady need.
    # At learning rate 0 the step runs whole but leaves weights and momentum as initialised: warm-up
    # steps on one record pushed the fresh model to that record's class (epoch-1 loss 19-22 here).
    warm = iter(build_dataset(spec["files"], spec, tf, warmup=True))
    opt.learning_rate.assign(0.0)
    for _ in range(spec["warmup_steps"]):
        xb, yb, _ = next(warm)
        train_step(xb, tf.math.floormod(yb, spec["num_classes"]))
    opt.learning_rate.assign(spec["learning_rate"])
    del warm
    while True:
        ckpt_dir = Path(spec["checkpoint_dir"]) if spec.get("checkpoint_dir") else None
        checkpointer = _Checkpointer(ckpt_dir, model, opt, tf) if ckpt_dir else None
        it = iter(build_dataset(spec["files"], spec, tf))   # reader threads exist; no record read before next()
        _emit(fd, event="ready", startup_s=time.perf_counter() - t0, device=device, rss_peak_bytes=_rss_peak_bytes())
        if sys.stdin.readline().strip() != "go":
            break
        _train(spec, tf, it, train_step, checkpointer, fd)
        # A later run on this target may take this job as it is (jobs.Job.again): its new settings, then
        # a fresh iterator (the old one's prefetched records are dropped with it) and "ready" again.
        line = sys.stdin.readline()
        if not line.startswith("again "):
            break
        last = [it]
        del it, checkpointer
        _end_iterator(last)
        spec.update(json.loads(line[len("again "):]))
        t0 = time.perf_counter()
    # Done: checkpoints are on the device, events and logs unbuffered. The interpreter's teardown with
    # TensorFlow loaded (its thread pools, the endless tf.data iterator still prefetching) took 6.3 s
    # here vs 0.14 s for _exit (measured), while the parent waits for the job to end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
