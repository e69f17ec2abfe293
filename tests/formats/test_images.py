"""formats.images: class-dependent synthetic images (shape, depth, tint per class, reproducible)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from storagebrief.formats import images


def test_shape_and_depth():
    rgb = images.class_pattern(0, 10, 16, 32, np.random.default_rng(0), 3, 8)
    assert rgb.shape == (16, 32, 3) and rgb.dtype == np.uint8
    grey = images.class_pattern(0, 10, 16, 32, np.random.default_rng(0), 1, 16)
    assert grey.shape == (16, 32) and grey.dtype == np.uint16


def test_same_seed_same_image_and_classes_differ():
    a = images.class_pattern(3, 10, 8, 8, np.random.default_rng(5), 3, 8)
    assert np.array_equal(a, images.class_pattern(3, 10, 8, 8, np.random.default_rng(5), 3, 8))
    assert not np.array_equal(a, images.class_pattern(4, 10, 8, 8, np.random.default_rng(5), 3, 8))


def test_the_tint_of_class_0():
    # label 0: hue 0, tint = 0.5 + 0.3 x (cos 0, cos 2.1, cos 4.2) = (0.8, 0.3486, 0.3530); stripes average 0.5
    # over whole periods, noise averages 0 -> channel means about 0.5 x tint x 255 = (102.0, 44.4, 45.0)
    img = images.class_pattern(0, 3, 64, 640, np.random.default_rng(0), 3, 8).astype(float)
    want = [0.5 * (0.5 + 0.3 * math.cos(h)) * 255 for h in (0.0, 2.1, 4.2)]
    assert want == pytest.approx([102.0, 44.4, 45.0], abs=0.1)
    assert img.mean(axis=(0, 1)) == pytest.approx(want, abs=2.0)
