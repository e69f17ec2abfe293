"""Checkpoints written as a training job writes them: synchronously, counted as done only when their
bytes are on the device (fsync). Two ways in: write_file writes the bytes itself (a stand-in
checkpoint of a given size); save runs someone else's writer (TensorFlow's CheckpointManager) and
fsyncs the files it wrote. Both say the bytes and the seconds; Tally adds them up over a run.
incompressible() makes the bytes a stand-in checkpoint holds."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np


def incompressible(nbytes: int) -> memoryview:
    """`nbytes` pseudo-random bytes (SFC64 seeded from os.urandom, so every call differs): no compressor
    or deduplication below the file system can shrink them, and they come ~10× faster than
    os.urandom (3.0 vs 0.29 GB/s on one core here), so generating them never holds a writer back."""
    seed = int.from_bytes(os.urandom(16), "little")
    words = np.random.SFC64(seed).random_raw(max(1, (nbytes + 7) // 8))
    return memoryview(words).cast("B")[:nbytes]


@dataclass(frozen=True)
class Written:
    """One checkpoint: its files, their bytes, and the seconds from the first write to the last fsync."""
    files: tuple[Path, ...]
    bytes: int
    seconds: float


def write_file(path: Path, nbytes: int, chunk: bytes) -> Written:
    """Write `nbytes` to `path` (its folder made if missing; the file truncated) by repeating `chunk`,
    then fsync it."""
    t = time.perf_counter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[:min(len(chunk), left)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return Written((path,), nbytes, time.perf_counter() - t)


def fsync_files(paths: Iterable[Path]) -> None:
    """fsync every file of `paths` that exists."""
    for f in paths:
        if f.exists():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a folder: a new file is durable only when the directory entry that names it is."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(write: Callable[[], Iterable[Path]]) -> Written:
    """Run `write` (it returns the files it wrote) and fsync those files, timed from the call to the
    last fsync; the bytes are those of the files that exist."""
    t = time.perf_counter()
    files = tuple(write())
    fsync_files(files)
    seconds = time.perf_counter() - t
    return Written(files, sum(f.stat().st_size for f in files if f.exists()), seconds)


@dataclass
class Tally:
    """Checkpoints of one job so far."""
    count: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, w: Written) -> Written:
        self.count += 1
        self.bytes += w.bytes
        self.seconds += w.seconds
        return w
