"""The disk index's product quantizer, trained from the data set's seed: a build repeatable bit for bit.

DiskANN's disk build (diskannpy-rust 0.49.1) draws its PQ training from a generator it seeds itself, and takes no
seed: two single-threaded builds of the same vectors wrote the same graph (ann_disk.index) but different PQ pivots
and codes, and recall at a given L moved with them (docs/studies/vector_search.md). The search walks the graph on
the PQ distances, so the study replaces the two PQ files after the build with the engine's own ProductQuantizer
trained with a seed: its pivots and every vector's codes, in the disk index's layout (a header of offsets, the
256 x dimension pivots, a centroid, the chunk offsets; codes: a count, the chunks, one byte per chunk). The layout is
read from the build's own files and checked first: a chunking of another shape is one line, not a wrong index.
Runs in the build worker (dataset._build_work): the engine's threads never live in the study's process.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

PIVOTS = "ann_pq_pivots.bin"
CODES = "ann_pq_compressed.bin"
CENTERS = 256                   # one byte per chunk
LLOYDS = 12                     # Lloyd iterations, as DiskANN's own PQ training runs (NUM_KMEANS_REPS_PQ)
TRAIN_MAX = 256_000             # training vectors at most, as DiskANN samples them (MAX_PQ_TRAINING_SET_SIZE)
BLOCK = 65_536                  # vectors encoded at a time


class LayoutChanged(RuntimeError):
    """The engine's PQ files are not in the layout this module writes."""


def _bin_at(raw: bytes, offset: int, dtype) -> np.ndarray:
    rows, cols = np.frombuffer(raw, np.int32, 2, offset)
    return np.frombuffer(raw, dtype, int(rows) * int(cols), offset + 8).reshape(int(rows), int(cols))


def _bin(a: np.ndarray) -> bytes:
    return np.array(a.shape, np.int32).tobytes() + np.ascontiguousarray(a).tobytes()


def read_pivots(path: Path) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, pivots, centroid, chunk offsets) of a disk index's pivots file."""
    raw = path.read_bytes()
    offsets = _bin_at(raw, 0, np.uint64)[:, 0].astype(int).tolist()
    if len(offsets) != 4 or offsets[-1] != len(raw):
        raise LayoutChanged(f"{path.name}: {len(offsets)} sections ending at {offsets[-1:]}, file {len(raw)} bytes")
    pivots = _bin_at(raw, offsets[0], np.float32)
    centroid = _bin_at(raw, offsets[1], np.float32)[:, 0]
    chunks = _bin_at(raw, offsets[2], np.uint32)[:, 0].astype(int)
    return offsets, pivots, centroid, chunks


def encode(x: np.ndarray, pivots: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Each vector's nearest pivot per chunk (L2): the codes the disk index keeps."""
    out = np.empty((len(x), len(chunks) - 1), np.uint8)
    for j, (a, e) in enumerate(zip(chunks[:-1], chunks[1:])):
        d = ((x[:, None, a:e] - pivots[None, :, a:e]) ** 2).sum(-1)
        out[:, j] = d.argmin(1)
    return out


def reseed(index_dir: str | Path, vectors: np.ndarray, seed: int, diskannpy) -> dict:
    """Replace the index's PQ pivots and codes with the engine's ProductQuantizer trained from `seed` (`diskannpy`:
    the engine module as dataset.engine() loads it)."""
    index_dir = Path(index_dir)
    offsets, built, _, chunks = read_pivots(index_dir / PIVOTS)
    n, d = vectors.shape
    m = len(chunks) - 1
    if built.shape != (CENTERS, d) or chunks[0] != 0 or chunks[-1] != d:
        raise LayoutChanged(f"{PIVOTS}: pivots {built.shape}, chunks {chunks[0]}..{chunks[-1]} for dimension {d}")
    rng = np.random.default_rng([seed, 2])
    train = vectors if n <= TRAIN_MAX else vectors[np.sort(rng.choice(n, TRAIN_MAX, replace=False))]
    train = np.ascontiguousarray(train, dtype=np.float32)
    quantizer = diskannpy._diskannpy.ProductQuantizer(train, m, CENTERS, lloyds_iters=LLOYDS, seed=int(seed))
    pivots = np.array([quantizer.decompress([c] * m) for c in range(CENTERS)], dtype=np.float32)
    sample = np.ascontiguousarray(vectors[:min(n, 512)], dtype=np.float32)
    if not np.array_equal(encode(sample, pivots, chunks), quantizer.compress_batch(sample)):
        raise LayoutChanged("the engine's ProductQuantizer chunks vectors otherwise than its disk index")
    centroid = np.zeros((d, 1), np.float32)     # the pivots are in the vectors' own space: nothing to subtract
    sections = [_bin(pivots), _bin(centroid), _bin(chunks.astype(np.uint32).reshape(-1, 1))]
    starts = [offsets[0]]
    for s in sections:
        starts.append(starts[-1] + len(s))
    head = _bin(np.array(starts, np.uint64).reshape(-1, 1))
    _write(index_dir / PIVOTS, head + bytes(offsets[0] - len(head)) + b"".join(sections))
    with open(_fresh(index_dir / CODES), "wb") as f:
        f.write(np.array([n, m], np.int32).tobytes())
        for i in range(0, n, BLOCK):
            f.write(quantizer.compress_batch(np.ascontiguousarray(vectors[i:i + BLOCK], dtype=np.float32)).tobytes())
    return {"pq": "seeded", "pq_seed": int(seed), "pq_train_vectors": len(train), "pq_lloyd_iterations": LLOYDS}


def _fresh(path: Path) -> Path:
    """The engine's file goes; ours is created in its place (O_EXCL: in the build's own staging folder)."""
    path.unlink()
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    return path


def _write(path: Path, data: bytes) -> None:
    with open(_fresh(path), "wb") as f:
        f.write(data)
