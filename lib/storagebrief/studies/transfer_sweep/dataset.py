"""The preconditioned file each target's fio jobs read: fully written (no holes), fsync'ed, reused."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...core import results, targets as targets_mod
from ...core.folders import folder_below

CHUNK = 4 << 20


def data_file(target, study: str) -> Path:
    return folder_below(target.study_dir(study), "data", create=False) / "transfer.bin"


def needed_bytes(path: Path, size: int) -> int:
    """Bytes still to write (a matching file already there needs none)."""
    manifest = path.parent / "manifest.json"
    if path.exists() and manifest.exists():
        try:
            if json.loads(manifest.read_text()).get("bytes") == size and path.stat().st_size == size:
                return 0
        except ValueError:
            pass
    return size


def allocated_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def prepare_file(target, study: str, size: int, seed: int, log=print) -> Path:
    """Write `size` bytes of incompressible data (every block allocated); reuse a matching file.

    Built in a hidden folder beside its place and renamed in, manifest last, so a killed
    run never leaves a half-written file that a later run would trust."""
    path = data_file(target, study)
    if needed_bytes(path, size) == 0 and allocated_bytes(path) >= size:
        return path
    targets_mod.check_free_space(target, size, "the transfer-sweep file")
    rng = np.random.default_rng(seed)
    with results.staged_dir(path.parent) as tmp:
        f = tmp / path.name
        with open(f, "wb") as fh:
            left = size
            while left:
                n = min(CHUNK, left)
                fh.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
                left -= n
            fh.flush()
            os.fsync(fh.fileno())
        if allocated_bytes(f) < size:
            raise OSError(f"{f}: only {allocated_bytes(f)} of {size} bytes allocated (sparse file)")
        results.write_json(tmp / "manifest.json", {"bytes": size, "seed": seed, "version": 1})
    log(f"wrote the {size / 2**20:.0f} MiB transfer-sweep file on '{target.name}' ({path})")
    return path
