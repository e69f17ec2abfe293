"""The emulated accelerator's data loader: which samples each accelerator reads, and the read threads.

PyTorch DataLoader semantics: T read threads, thread k produces batches k, k+T, ...
into its own bounded queue (`prefetch` ready batches per thread). Every epoch the files
are reshuffled with a seeded RNG and dealt to the accelerators round robin.
"""
from __future__ import annotations

import array
import ctypes
import mmap
import os
import queue
import threading
import time
import traceback

import numpy as np

ALIGN = 4096                 # O_DIRECT alignment (offset, length and buffer)


# --------------------------------------------------------------------------- schedule
def steps_per_epoch(num_files: int, samples_per_file: int, accelerators: int, batch: int) -> int:
    """Synchronous steps per epoch: every accelerator needs a full batch (drop_last)."""
    return (num_files // accelerators) * samples_per_file // batch


def epoch_files(num_files: int, accelerators: int, rank: int, epoch: int, seed: int) -> np.ndarray:
    """This accelerator's files in epoch `epoch`: seeded shuffle, dealt round robin."""
    order = np.random.default_rng([seed, epoch]).permutation(num_files)
    return order[rank::accelerators]


def batch_plan(spans: list, num_files: int, accelerators: int, rank: int, epochs: int, seed: int,
               batch: int, steps: int) -> list[list[tuple[int, int, int]]]:
    """All batches of one accelerator over all epochs: [(file index, offset, length), ...]."""
    out = []
    for epoch in range(epochs):
        samples = [(int(f), s[0], s[1]) for f in epoch_files(num_files, accelerators, rank, epoch, seed)
                   for s in spans[f]]
        out += [samples[i * batch:(i + 1) * batch] for i in range(steps)]
    return out


# --------------------------------------------------------------------------- loader
HUGE_PAGE = 2 << 20


def read_buffer(size: int) -> tuple[mmap.mmap, memoryview]:
    """A zeroed, 2 MiB-aligned read buffer, backed by transparent huge pages where allowed.

    With 4 KiB pages a 1 MiB O_DIRECT read needs 256 scatter-gather segments and is
    split into two device requests on disks that allow fewer (virtio: 254), which
    halves the request size a throttle's IOPS cap sees; fio's buffers avoid that, and
    so do these. Touching the pages now charges them before the process joins a cgroup.
    """
    span = -(-size // HUGE_PAGE) * HUGE_PAGE
    mm = mmap.mmap(-1, span + HUGE_PAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    off = (-addr) % HUGE_PAGE
    try:
        mm.madvise(mmap.MADV_HUGEPAGE, off, span)
    except (AttributeError, OSError, ValueError):
        pass
    view = memoryview(mm)[off:off + size]
    view[:] = bytes(size)
    return mm, view


class Loader:
    """T read threads; thread k reads batches k, k+T, ... into its own bounded queue.

    Reads are real: every byte of every sample is read with preadv into a
    preallocated (page-aligned) buffer in blocks of `block` bytes; each read call
    is timed. Buffers are allocated here, before the process joins a cgroup.
    """

    @classmethod
    def from_config(cls, cfg: dict, batches: list) -> "Loader":
        """An accelerator's loader from the run's configuration (run.run_config)."""
        return cls(cfg["files"], batches, cfg["read_threads"], cfg["prefetch"], cfg["block"],
                   odirect=cfg["odirect"], evict=cfg["evict"], readahead=cfg["readahead"])

    def __init__(self, files: list[str], batches: list, threads: int, prefetch: int, block: int,
                 odirect: bool = False, evict: bool = False, readahead: bool = True):
        self.files, self.batches = files, batches
        self.readahead = readahead
        self.threads = max(1, min(threads, len(batches) or 1))
        self.block, self.odirect, self.evict = block, odirect, evict
        self.queues = [queue.Queue(maxsize=prefetch) for _ in range(self.threads)]
        self._maps = self.read_buffers(block)
        self.buffers = [view for _, view in self._maps]
        self.latencies = [array.array("d") for _ in range(self.threads)]
        self.bytes = [0] * self.threads
        self.spans = [array.array("d") for _ in range(self.threads)]   # per batch read: begin, end, bytes
        self.stop = threading.Event()
        self.workers: list[threading.Thread] = []
        self.next_index = 0

    def read_buffers(self, block: int) -> list[tuple[mmap.mmap, memoryview]]:
        """One read buffer per thread, made before the clock (read_buffer)."""
        return [read_buffer(block) for _ in range(self.threads)]

    def start(self) -> None:
        for k in range(self.threads):
            t = threading.Thread(target=self._run, args=(k,), daemon=True, name=f"loader-{k}")
            t.start()
            self.workers.append(t)

    def _open(self, f: int) -> int:
        flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if self.odirect else 0)
        fd = os.open(self.files[f], flags)
        if not self.readahead and not self.odirect:
            # Many concurrent streams' readahead would overflow a small page-cache cap and be
            # evicted unread (device bytes > loader bytes); without it each call reads its block.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd

    def _close(self, fd: int) -> None:
        if self.evict:   # no memory cgroup: keep later epochs on the device
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    def read_sample(self, k: int, fd: int, offset: int, length: int) -> int:
        view, lat, block = self.buffers[k], self.latencies[k], self.block
        if self.odirect:   # aligned range covering the sample
            end = -(-(offset + length) // ALIGN) * ALIGN
            offset -= offset % ALIGN
        else:
            end = offset + length
        got_total, pos, clock = 0, offset, time.perf_counter
        while pos < end:
            n = min(block, end - pos)
            if self.odirect:
                n = -(-n // ALIGN) * ALIGN
            t0 = clock()
            got = os.preadv(fd, [view[:n]], pos)
            lat.append(clock() - t0)
            if got <= 0:
                break
            got_total += got
            pos += got
        return got_total

    def read_batch(self, k: int, batch) -> int:
        total, fd, open_f = 0, None, None
        try:
            for f, offset, length in batch:
                if f != open_f:   # consecutive samples of one file share the descriptor
                    if fd is not None:
                        self._close(fd)
                    fd, open_f = self._open(f), f
                total += self.read_sample(k, fd, offset, length)
        finally:
            if fd is not None:
                self._close(fd)
        return total

    def _run(self, k: int) -> None:
        q = self.queues[k]
        try:
            for i in range(k, len(self.batches), self.threads):
                t0 = time.perf_counter()
                n = self.read_batch(k, self.batches[i])
                self.spans[k].extend((t0, time.perf_counter(), n))
                self.bytes[k] += n
                while not self.stop.is_set():
                    try:
                        q.put((i, n, None), timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
        except BaseException:   # the consumer re-raises it with the step that needed it
            q.put((-1, 0, traceback.format_exc()))

    def next(self) -> int:
        """Bytes of the next batch, in order; blocks until it is read."""
        i = self.next_index
        got, n, err = self.queues[i % self.threads].get()
        if err is not None:
            raise RuntimeError(f"loader thread failed:\n{err}")
        if got != i:
            raise RuntimeError(f"loader delivered batch {got}, expected {i}")
        self.next_index += 1
        return n

    def helper_cpu_s(self) -> float:
        """CPU seconds of another process reading for this loader (an S3 store's compiled client); none here."""
        return 0.0

    def close(self) -> None:
        self.stop.set()
        for q in self.queues:   # unblock producers waiting on a full queue
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        for t in self.workers:
            t.join(timeout=5)

    def read_spans(self) -> np.ndarray:
        """Every batch read, shape (batches, 3): its first and last instant (perf_counter s) and its bytes: what
        the loaders read inside the AU window (window.py)."""
        flat = np.concatenate([np.frombuffer(a, dtype=np.float64) for a in self.spans]) \
            if any(len(a) for a in self.spans) else np.zeros(0)
        return flat.reshape(-1, 3)

    def read_latencies(self) -> np.ndarray:
        return np.concatenate([np.frombuffer(a, dtype=np.float64) for a in self.latencies]) \
            if any(len(a) for a in self.latencies) else np.zeros(0)
