"""The TIFF dataset: synthetic class-patterned TIFFs on each target, or the user's own folder."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ...core import results
from ...formats.images import class_pattern
from .params import PreprocessParams


def generate_dataset(directory: Path, p: PreprocessParams, count: int, log=print) -> list[Path]:
    """Write `count` synthetic uncompressed TIFFs in class subfolders; reuse a matching set."""
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
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(p.seed)
    files = []
    for i in range(count):
        label = i % p.num_classes
        img = class_pattern(label, p.num_classes, p.image_height, p.image_width, rng,
                            p.channels, p.bit_depth)
        if img.ndim == 3:
            img = img[..., ::-1]  # OpenCV writes BGR
        sub = directory / f"class_{label:04d}"
        sub.mkdir(exist_ok=True)
        f = sub / f"img_{i:07d}.tif"
        if not cv2.imwrite(str(f), np.ascontiguousarray(img), [cv2.IMWRITE_TIFF_COMPRESSION, 1]):
            raise OSError(f"OpenCV could not write {f}")
        files.append(f)
    results.write_json(manifest, spec)
    log(f"generated {count} TIFFs ({p.image_bytes / 1e6:.1f} MB each) in {directory}")
    return files  # in index order, so any prefix holds every class


def list_source(directory: Path) -> list[Path]:
    """Every regular file below the folder (non-TIFFs are skipped later, and listed)."""
    return sorted(f for f in directory.rglob("*") if f.is_file() and f.name != "manifest.json")


def label_for(path: Path, root: Path) -> int:
    rel = path.relative_to(root)
    if len(rel.parts) < 2:
        return 0
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    return classes.index(rel.parts[0])
