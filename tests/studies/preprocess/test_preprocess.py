import json
import os
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest

from storagebrief.core import cgroups, columns, config
from storagebrief.studies.preprocess import STUDY, dataset, metrics, params, pipeline
from storagebrief.cli import main as cli_main
from conftest import needs_blkio


def _params(params_file, *overrides):
    return config.load(params_file(), list(overrides))


def test_to_rgb8_maps_depths_and_channels():
    assert pipeline.to_rgb8(np.full((2, 2), 65535, np.uint16)).tolist() == [[[255] * 3] * 2] * 2
    mid = pipeline.to_rgb8(np.full((1, 1), 32896, np.uint16))  # 128 * 257
    assert mid[0, 0].tolist() == [128, 128, 128]
    bgr = np.zeros((1, 1, 3), np.uint8)
    bgr[..., 0] = 200  # blue in OpenCV order
    assert pipeline.to_rgb8(bgr)[0, 0].tolist() == [0, 0, 200]
    assert pipeline.to_rgb8(np.zeros((3, 3, 4), np.uint8)).shape == (3, 3, 3)


def test_bad_files_are_classified():
    size = (16, 16)
    with pytest.raises(pipeline.BadImage, match="zero-byte"):
        pipeline.decode_resize(b"", size, "area")
    with pytest.raises(pipeline.BadImage, match="not a TIFF"):
        pipeline.decode_resize(b"\x89PNG\r\n\x1a\n" + b"0" * 100, size, "area")
    ok, tiff = cv2.imencode(".tiff", np.zeros((64, 64, 3), np.uint8), [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    with pytest.raises(pipeline.BadImage, match="truncated or corrupt"):
        pipeline.decode_resize(tiff.tobytes()[:200], size, "area")


def _source_tree(tmp_path: Path) -> Path:
    """A user folder: 8-bit colour, 16-bit gray, LZW, plus corrupt/zero/non-TIFF files."""
    root = tmp_path / "src"
    for cls in ("cats", "dogs"):
        (root / cls).mkdir(parents=True)
    rng = np.random.default_rng(1)
    cv2.imwrite(str(root / "cats" / "a.tif"), rng.integers(0, 255, (120, 160, 3), dtype=np.uint8),
                [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    cv2.imwrite(str(root / "cats" / "b.tif"), rng.integers(0, 255, (90, 70, 3), dtype=np.uint8))  # LZW
    cv2.imwrite(str(root / "dogs" / "c.tif"), rng.integers(0, 65535, (100, 100), dtype=np.uint16))
    cv2.imwrite(str(root / "dogs" / "d.tif"), rng.integers(0, 255, (50, 60), dtype=np.uint8))
    good = (root / "cats" / "a.tif").read_bytes()
    (root / "dogs" / "truncated.tif").write_bytes(good[: len(good) // 3])
    (root / "dogs" / "zero.tif").write_bytes(b"")
    (root / "dogs" / "notes.txt").write_text("not an image")
    return root


@pytest.mark.slow
@pytest.mark.e2e
def test_study_on_user_folder_skips_bad_files_and_round_trips(params_file, tmp_path):
    src = _source_tree(tmp_path)
    p = _params(params_file, f"preprocess.source_dir={src}", "preprocess.image_count=7",
                "preprocess.image_counts=[]", "preprocess.processes=[2]", "targets.1.profile=null")
    out = tmp_path / "out"
    frame = STUDY.run(p, out)
    assert len(frame) == 2  # one run per target
    assert set(frame.images_ok) == {4} and set(frame.images_skipped) == {3}
    assert (frame.records_written == frame.images_ok).all()
    skipped = pd.read_csv(out / "skipped_files.csv")
    reasons = dict(zip(skipped.file.map(lambda f: Path(f).name), skipped.reason))
    assert "zero-byte" in reasons["zero.tif"] and "not a TIFF" in reasons["notes.txt"]
    assert "truncated" in reasons["truncated.tif"] or "corrupt" in reasons["truncated.tif"]
    outputs = json.loads((out / "outputs.json").read_text())
    ver = outputs["verification"]["fast"]
    assert ver["ok"] and ver["records"] == 4 and ver["shapes"] == [[32, 32, 3]]
    assert ver["labels"] == [0, 1]  # cats=0, dogs=1 (sorted class folders)
    # tf.data round trip by hand: labels match the class folders, 16-bit gray came out RGB
    import tensorflow as tf
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    seen = {}
    for rec in tf.data.TFRecordDataset(outputs["tfrecords"]["fast"]):
        ex = tf.io.parse_single_example(rec, spec)
        seen[ex["image/filename"].numpy().decode()] = (int(ex["image/class/label"]),
                                                       tf.io.decode_png(ex["image/encoded"]).shape)
    assert seen["c.tif"] == (1, (32, 32, 3)) and seen["a.tif"][0] == 0
    assert set(seen) == {"a.tif", "b.tif", "c.tif", "d.tif"}


@pytest.mark.e2e
def test_generated_dataset_single_file_mode_16bit(params_file, tmp_path):
    p = _params(params_file, "preprocess.bit_depth=16", "preprocess.channels=1", "preprocess.output_mode=single",
                "preprocess.processes=[2]", "preprocess.image_counts=[]", "targets.1.profile=null")
    out = tmp_path / "out"
    frame = STUDY.run(p, out)
    assert (frame.images_ok == 6).all() and (frame.images_skipped == 0).all()
    outputs = json.loads((out / "outputs.json").read_text())
    assert [Path(f).name for f in outputs["tfrecords"]["fast"]] == ["data.tfrecord"]
    assert outputs["verification"]["fast"]["labels"] == [0, 1, 2]
    img = cv2.imread(str(next((tmp_path / "fast").rglob("*.tif"))), cv2.IMREAD_UNCHANGED)
    assert img.dtype == np.uint16 and img.ndim == 2
    # every row has the documented measurements, with units in the names
    for col in ("completion_time_s", "input_mb_per_s", "images_per_s", "read_share_percent",
                "cache_method", "started_at", "device_read_mb_per_s_avg", "cpu_busy_percent"):
        assert col in frame.columns
    assert (frame.input_mb_per_s == frame.input_bytes / frame.completion_time_s / 1e6).all()
    assert len(list((out / "timeseries").glob("*.csv"))) == len(frame)


def test_generated_content_is_not_trivially_compressible(tmp_path):
    import zlib
    p = params.PreprocessParams(image_count=1, image_counts=[], image_width=256, image_height=128)
    files = dataset.generate_dataset(tmp_path / "d", p, 1, log=lambda *_: None)
    raw = files[0].read_bytes()
    assert files[0].stat().st_size >= p.image_bytes
    assert len(zlib.compress(raw, 6)) > 0.6 * len(raw)


@pytest.mark.privileged
@pytest.mark.slow
@pytest.mark.e2e
@needs_blkio()
def test_study_on_throttled_target_is_slower(params_file, tmp_path):
    """Full study, generated data: the emulated HDD target reads at its cap and takes longer."""
    p = _params(params_file, "preprocess.image_count=8", "preprocess.image_width=1600",
                "preprocess.image_height=1200", "preprocess.processes=[2]", "preprocess.image_counts=[]",
                "preprocess.repeats=2")
    frame = STUDY.run(p, tmp_path / "out")
    fast, slow = (frame[frame.target == n] for n in ("fast", "slow"))
    assert slow.emulated.all() and not fast.emulated.any()
    assert slow.completion_time_s.mean() > 1.3 * fast.completion_time_s.mean()
    # 150 MB/s cap: the run's own input rate cannot exceed it by more than the throttle's burst
    # (device counters are device-wide, so other I/O on the disk would blur them)
    assert slow.input_mb_per_s.mean() < 150 * 1.3
    assert not cgroups.leftover_dirs(os.getpid())
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["headlines"]["completion_time_s:fast_vs_slow"] > 0


def test_bad_input_fails_before_any_work(params_file, tmp_path, capsys):
    f = params_file()
    code = cli_main(["preprocess", "--params", str(f), "-S", "preprocess.repeats=-1", "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "preprocess.repeats" in err and "-1" in err
    assert not (tmp_path / "fast").exists() and not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_cli_runs_study_with_overrides(params_file, tmp_path):
    f = params_file()
    out = tmp_path / "cli"
    code = cli_main(["preprocess", "--params", str(f), "-S", "preprocess.processes=[1]", "-S",
                     "preprocess.image_counts=[]", "-S", "targets.1.profile=null", "--out", str(out)])
    assert code == 0
    frame = pd.read_csv(out / "runs.csv")
    assert set(frame.processes) == {1} and set(frame.target) == {"fast", "slow"}
    # every column of the run table is declared (engine, monitor, or the study's metrics.COLUMNS)
    assert columns.undeclared(frame.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS) == []


@pytest.mark.e2e
def test_degrades_without_privileges(params_file, tmp_path, monkeypatch):
    """No drop_caches and no cgroups: the study still runs and records why."""
    from storagebrief.core import cache
    monkeypatch.setattr(cache, "drop_caches_possible", lambda: (False, "needs root"))
    monkeypatch.delenv(cache.FILES_ENV, raising=False)        # the fallback as a user without root meets it

    def refuse(controller):
        raise cgroups.CgroupUnavailable(f"no writable '{controller}' cgroup controller (test)")
    monkeypatch.setattr(cgroups, "controller_dir", refuse)
    p = _params(params_file, "preprocess.processes=[1]", "preprocess.image_counts=[]")
    out = tmp_path / "out"
    frame = STUDY.run(p, out)
    assert set(frame.cache_method) == {"fadvise_dontneed"}
    assert not frame.emulated.any()
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    assert any("profile not applied" in w and "slow" in w for w in notes)
