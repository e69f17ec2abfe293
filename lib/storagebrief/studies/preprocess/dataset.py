"""The TIFF dataset: synthetic class-patterned TIFFs on each target, or the user's own folder."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...core import results
from ...formats.images import class_pattern
from .params import PreprocessParams


def generate_dataset(directory: Path, p: PreprocessParams, count: int, log=print, status=None) -> list[Path]:
    """Write `count` synthetic uncompressed TIFFs in class subfolders; reuse a matching set.
    status(text), when given, hears each image as it is written (the progress bar)."""
    import cv2

    spec = {"count": count, "w": p.image_width, "h": p.image_height, "depth": p.bit_depth,
            "channels": p.channels, "classes": p.num_classes, "seed": p.seed, "version": 1}
    manifest = directory / "manifest.json"
    if manifest.exists():
        try:
            if json.loads(manifest.read_text()) == spec:
                files = sorted(directory.rglob("*.tif"), key=lambda f: f.name)
                if len(files) == count:
                    return files
        except ValueError:
            pass
    rng = np.random.default_rng(p.seed)
    names = []
    with results.staged_dir(directory) as tmp:
        for i in range(count):
            if status is not None:
                status(f"generating TIFFs {i + 1}/{count} in {directory}")
            label = i % p.num_classes
            img = class_pattern(label, p.num_classes, p.image_height, p.image_width, rng,
                                p.channels, p.bit_depth)
            if img.ndim == 3:
                img = img[..., ::-1]  # OpenCV writes BGR
            rel = Path(f"class_{label:04d}") / f"img_{i:07d}.tif"
            (tmp / rel.parent).mkdir(exist_ok=True)
            if not cv2.imwrite(str(tmp / rel), np.ascontiguousarray(img), [cv2.IMWRITE_TIFF_COMPRESSION, 1]):
                raise OSError(f"OpenCV could not write {tmp / rel}")
            names.append(rel)
        os.sync()
        results.write_json(tmp / "manifest.json", spec)
    log(f"generated {count} TIFFs ({p.image_bytes / 1e6:.1f} MB each) in {directory}")
    return [directory / n for n in names]  # in index order, so any prefix holds every class


def list_source(directory: Path) -> list[Path]:
    """Every regular file below the folder (non-TIFFs are skipped later, and listed), in
    class-balanced order: one file of each class subfolder in turn (each class sorted), so any
    prefix -- an image-count subset -- holds every class, as the generated set does."""
    files = sorted(f for f in directory.rglob("*") if f.is_file() and f.name != "manifest.json")
    by_class: dict[str, list[Path]] = {}
    for f in files:
        rel = f.relative_to(directory)
        by_class.setdefault(rel.parts[0] if len(rel.parts) > 1 else "", []).append(f)
    queues = [by_class[k] for k in sorted(by_class)]
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def label_for(path: Path, root: Path) -> int:
    rel = path.relative_to(root)
    if len(rel.parts) < 2:
        return 0
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    return classes.index(rel.parts[0])
