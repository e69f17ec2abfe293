"""Issue 61 (repeatable inputs): every data set a study generates is the same bytes from the same seed, in any
folder, at any time: made twice in two folders (seconds apart) and compared file by file (sha256, manifests too).
A seed that changes nothing fails too. The vector search's sets and indexes: vector_search/test_vector_repeatable.py.
The bytes the checkpoint and KV-cache studies write are not inputs (nothing reads them back as data): they differ
from call to call on purpose (kit.checkpoint.incompressible), so no storage below can deduplicate one run's saves
against another's."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from types import SimpleNamespace

import pytest


def _digest(root: Path) -> dict:
    files = sorted(f for f in root.rglob("*") if f.is_file())
    assert files, f"nothing was made in {root}"
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _made(tmp: Path, make) -> tuple[dict, dict, dict]:
    """(first, again, other seed): each in a folder of its own; the second after the clock's second moved on."""
    first = tmp / "a"
    make(first, 0)
    time.sleep(1.05)
    make(tmp / "b", 0)
    make(tmp / "c", 1)
    return _digest(first), _digest(tmp / "b"), _digest(tmp / "c")


def _same(tmp: Path, make) -> None:
    first, again, other = _made(tmp, make)
    assert first == again
    data = [k for k in first if not k.endswith(".json")]
    assert data and all(first[k] != other.get(k) for k in data), "the seed changed nothing"


def test_preprocess_tiffs_are_the_same_bytes_from_the_same_seed(tmp_path):
    from storagebrief.studies.preprocess import dataset, params
    _same(tmp_path, lambda d, seed: dataset.generate_dataset(
        d, params.PreprocessParams(image_count=2, image_counts=[], image_width=128, image_height=64, seed=seed), 2,
        log=lambda *_: None))


@pytest.mark.parametrize("workload", ["unet3d", "resnet50", "retinanet"])      # npz, TFRecord, JPEG
def test_emulate_files_are_the_same_bytes_from_the_same_seed(tmp_path, workload):
    from storagebrief.studies.emulate import dataset, params
    spec = params.WorkloadSpec.model_validate({**params.WORKLOADS[workload], "record_bytes": 20_000,
                                               "record_bytes_stdev": 2_000})
    _same(tmp_path, lambda d, seed: dataset.generate_dataset(d, workload, spec, 3, seed=seed, log=lambda *_: None))


@pytest.mark.slow                   # TensorFlow's import: 6-8 s of it on a loaded 2-core machine
def test_train_resnet50_tfrecords_are_the_same_bytes_from_the_same_seed(tmp_path):
    from storagebrief.studies.train_resnet50.dataset import generate_dataset

    def make(d: Path, seed: int) -> None:
        p = SimpleNamespace(dataset_images=8, record_kib=8, shards=2, num_classes=4, seed=seed)
        generate_dataset(SimpleNamespace(study_dir=lambda n: d / n), p, log=lambda *_: None)
    _same(tmp_path, make)


def test_stream_inference_videos_are_the_same_bytes_from_the_same_seed(tmp_path):
    from storagebrief.studies.stream_inference.dataset import generate_videos
    from storagebrief.studies.stream_inference.params import parse_video
    _same(tmp_path, lambda d, seed: generate_videos(d, [parse_video("144p@12")], 1.0, 80, seed, log=lambda *_: None))


def test_transfer_sweep_file_and_object_payloads_are_the_same_bytes_from_the_same_seed(tmp_path):
    from storagebrief.core.targets import Target
    from storagebrief.kit.s3ops import payload
    from storagebrief.studies.transfer_sweep.dataset import prepare_file

    def make(d: Path, seed: int) -> None:
        d.mkdir()
        prepare_file(Target("t", d), "transfer_sweep", 1 << 20, seed, log=lambda *_: None)
        (d / "object").write_bytes(payload(70_000, seed))              # object_sweep's GET objects
    _same(tmp_path, make)
