"""The TFRecords a training job reads: the preprocess stage's output, or a generated ImageNet-like set."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core import results
from ...core.config import Params as AllParams, ParamsError
from ...core.folders import folder_below
from ...formats.images import class_pattern
from ...formats.tfrecord import image_example, record_lengths
from ...kit.space import check_space
from . import STUDY
from .params import TrainParams


@dataclass
class Dataset:
    files: list[str]
    records: int
    bytes: int
    source: str      # "preprocess" or "generated"


def _frame_sizes(path: Path) -> list[int]:
    """Record payload lengths of a TFRecord file."""
    return record_lengths(path)


def _reuse(directory: Path, spec: dict) -> Dataset | None:
    """The set already on the target when its manifest matches the spec and every file exists."""
    manifest = directory / "manifest.json"
    if not manifest.exists():
        return None
    try:
        saved = json.loads(manifest.read_text())
    except ValueError:
        return None
    files = [str(directory / f) for f in saved.get("files", [])]
    if saved.get("spec") == spec and files and all(Path(f).exists() for f in files):
        return Dataset(files, saved["records"], saved["bytes"], "generated")
    return None


def _jpeg_side(p: TrainParams, rng: np.random.Generator) -> int:
    """JPEG size grows with area: calibrate the side once so records land near record_kib."""
    import cv2

    probe = class_pattern(0, p.num_classes, 256, 256, rng, 3, 8)
    ok, enc = cv2.imencode(".jpg", probe, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return int(np.clip(256 * math.sqrt(p.record_kib * 1024 / len(enc)), 64, 4096))


def _spec(p: TrainParams) -> dict:
    """What a generated set is made of (its manifest: a set on the target with the same is reused)."""
    return {"images": p.dataset_images, "record_kib": p.record_kib, "shards": p.shards,
            "classes": p.num_classes, "seed": p.seed, "version": 2}   # 2: every shard holds every class


def shard_of(i: int, num_classes: int, shards: int) -> int:
    """The shard of record i (label i % num_classes): runs of num_classes consecutive records go to one
    shard in turn, so every shard holds every class in equal shares, as a shuffled ImageNet set does.

    Version 1 wrote record i to shard i % shards: with shards == num_classes each shard held one class,
    the unordered interleave of shard reads made a batch's class mix follow which file's reads came back
    first, and batches of 16 skewed to one or two classes went through batch normalisation in training
    mode: a converged model's per-step loss jumped from ~0.01 to 2-3.5 (docs/studies/train_resnet50.md)."""
    return (i // max(1, num_classes)) % shards


def generation_bytes(target, p: TrainParams, name: str = "dataset") -> int:
    """Bytes generate_dataset will write on the target: none when a matching set is kept there."""
    if _reuse(folder_below(target.study_dir(STUDY.name), name, create=False), _spec(p)) is not None:
        return 0
    return int(p.dataset_images * p.record_kib * 1024 * 1.1)


def generate_dataset(target, p: TrainParams, log=print, name: str = "dataset") -> Dataset:
    """ImageNet-like TFRecords (JPEG, ~record_kib each, class-dependent content) on the target."""
    import cv2

    directory = folder_below(target.study_dir(STUDY.name), name, create=False)
    kept = _reuse(directory, _spec(p))
    if kept is not None:
        return kept
    spec = _spec(p)
    rng = np.random.default_rng(p.seed)
    side = _jpeg_side(p, rng)
    shards = min(p.shards, p.dataset_images)
    names = [f"train-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ...kit.tf_import import tensorflow
    tf = tensorflow()        # without Keras's optional integrations (kit/tf_import.py)

    with results.staged_dir(directory) as tmp:
        writers = [tf.io.TFRecordWriter(str(tmp / n)) for n in names]
        try:
            for i in range(p.dataset_images):
                label = i % p.num_classes
                rgb = class_pattern(label, p.num_classes, side, side, rng, 3, 8)
                ok, jpg = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 95])
                if not ok:
                    raise OSError("OpenCV could not encode a JPEG")
                writers[shard_of(i, p.num_classes, shards)].write(image_example(jpg.tobytes(), "jpeg", side, side, label,
                                                        f"img_{i:08d}.jpg"))
        finally:
            for w in writers:
                w.close()
        for n in names:   # on the device before the manifest says the set is complete
            fd = os.open(tmp / n, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        total = sum(os.path.getsize(tmp / n) for n in names)
        results.write_json(tmp / "manifest.json",
                           {"spec": spec, "files": names, "records": p.dataset_images, "bytes": total})
    files = [str(directory / n) for n in names]
    log(f"generated {p.dataset_images} JPEG TFRecords ({total / p.dataset_images / 1024:.0f} KiB each, "
        f"{side}x{side}) in {directory}")
    return Dataset(files, p.dataset_images, total, "generated")


def resolve_dataset(params: AllParams, target, p: TrainParams, log=print) -> Dataset:
    """The preprocessing stage's TFRecords for this target, or a generated ImageNet-like set."""
    return preprocessed(params, target, p) or generate_dataset(target, p, log)


def resolve_datasets(params: AllParams, targets: list, p: TrainParams, log=print) -> dict[str, Dataset]:
    """Every target's dataset (resolve_dataset); the space for those to generate is checked on every
    target first (targets on one filesystem added up)."""
    pre = {t.name: preprocessed(params, t, p) for t in targets}
    check_space([t for t in targets if pre[t.name] is None], lambda t: generation_bytes(t, p),
                "the generated TFRecord dataset")
    return {t.name: pre[t.name] or generate_dataset(t, p, log) for t in targets}


def preprocessed(params: AllParams, target, p: TrainParams) -> Dataset | None:
    """The preprocessing stage's TFRecords for this target, when they are to be used; None: generate."""
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
    return None
