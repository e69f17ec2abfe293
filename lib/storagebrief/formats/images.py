"""Synthetic images with class-dependent content, shared by the studies that generate image data."""
from __future__ import annotations

import math

import numpy as np


def class_pattern(label: int, num_classes: int, h: int, w: int, rng: np.random.Generator,
                  channels: int, bit_depth: int) -> np.ndarray:
    """Class-dependent content (tint + stripe frequency: learnable) plus noise (not compressible)."""
    hue = 2 * math.pi * label / max(1, num_classes)
    tint = np.array([math.cos(hue), math.cos(hue + 2.1), math.cos(hue + 4.2)]) * 0.3 + 0.5
    freq = 2 + 3 * (label % 5)
    x = np.linspace(0, 2 * math.pi * freq, w, dtype=np.float32)
    stripes = (0.5 + 0.25 * np.sin(x))[None, :]
    base = stripes[..., None] * tint[None, None, :].astype(np.float32)   # (1, w, 3)
    noise = rng.standard_normal((h, w, 3), dtype=np.float32) * 0.12
    img = np.clip(base + noise, 0, 1)
    if channels == 1:
        img = img.mean(axis=2)
    scale = 255 if bit_depth == 8 else 65535
    return (img * scale).astype(np.uint8 if bit_depth == 8 else np.uint16)
