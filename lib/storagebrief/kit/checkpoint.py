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


GENERATOR_CHUNK = 1 << 20      # keystream made a MiB at a time from one zero block: it stays in the CPU's cache


def incompressible_into(out, seed: int | None = None) -> memoryview:
    """Fill the writable buffer `out` in place with pseudo-random bytes: the AES-128-CTR keystream (OpenSSL
    through `cryptography`, AES-NI where the CPU has it) of a key drawn from `seed` (None: from os.urandom, so
    every call differs). No compressor or deduplication below the file system can shrink them, and a buffer
    already touched is refilled at 5.1-5.3 GB/s on one core here under load (SFC64, before: 1.8-2.2 GB/s beside it;
    issue 59), so refilling never holds a writer back. The same seed gives the same bytes."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    view = memoryview(out).cast("B")
    key = (os.urandom(32) if seed is None
           else np.random.SFC64(int(seed)).random_raw(4).astype("<u8").tobytes())
    enc = Cipher(algorithms.AES(key[:16]), modes.CTR(key[16:])).encryptor()
    n = len(view)
    zero = bytes(min(GENERATOR_CHUNK, n))
    whole = n - n % len(zero) if zero else 0
    for off in range(0, whole, len(zero) or 1):
        enc.update_into(zero, view[off:off + len(zero)])
    if whole < n:
        view[whole:] = enc.update(bytes(n - whole))
    return view


def incompressible(nbytes: int, seed: int | None = None) -> memoryview:
    """`nbytes` pseudo-random bytes in new memory (incompressible_into: every call differs unless `seed` is
    given; the same seed, the same bytes)."""
    return incompressible_into(bytearray(nbytes), seed)


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
