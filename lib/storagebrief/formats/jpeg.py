"""JPEG sample files (retinanet-style): one real, decodable image per file, sized near a target."""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

QUALITY = 90
_BYTES_PER_PIXEL = 2.0    # first guess for noise at quality 90; corrected from the first encode


def encode_near(nbytes: int, rng: np.random.Generator, quality: int = QUALITY) -> bytes:
    """A JPEG of colour noise whose size is within a few per cent of `nbytes`.

    Noise does not compress away, so the encoded size grows with the pixel count: encode once
    at a guessed size, rescale the side by the size ratio, and keep the closer of the two."""
    side = max(8, round(math.sqrt(nbytes / _BYTES_PER_PIXEL / 3) * math.sqrt(3)))
    best = None
    for _ in range(3):
        img = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("OpenCV could not encode a JPEG")
        data = buf.tobytes()
        if best is None or abs(len(data) - nbytes) < abs(len(best) - nbytes):
            best = data
        if abs(len(data) - nbytes) <= 0.02 * nbytes:
            break
        side = max(8, round(side * math.sqrt(nbytes / len(data))))
    return best


def write_random(path: Path, nbytes: int, rng: np.random.Generator) -> tuple[int, int]:
    """One JPEG near `nbytes`; returns (offset, length) to read: the whole file, as an image
    loader reads it."""
    data = encode_near(int(nbytes), rng)
    with open(path, "wb") as fh:
        fh.write(data)
    return 0, len(data)
