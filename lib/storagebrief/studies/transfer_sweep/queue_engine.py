"""The GPU path's queue-keeping engine, apart from any device: QD requests kept in flight (a new one
issued as each completes, never a batch), each request's own latency in a fio-shaped histogram,
in-flight accounting and the process's CPU time over the measured window.

A request is `read_one(slot, offset)`: a blocking call that moves one transfer into slot `slot`'s
buffer (kvikio's pread into device memory, or a pread into a pinned host buffer plus the copy to the
device, or in CI a pread plus a copy into host memory standing in for the device). One thread per
slot issues its slot's next request the moment the previous one completes, the way fio's numjobs
with psync keep a depth; the blocking calls release the GIL (os.preadv, kvikio's future, cupy's
stream wait), so QD requests are really in flight at once.

Latencies are binned the way fio bins completion latencies (log-linear, 64 buckets per power of two,
bucket value = fio's midpoint in ns), so `fio.percentiles_from_bins` gives p50/p99 by fio's own rule.
"""
from __future__ import annotations

import mmap
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...kit.client_bound import cpu_seconds   # this process, every thread (kvikio's pool included)

PLAT_BITS = 6                      # fio's FIO_IO_U_PLAT_BITS: 64 buckets per power of two
PLAT_VAL = 1 << PLAT_BITS
PLAT_GROUPS = 29                   # fio's FIO_IO_U_PLAT_GROUP_NR
PLAT_NR = PLAT_GROUPS * PLAT_VAL


def plat_index(ns: int) -> int:
    """fio's bucket index of a latency in ns (plat_val_to_idx)."""
    if ns <= 0:
        return 0
    msb = ns.bit_length() - 1
    if msb <= PLAT_BITS:
        return ns
    err = msb - PLAT_BITS
    return min(((err + 1) << PLAT_BITS) + ((PLAT_VAL - 1) & (ns >> err)), PLAT_NR - 1)


def plat_value(idx: int) -> int:
    """The ns value fio writes for bucket `idx` in JSON+ (plat_idx_to_val: the bucket's midpoint)."""
    if idx < (PLAT_VAL << 1):
        return idx
    err = (idx >> PLAT_BITS) - 1
    return int((1 << (err + PLAT_BITS)) + ((idx % PLAT_VAL) + 0.5) * (1 << err))


@dataclass
class Counters:
    """What the engine itself saw; everything a test or a row asserts about depth comes from here."""
    queue_depth: int
    issued: int = 0
    completed: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    in_flight_integral_s: float = 0.0       # ∫ in_flight dt over the measured window
    _last_change: float = 0.0
    _measuring: bool = False
    per_slot_completed: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.per_slot_completed = [0] * self.queue_depth
        self._lock = threading.Lock()
        self.hist = np.zeros(PLAT_NR, dtype=np.int64)      # measured requests' latencies, fio's buckets
        self.sums = {"n": 0, "ns": 0, "min": None, "max": 0, "bytes": 0, "ramp_bytes": 0}

    def _advance(self, now: float) -> None:
        if self._measuring:
            self.in_flight_integral_s += self.in_flight * (now - self._last_change)
        self._last_change = now

    def issue(self) -> None:
        with self._lock:
            self._advance(time.perf_counter())
            self.issued += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def complete(self, slot: int, ns: int, nbytes: int) -> None:
        """One request done after `ns`: counted, and binned when the window is measuring (one lock)."""
        with self._lock:
            self._advance(time.perf_counter())
            self.completed += 1
            self.in_flight -= 1
            self.per_slot_completed[slot] += 1
            s = self.sums
            if not self._measuring:
                s["ramp_bytes"] += nbytes
                return
            self.hist[plat_index(ns)] += 1
            s["n"] += 1
            s["ns"] += ns
            s["bytes"] += nbytes
            s["min"] = ns if s["min"] is None or ns < s["min"] else s["min"]
            s["max"] = ns if ns > s["max"] else s["max"]

    def measuring(self, on: bool) -> None:
        with self._lock:
            self._advance(time.perf_counter())
            self._measuring = on


def run_queue(read_one: Callable[[int, int], None], qd: int, block_bytes: int, file_bytes: int,
              ramp_s: float, runtime_s: float, seed: int = 0, sequential: bool = False,
              on_complete: Callable[[int, int], None] | None = None) -> dict:
    """Keep `qd` requests of `block_bytes` in flight over a file of `file_bytes` for ramp + runtime.

    Returns the measured window's bytes, throughput, IOPS, latency histogram (fio buckets, ns),
    mean/min/max latency, in-flight counters and the process CPU time over the window."""
    blocks = file_bytes // block_bytes
    if blocks < 1:
        raise ValueError(f"file of {file_bytes} bytes holds no block of {block_bytes} bytes")
    c = Counters(qd)
    errors: list[BaseException] = []
    start = threading.Barrier(qd + 1)
    state = {"stop": False}

    def offsets(slot: int):
        """This slot's offsets: random blocks drawn in chunks (a draw per request costs more than a read of
        cached data), or sequential blocks interleaved over the slots."""
        if sequential:
            k = slot
            while True:
                yield (k % blocks) * block_bytes
                k += qd
        rng = np.random.default_rng([seed, slot])
        while True:
            yield from (rng.integers(blocks, size=4096) * block_bytes).tolist()

    def slot_loop(slot: int) -> None:
        offs = offsets(slot)
        c.issue()                          # the first request of every slot counts before any runs
        start.wait()
        try:
            for off in offs:
                t0 = time.perf_counter_ns()
                read_one(slot, off)
                ns = time.perf_counter_ns() - t0
                c.complete(slot, ns, block_bytes)
                if on_complete is not None:
                    on_complete(slot, ns)
                if state["stop"]:
                    return
                c.issue()                  # the completed slot is refilled at once: the queue stays full
        except BaseException as exc:       # surfaced by the caller; the other slots stop at their next turn
            errors.append(exc)
            state["stop"] = True

    threads = [threading.Thread(target=slot_loop, args=(i,), daemon=True) for i in range(qd)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(ramp_s) if ramp_s > 0 else None      # the ramp: requests run, nothing is counted
    c.measuring(True)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    deadline = t0 + runtime_s
    while not state["stop"] and time.perf_counter() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.perf_counter())))
    c.measuring(False)
    cpu1, elapsed = cpu_seconds(), time.perf_counter() - t0
    state["stop"] = True
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return _result(c, elapsed, cpu1 - cpu0, qd)


def _result(c: Counters, elapsed: float, cpu_s: float, qd: int) -> dict:
    hist, sums = c.hist, c.sums
    n = sums["n"]
    bins = {plat_value(int(i)): int(hist[i]) for i in np.nonzero(hist)[0]}
    return {
        "bins_ns": bins, "total_ios": n, "io_bytes": sums["bytes"], "ramp_io_bytes": sums["ramp_bytes"],
        "elapsed_s": elapsed,
        "throughput_mb_per_s": sums["bytes"] / elapsed / 1e6 if elapsed > 0 else None,
        "iops": n / elapsed if elapsed > 0 else None,
        "lat_us_mean": sums["ns"] / n / 1e3 if n else None,
        "lat_us_min": sums["min"] / 1e3 if n else None, "lat_us_max": sums["max"] / 1e3 if n else None,
        "requests_issued": c.issued, "requests_completed": c.completed,
        "max_in_flight": c.max_in_flight, "in_flight_mean": c.in_flight_integral_s / elapsed if elapsed > 0 else None,
        "slots_used": sum(1 for k in c.per_slot_completed if k > 0), "queue_depth_requested": qd,
        "process_cpu_s": cpu_s,
        "cpu_cores_per_gb_per_s": cpu_s / (sums["bytes"] / 1e9) if sums["bytes"] else None,
    }


class HostStaging:
    """Reads through page-aligned host buffers, one per slot: O_DIRECT pread into the slot's buffer,
    then `copy(slot, nbytes)` moves it on (to the GPU on the legacy path; to host memory standing in
    for the device in CI). `pin(buffer)` pins a buffer where a device exists (cudaHostRegister) and
    returns True when it did."""

    def __init__(self, path: str, block_bytes: int, qd: int, copy: Callable[[int, int], None] | None,
                 pin: Callable[[mmap.mmap], bool] | None = None, direct: bool = True):
        self.block_bytes = block_bytes
        self.fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0))
        # anonymous mmap: page-aligned, as O_DIRECT and cudaHostRegister both want
        self.buffers = [mmap.mmap(-1, block_bytes) for _ in range(qd)]
        self.pinned = all(pin(b) for b in self.buffers) if pin is not None else False
        self.copy = copy

    def host_array(self, slot: int) -> np.ndarray:
        return np.frombuffer(self.buffers[slot], dtype=np.uint8)

    def read_one(self, slot: int, offset: int) -> None:
        got = os.preadv(self.fd, [self.buffers[slot]], offset)
        if got != self.block_bytes:
            raise OSError(f"short read: {got} of {self.block_bytes} bytes at offset {offset}")
        self.copy(slot, got)

    def close(self) -> None:
        os.close(self.fd)


class HostStandIn:
    """CI's stand-in for device memory: one host array per slot that the staged bytes are copied into."""

    def __init__(self, staging_arrays: Callable[[int], np.ndarray], block_bytes: int, qd: int):
        self.device = [np.empty(block_bytes, dtype=np.uint8) for _ in range(qd)]
        self._src = staging_arrays

    def copy(self, slot: int, nbytes: int) -> None:
        np.copyto(self.device[slot][:nbytes], self._src(slot)[:nbytes])
