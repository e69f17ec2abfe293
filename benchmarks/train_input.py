"""Does the input pipeline or the monitor slow ResNet50 training? Ratios measured side by side.

    python benchmarks/train_input.py [--params params.yaml] [--target local] [--steps 8] [--rounds 2]
                                     [--record-kib 110] [--images 320]

One process, one model (same trace for every variant), rounds interleave the variants so
drift hits all alike:
  synthetic   in-memory tensors (no I/O, no decode): the compute ceiling
  tfrecord    the study's tf.data pipeline over the target's TFRecords, cold cache first
  monitored   tfrecord again, with monitor.Monitor sampling the device at run.monitor_interval_s
The records are generated ImageNet-like JPEGs (--record-kib, default 110 KiB as ImageNet's) in
their own directory beside the study's dataset; --record-kib 1024 measures the quick profile's
records, whose full-size decode costs ~10 ms each on this class of CPU.
Prints images/s of each and the ratios tfrecord ÷ synthetic (goal >= 0.95 on fast storage)
and monitored ÷ tfrecord (goal >= 0.98). Not a test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--target", default=None, help="target name (default: the first)")
    ap.add_argument("--steps", type=int, default=8, help="training steps per measurement")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record-kib", type=int, default=110, help="generated JPEG record size")
    ap.add_argument("--images", type=int, default=320, help="generated records")
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()

    from storagebrief.core import config, monitor, targets as targets_mod
    from storagebrief.studies.train_resnet50.dataset import generate_dataset
    from storagebrief.studies.train_resnet50.memory import cold_dataset
    from storagebrief.studies.train_resnet50.worker import build_dataset

    params = config.load(args.params, args.overrides)
    p = params.section("train_resnet50")
    tlist = targets_mod.resolve_all(params)
    target = next((t for t in tlist if t.name == args.target), None) if args.target else tlist[0]
    if target is None:
        raise SystemExit(f"unknown target {args.target!r}; have {[t.name for t in tlist]}")
    p = p.model_copy(update={"record_kib": args.record_kib, "dataset_images": args.images})
    ds_info = generate_dataset(target, p, name=f"benchmark-dataset-{args.record_kib}k")

    import tensorflow as tf

    ncpu = len(os.sched_getaffinity(0))
    tf.config.threading.set_intra_op_parallelism_threads(ncpu)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, ncpu))
    spec = {"input_size": p.input_size, "batch_size": p.batch_size, "seed": p.seed, "threads": ncpu,
            "read_parallelism": p.read_parallelism, "shuffle_buffer": p.shuffle_buffer}
    size, batch = p.input_size, p.batch_size
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=p.num_classes)
    opt = tf.keras.optimizers.SGD(p.learning_rate, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function(jit_compile=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    x = tf.random.uniform((batch, size, size, 3))
    y = tf.random.uniform((batch,), 0, p.num_classes, dtype=tf.int64)
    synthetic = tf.data.Dataset.from_tensors((x, y, tf.zeros((batch,), tf.int64))).repeat()
    for _ in range(2):
        step(x, y)   # trace outside the measurements

    def measure(dataset, with_monitor: bool) -> float:
        it = iter(dataset)
        xb, yb, _ = next(it)   # pipeline start-up is not throughput
        step(xb, yb)
        mon = monitor.Monitor(target.device.name if target.device else None, params.run.monitor_interval_s)
        if with_monitor:
            mon.start()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            xb, yb, _ = next(it)
            float(step(xb, tf.math.floormod(yb, p.num_classes)))
        elapsed = time.perf_counter() - t0
        if with_monitor:
            mon.stop()
        return args.steps * batch / elapsed

    out = {"synthetic": [], "tfrecord": [], "monitored": []}
    for _ in range(args.rounds):
        out["synthetic"].append(measure(synthetic, False))
        cold_dataset(ds_info.files, True)
        out["tfrecord"].append(measure(build_dataset(ds_info.files, spec, tf), False))
        cold_dataset(ds_info.files, True)
        out["monitored"].append(measure(build_dataset(ds_info.files, spec, tf), True))
    med = {k: statistics.median(v) for k, v in out.items()}
    print(f"target {target.name} ({target.device.name if target.device else '?'}), {ds_info.records} records of "
          f"{ds_info.bytes / ds_info.records / 1024:.0f} KiB, ResNet50 {size}x{size}, batch {batch}, "
          f"{args.steps} steps x {args.rounds} rounds (medians)")
    print(f"{'variant':<12}{'images/s':>10}   per round")
    for k, v in out.items():
        print(f"{k:<12}{med[k]:>10.2f}   " + ", ".join(f"{x:.2f}" for x in v))
    print(f"tfrecord ÷ synthetic  = {med['tfrecord'] / med['synthetic']:.3f}   (goal >= 0.95 when storage is fast)")
    print(f"monitored ÷ tfrecord  = {med['monitored'] / med['tfrecord']:.3f}   (goal >= 0.98)")


if __name__ == "__main__":
    main()
