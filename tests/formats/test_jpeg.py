"""formats.jpeg: a real, decodable JPEG near the asked size; the whole file is what a loader reads."""
from __future__ import annotations

import cv2
import numpy as np

from storagebrief.formats import jpeg


def test_encode_near_is_a_decodable_jpeg_near_the_size():
    data = jpeg.encode_near(60_000, np.random.default_rng(0))
    assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"       # SOI ... EOI
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None and img.ndim == 3 and img.shape[0] == img.shape[1] and img.shape[2] == 3
    # the side is rescaled by sqrt(size ratio) up to 3 times, so it lands within a few per cent
    assert abs(len(data) - 60_000) <= 0.10 * 60_000


def test_a_tiny_size_still_gives_an_image_of_at_least_8_pixels():
    data = jpeg.encode_near(10, np.random.default_rng(0))
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape[0] >= 8


def test_write_random_returns_the_whole_file(tmp_path):
    f = tmp_path / "a.jpg"
    offset, length = jpeg.write_random(f, 20_000, np.random.default_rng(1))
    assert offset == 0 and length == f.stat().st_size
    assert f.read_bytes() == jpeg.encode_near(20_000, np.random.default_rng(1))    # same seed, same bytes
