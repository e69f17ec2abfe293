"""npz sample files (unet3d-style): one uncompressed array of real random bytes per file."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def write_random(path: Path, nbytes: int, rng: np.random.Generator) -> tuple[int, int]:
    """One uncompressed npz holding `nbytes` random uint8; returns (offset, length) to read.

    A loader reads the whole file, as np.load would."""
    arr = np.frombuffer(rng.bytes(int(nbytes)), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, x=arr)
    return 0, Path(path).stat().st_size
