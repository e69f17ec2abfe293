"""Real-world images in preprocess: oversize, unsupported, RGBA, class balance, skipped bytes.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest

from storagebrief.core import config
from storagebrief.studies.preprocess import STUDY, dataset, pipeline
from conftest import write_params as _write_params


# --------------------------------------------------------------------------- preprocess: real-world images
def _patch_tags(data: bytes, values: dict[int, int]) -> bytes:
    """Overwrite inline SHORT/LONG tag values of a little-endian classic TIFF's first directory."""
    buf = bytearray(data)
    off = struct.unpack("<I", buf[4:8])[0]
    for i in range(struct.unpack("<H", buf[off:off + 2])[0]):
        pos = off + 2 + 12 * i
        tag, typ = struct.unpack("<HH", buf[pos:pos + 4])
        if tag in values:
            fmt = "<H" if typ == 3 else "<I"
            buf[pos + 8:pos + 12] = struct.pack(fmt, values[tag]).ljust(4, b"\0")
    return bytes(buf)


def _tiff(img: np.ndarray) -> bytes:
    ok, enc = cv2.imencode(".tiff", img, [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    return enc.tobytes()


def test_oversize_and_unsupported_tiffs_are_skipped_with_the_real_reason():
    size = (16, 16)
    huge = _patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {256: 60000, 257: 60000})
    with pytest.raises(pipeline.BadImage, match="OpenCV refused it"):
        pipeline.decode_resize(huge, size, "area")
    five = _patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {277: 5})
    with pytest.raises(pipeline.BadImage, match="5 samples per pixel"):
        pipeline.decode_resize(five, size, "area")
    half = _patch_tags(_tiff(np.zeros((16, 16), np.float32)), {258: 16})
    with pytest.raises(pipeline.BadImage, match="16-bit floating-point"):
        pipeline.decode_resize(half, size, "area")


def test_rgba_keeps_stored_colour_and_drops_alpha():
    from PIL import Image
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[...] = (200, 100, 50, 128)
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="TIFF")       # unassociated alpha
    out = pipeline.decode_resize(buf.getvalue(), (8, 8), "nearest")
    assert out.shape == (8, 8, 3) and out[0, 0].tolist() == [200, 100, 50]
    bgra = np.ascontiguousarray(rgba[..., [2, 1, 0, 3]])
    assert pipeline.decode_resize(_tiff(bgra), (8, 8), "nearest")[0, 0].tolist() == [200, 100, 50]


def test_source_subsets_are_class_balanced(tmp_path):
    for cls, n in (("a", 5), ("b", 2), ("c", 3)):
        (tmp_path / cls).mkdir()
        for i in range(n):
            (tmp_path / cls / f"{i}.tif").write_bytes(b"x")
    order = dataset.list_source(tmp_path)
    labels = [dataset.label_for(f, tmp_path) for f in order]
    assert labels[:3] == [0, 1, 2] and sorted(labels[:6]) == [0, 0, 1, 1, 2, 2] and len(order) == 10


@pytest.mark.slow
def test_skipped_bytes_are_not_ingested_bytes_and_kept_output_waits_for_completion(tmp_path, monkeypatch):
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    good = [src / f"g{i}.tif" for i in range(3)]
    for g in good:
        cv2.imwrite(str(g), rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    bad = src / "z-huge.tif"
    bad.write_bytes(_patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {256: 60000, 257: 60000}))
    f = _write_params(tmp_path, source_dir=str(tmp_path / "src"), image_count=4, image_counts=[],
                      processes=[1], repeats=2)
    p = config.load(f, ["targets.1.profile=null"])
    frame = STUDY.run(p, tmp_path / "out", progress="off")
    assert (frame.input_bytes == sum(g.stat().st_size for g in good)).all()
    assert (frame.skipped_bytes == bad.stat().st_size).all() and (frame.images_skipped == 1).all()
    outputs = json.loads((tmp_path / "out" / "outputs.json").read_text())
    kept = [Path(x) for x in outputs["tfrecords"]["fast"]]
    before = {x: x.stat().st_mtime_ns for x in kept}
    # a second study that fails in its last run must leave the kept output and outputs.json as they were
    calls = {"n": 0}
    real = pipeline.run_pipeline

    def fail_last(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected failure")
        return real(*a, **k)
    monkeypatch.setattr("storagebrief.studies.preprocess.run.run_pipeline", fail_last)
    with pytest.raises(RuntimeError, match="injected"):
        STUDY.run(p, tmp_path / "out2", progress="off")
    assert {x: x.stat().st_mtime_ns for x in kept} == before


