"""A job carried from run to run keeps training: once converged, no step's loss rises above ln(classes).

Measured before the fix (docs/studies/train_resnet50.md): with 32×32 inputs ResNet50's last stage is 1×1, so each
batch-normalisation layer there normalises over the 16 samples of a batch; a converged model met a batch
whose class mix was skewed (one class with 0-1 samples) and its loss jumped from ~0.001 to 5.4, while
the same 16 images inside a 32-sample batch, same weights, scored 0.0. The generated set also held one
class per shard, so the unordered interleave made skewed batches common. The quick profile now trains at
64×64 on shards that each hold every class, in class-balanced batches (worker.class_balanced_batches).
"""
from __future__ import annotations

import math
import os
import sys
from types import SimpleNamespace

import pytest

from storagebrief.core import config
from storagebrief.studies.train_resnet50 import jobs as jobs_mod
from storagebrief.studies.train_resnet50.dataset import generate_dataset

# one start, six re-arms: 56 steps at the quick profile's 4 steps x 2 epochs; converged after step 28 here (seeds 0
# and 1), so 28 steps are checked after it (80 steps until issue 56: the old 32x32 settings spiked 4 times in 52)
RUNS = 7


def _quick() -> dict:
    return config.read_yaml(config.default_params_file())["train_resnet50"]


def _labels_per_shard(files):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    feat = {"image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    return [sorted({int(tf.io.parse_single_example(r, feat)["image/class/label"]) for r in tf.data.TFRecordDataset(f)})
            for f in files]


@pytest.mark.slow
def test_generated_shards_each_hold_every_class(tmp_path):
    q = _quick()
    p = SimpleNamespace(dataset_images=q["dataset_images"], record_kib=8, shards=q["shards"],
                        num_classes=q["num_classes"], seed=0)
    ds = generate_dataset(SimpleNamespace(study_dir=lambda n: tmp_path / n), p, log=lambda m: None)
    assert _labels_per_shard(ds.files) == [list(range(q["num_classes"]))] * q["shards"]


@pytest.mark.slow
def test_a_carried_job_never_spikes_above_ln_classes_once_converged(tmp_path):
    q = _quick()
    classes = q["num_classes"]
    # the quick profile's own records (1 MiB): small ones (16 KiB, 64 px) did not show the spikes in 48 steps
    p = SimpleNamespace(dataset_images=q["dataset_images"], record_kib=q["record_kib"], shards=q["shards"],
                        num_classes=classes, seed=q["seed"])
    ds = generate_dataset(SimpleNamespace(study_dir=lambda n: tmp_path / n), p, log=lambda m: None)
    steps = q["dataset_images"] // q["batch_size"]
    spec = {"job": 0, "input_size": q["input_size"], "batch_size": q["batch_size"], "num_classes": classes,
            "epochs": q["epochs"], "steps_per_epoch": steps, "learning_rate": q["learning_rate"],
            "shuffle_buffer": q["shuffle_buffer"], "read_parallelism": q["read_parallelism"],
            "warmup_steps": q["warmup_steps"], "threads": 2, "cpus": sorted(os.sched_getaffinity(0)),
            "files": ds.files, "seed": q["seed"], "checkpoint_dir": "", "checkpoint_every_steps": 0,
            "checkpoint_interval_s": 600, "balanced_batches": q["class_balanced_batches"]}
    (tmp_path / "jobs").mkdir()
    job = jobs_mod.new_job(0, spec, "r0-j0", tmp_path, run_id="r0")
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + ([env_path] if env_path else []))
    losses: list[list[float]] = []       # per run: every step's loss, in order
    try:
        job.start()
        for run in range(RUNS):
            jobs_mod._poll([job], "ready", 600, 900)
            job.go()
            jobs_mod._poll([job], "done", 600, 900)
            losses.append([x for e in job.epochs for x in e["step_losses"]])
            if run < RUNS - 1:
                job.again({"seed": q["seed"]}, f"r{run + 1}")
    finally:
        job.end()
        os.environ["PYTHONPATH"] = env_path
    flat = [x for run in losses for x in run]
    assert len(flat) == RUNS * q["epochs"] * steps
    # converged: the first epoch whose mean loss is below a tenth of chance (ln classes)
    bound = math.log(classes)
    epochs = [flat[i:i + steps] for i in range(0, len(flat), steps)]
    first = next((i for i, e in enumerate(epochs) if sum(e) / len(e) < 0.1 * bound), None)
    assert first is not None and first < len(epochs) - 2, f"never converged: {[round(x, 3) for x in flat]}"
    after = flat[(first + 1) * steps:]
    # Measured before class-balanced batches: one step of 2.28 in 56 after convergence in about 1 run in 5, a
    # batch whose class mix was skewed, through batch normalisation in training mode (docs/studies/train_resnet50.md).
    above = [x for x in after if x > bound]
    assert not above, f"loss rose above ln({classes}) = {bound:.3f} after convergence: {above} of {after}"
