"""What one checkpoint rank does, whichever launcher started it (ranks.py through kit.ranks: forked or MPI ranks):
save its files (write, fsync each, then the folder) or load them (preads by reader threads), timing
every write, fsync and read call into log2 histograms (kit.latency: a count per bin, not a list).

On an S3 target (forked ranks only) each file is an object: saved as one multipart upload of
`write_block` parts (core.store's put_parts; "write" counts the part PUTs, "fsync" the upload's
create + complete requests: the save ends when the store acknowledged the completed upload) and loaded
by ranged GETs of `read_block` bytes, `readers` in flight ("read" counts the GETs). Every rank opens its own
store after the fork and, before any clock, its compiled client (core.s3mover: Go with minio-go), which makes
its uploads (from an incompressible body of its own) and its GETs and hands back counts and times, never the
bytes: no rank sends or receives an S3 byte through boto3.
Each result carries the rank's CPU seconds (all its threads, and its compiled client's): the client's cost,
which on a small machine can be the limit."""
from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ...kit.client_bound import cpu_seconds
from ...kit.latency import add_histograms, log2_bin, new_histogram

CALLS = ("write", "fsync", "read")     # the calls whose latencies are counted
ONE_CLOCK = "CLOCK_MONOTONIC of the launching host"   # every rank on the launching host: one clock
DIRECT_ALIGN = 4096     # O_DIRECT: offsets, lengths and the buffer's address in whole pages (a device's
                        # logical block is at most this); file sizes are whole pages (core.checkpoint_workloads)


@dataclass(frozen=True)
class RankResult:
    rank: int
    source_rank: int        # whose files it wrote (itself) or read (rank + shift)
    start: float            # CLOCK_MONOTONIC at its barrier release
    end: float              # CLOCK_MONOTONIC after its last fsync (save) or read (load)
    bytes: int
    files: int
    fsyncs: int
    host: str = ""
    latency: dict = field(default_factory=dict)   # call -> log2 histogram of its latencies (kit.latency)
    cpu_s: float = 0.0      # the rank's user + system CPU seconds in the operation (all its threads)
    write_s: float = 0.0    # save: seconds inside write() (the copy into the page cache; S3: the part PUTs)
    fsync_s: float = 0.0    # save: seconds inside fsync() (S3: the upload's create + complete)



def _timed(hist: list[int], call, *args):
    t = time.perf_counter_ns()
    out = call(*args)
    hist[log2_bin(time.perf_counter_ns() - t)] += 1
    return out


def _timed_sum(hist: list[int], spent: list[int], call, *args):
    """_timed, and the call's nanoseconds added to spent[0] (a save's write()- and fsync-phase seconds)."""
    t = time.perf_counter_ns()
    out = call(*args)
    ns = time.perf_counter_ns() - t
    hist[log2_bin(ns)] += 1
    spent[0] += ns
    return out


def save(folder: Path, files: list[tuple[str, int]], buf: memoryview, block: int,
         direct: bool = False) -> tuple[int, int, dict, tuple[float, float]]:
    """Write and fsync every file, then the folder; returns (bytes, fsync calls, latency histograms,
    (seconds in write(), seconds in fsync())). direct: O_DIRECT writes from `buf` (page-aligned: ranks.py
    makes it so), the page cache bypassed; a tail below the page size, which O_DIRECT cannot write, is
    written through the page cache (O_DIRECT cleared) and reaches the device with the file's fsync."""
    writes, fsyncs = new_histogram(), new_histogram()
    in_write, in_fsync = [0], [0]
    total = calls = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    for name, nbytes in files:
        fd = os.open(folder / name, flags, 0o644)
        try:
            left = nbytes
            while left > 0:
                n, done = min(block, left, len(buf)), 0
                while done < n:             # one write() unless O_DIRECT leaves a tail below a page
                    piece = n - done
                    if direct and piece % DIRECT_ALIGN:
                        if piece > DIRECT_ALIGN:
                            piece -= piece % DIRECT_ALIGN
                        else:
                            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                    done += _timed_sum(writes, in_write, os.write, fd, buf[done:done + piece])
                left -= n
                total += n
            _timed_sum(fsyncs, in_fsync, os.fsync, fd)
            calls += 1
        except OSError as exc:          # write()/fsync() name no file: a full target's message must
            raise OSError(exc.errno, exc.strerror, str(folder / name)) from None
        finally:
            os.close(fd)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _timed_sum(fsyncs, in_fsync, os.fsync, fd)
        calls += 1
    finally:
        os.close(fd)
    return total, calls, {"write": writes, "fsync": fsyncs}, (in_write[0] / 1e9, in_fsync[0] / 1e9)


def direct_refusal(folder: Path) -> str | None:
    """Why O_DIRECT writes fail in `folder`, None when they work: one page written with O_DIRECT into a
    scratch file (mkstemp: O_EXCL, O_NOFOLLOW), which is then deleted."""
    fd, name = tempfile.mkstemp(prefix=".storagebrief-odirect-", dir=folder)
    os.close(fd)
    try:
        page = mmap.mmap(-1, DIRECT_ALIGN)          # page-aligned
        try:
            direct = os.open(name, os.O_WRONLY | os.O_DIRECT)
            try:
                os.write(direct, page)
            finally:
                os.close(direct)
        except OSError as exc:
            return f"{exc.strerror} (errno {exc.errno})"
    finally:
        os.unlink(name)
    return None


_BUFFERS: list[bytearray] = []      # this process's read buffers, kept across restores


def _read_buffers(n: int, size: int) -> list[bytearray]:
    """`n` read buffers of at least `size` bytes, made and touched once per process: a fresh 128 MiB
    buffer per reader per restore cost its page faults inside the clock (restore ÷ fio 0.69 → see
    benchmarks/checkpoint.py)."""
    while len(_BUFFERS) < n or any(len(b) < size for b in _BUFFERS[:n]):
        if len(_BUFFERS) >= n:
            _BUFFERS.pop(0)
        b = bytearray(size)
        b[::4096] = b"\1" * len(range(0, size, 4096))   # fault every page in now, not on the clock
        _BUFFERS.append(b)
    return list(_BUFFERS[:n])


def load(folder: Path, files: list[tuple[str, int]], block: int, readers: int) -> tuple[int, dict]:
    """Read every file whole in `block` preads, `readers` threads at once; returns (bytes, histograms).
    Each thread counts into its own histogram (no lock on the hot path); they are added at the end."""
    chunks = [(name, off, min(block, size - off)) for name, size in files for off in range(0, size, block)]
    local = threading.local()
    hists: list[list[int]] = []
    fds = {name: os.open(folder / name, os.O_RDONLY) for name, _ in files}

    size = min(block, max(size for _, size in files))
    spare = _read_buffers(readers, size)

    def one(chunk) -> int:
        name, off, n = chunk
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = spare.pop()        # list.pop/append are atomic under the GIL
            local.hist = new_histogram()
            hists.append(local.hist)
        got, view = 0, memoryview(buf)
        while got < n:
            r = _timed(local.hist, os.preadv, fds[name], [view[got:n]], off + got)
            if r == 0:
                raise OSError(f"{folder / name}: short file at {off + got} (expected {n} more bytes)")
            got += r
        return got

    try:
        with ThreadPoolExecutor(max_workers=readers) as pool:
            total = sum(pool.map(one, chunks))
    finally:
        for fd in fds.values():
            os.close(fd)
    reads = new_histogram()
    for h in hists:
        add_histograms(reads, h)
    return total, {"read": reads}


def save_s3(store, prefix: str, files: list[tuple[str, int]], block: int,
            kill_pid: int | None = None) -> tuple[int, int, dict, tuple[float, float]]:
    """Every file as one multipart upload of `block` parts by the rank's compiled client (store.upload: each part
    its incompressible body, made before any clock; counts and times come back); returns (bytes, 0 fsyncs,
    histograms, (seconds in part PUTs, seconds in the rest of the uploads)).
    kill_pid: the test hook's gateway, killed once the first part is stored (a store dying mid-save)."""
    puts, ends = new_histogram(), new_histogram()
    total = 0
    in_puts = in_rest = 0.0
    for name, nbytes in files:
        # a one-part object may be below S3's 5 MiB part minimum (the prepare check refuses the rest)
        got = store.upload(f"{prefix}/{name}", nbytes, block, kill_pid)
        kill_pid = None
        for t in got["part_seconds"]:
            puts[log2_bin(int(t * 1e9))] += 1
        rest = got["seconds"] - sum(got["part_seconds"])
        ends[log2_bin(int(rest * 1e9))] += 1
        in_puts, in_rest = in_puts + sum(got["part_seconds"]), in_rest + rest
        total += got["bytes"]
    return total, 0, {"write": puts, "fsync": ends}, (in_puts, in_rest)


def load_s3(store, prefix: str, files: list[tuple[str, int]], block: int, readers: int) -> tuple[int, dict]:
    """Every object read whole in `block` ranged GETs, `readers` in flight, by the rank's compiled client
    (store.read_spans, core.s3mover: the bytes received and each GET's time come back, never the bytes; a short
    body fails the restore); returns (bytes, histograms)."""
    spans = [(f"{prefix}/{name}", off, min(block, size - off), False)
             for name, size in files for off in range(0, size, block)]
    total, seconds = store.read_spans(spans, block, parallel=readers)     # one read per GET: block >= its span
    reads = new_histogram()
    for t in seconds:
        reads[log2_bin(int(t * 1e9))] += 1
    return total, {"read": reads}


def operate(rank: int, msg: tuple, buf: memoryview | None, fault: dict | None, host: str = "",
            store=None, direct: bool = False) -> RankResult:
    """One save or load by this rank, timed from now (its barrier's release). msg = (op, folder, source
    rank, [(file, bytes)], block, readers). `fault` is the run's test hook (run.FAULT): a late rank
    (slow_rank, delay_s) or a failing one (fail_rank). direct: saves with O_DIRECT (checkpoint.save_io). `buf`: what
    a directory's saves write (None on S3: the rank's compiled client holds its uploads' body)."""
    op, folder, source, files, block, readers = msg
    start, cpu0 = time.monotonic(), cpu_seconds() + store.data_path_cpu_seconds()   # its compiled client's too
    if fault and fault.get("fail_rank") == rank:
        raise RuntimeError(f"injected failure of rank {rank} (test hook checkpoint run.FAULT)")
    if fault and fault.get("slow_rank") == rank:
        time.sleep(fault.get("delay_s", 0.5))    # test hook only: a late rank
    phases = (0.0, 0.0)
    objects = store.access != "files"     # the rank's one question: its files are the run's S3 objects
    if objects and op == "save":
        kill = fault.get("kill_gateway_pid") if fault and fault.get("kill_gateway_rank") == rank else None
        nbytes, fsyncs, latency, phases = save_s3(store, folder, files, block, kill)
    elif objects:
        (nbytes, latency), fsyncs = load_s3(store, folder, files, block, readers), 0
    elif op == "save":
        nbytes, fsyncs, latency, phases = save(Path(folder), files, buf, block, direct)
    else:
        (nbytes, latency), fsyncs = load(Path(folder), files, block, readers), 0
    return RankResult(rank, source, start, time.monotonic(), nbytes, len(files), fsyncs, host, latency,
                      cpu_seconds() + store.data_path_cpu_seconds() - cpu0, *phases)
