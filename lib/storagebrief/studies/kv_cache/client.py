"""One client: simulated users whose conversations write their KV caches to a CPU tier or to storage and read
them back at the next turn. The same function runs in every launched client (clients.py, through kit.launch:
forked or MPI ranks).

Per request (a user's turn): (1) a later turn reloads the previous turn's cache: from the CPU tier when it is
there (a memory copy), else from storage, cold (posix_fadvise DONTNEED before the read: its pages leave
the page cache first); (2) the new cache (the whole context so far) is written: into the CPU tier when it
has a budget and the entry fits (evicting least-recently-used entries to storage: MLPerf's waterfall, no
promotion back), else to storage; the previous turn's entry is deleted; (3) below `prefill_only_tokens`
(MLPerf: 10K) the new cache is read back `decode_reads` times (MLPerf's PREFILL_DECODE: one write, N reads). A storage write is one file per
request (MLPerf's layout, so its figures and ours count the same I/O): write() calls of `write_block`
bytes from a buffer of incompressible bytes filled before the clock, then fsync, then DONTNEED (the next
read comes from the device). The mlperf family moves them through MLPerf's tool's buffers instead
(`Client.tool_buffers`: fresh memory per block, a stamped copy to write, a second copy of what is read). Every call is recorded: op, tier, start, end (CLOCK_MONOTONIC, one clock for
every process on the host), bytes, tokens and its device span (read: the read() calls; write: the fsync)
beside its host span (read: open + advice + reads + the copy into the host buffer; write: open to close).

Threads: `concurrency` per client, each taking the next idle user; new requests start until the nominal
duration ends; those in flight finish (their overrun is what MLPerf's bandwidth ignores).
"""
from __future__ import annotations

import os
import random
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

import numpy as np


class Call(NamedTuple):
    """One recorded call. A tuple underneath: it travels as a plain tuple (or a JSON list) from a forked client or
    an MPI rank, and its readers name it again with Call(*record) (metrics.calls)."""
    op: str              # read | write
    tier: str            # cpu | storage
    start: float         # CLOCK_MONOTONIC seconds (one clock for every process on the host)
    end: float
    nbytes: int
    tokens: int
    device_s: float      # the device span (read: the read() calls; write: the fsync)
    rank: int            # the client that made it
    user: int            # the user whose request it served; -1: an eviction from the CPU tier to storage


# The mlperf family's block through the tool's buffers: the tool's arrays are whole caches, numpy arrays in memory
# that glibc maps afresh for each (above its largest mmap threshold, 32 MiB) and numpy asks huge pages for; numpy
# arrays of 64 MiB are too, so a block costs per byte what the tool's array does (measured: 0.4-0.7 CPU s per GiB
# read either way; fresh anonymous maps of 16 MiB through Python's mmap cost 1.8-2.3) while a thread holds 3 blocks
TOOL_BLOCK = 64 << 20


class _Tier:
    """The CPU tier: entries (numpy arrays holding the bytes) under a byte budget, least recently used first.
    With `tool` (the mlperf family) it keeps MLPerf's tool's rules for a tier with one below it
    (`_ensure_space_in_tier`, cache.py:431-600): an entry above 95 % of the budget goes straight to storage; one
    fits while the tier stays within 80 % of its budget, or while the tier holds under 5 % of it; where the tier
    holds under 20 % and the entry is over 40 % of the budget, it goes to storage rather than demoting anything;
    else the least recently used entries are demoted until it fits."""

    def __init__(self, budget: int, tool: bool = False):
        self.budget, self.used, self.entries, self.tool = budget, 0, OrderedDict(), tool

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= (0.95 * self.budget if self.tool else self.budget)

    def room(self, nbytes: int) -> bool:
        """Whether nbytes go in now, nothing demoted (under the client's lock)."""
        if not self.tool:
            return self.used + nbytes <= self.budget
        return self.used + nbytes <= 0.8 * self.budget or self.used < 0.05 * self.budget

    def declines(self, nbytes: int) -> bool:
        """The tool's bail-out: too little in the tier to be worth demoting for so large an entry."""
        return self.tool and self.used < 0.2 * self.budget and nbytes > 0.4 * self.budget


class Client:
    def __init__(self, spec: dict, rank: int, buf):
        self.spec, self.rank, self.buf = spec, rank, buf
        self.folder = Path(spec["folder"]) / f"c{rank}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(spec["seed"] * 1009 + rank)
        self.lock = threading.Lock()
        self.tier = _Tier(spec["cpu_tier_bytes"], tool=spec.get("family") == "mlperf")
        self.records: list[Call] = []
        self.users = [self._new_conversation(u) for u in range(spec["users"])]
        self.idle = list(range(spec["users"]))
        self.written = 0
        self.seq = 0
        # MLPerf's tool's buffers (the mlperf family): every storage read lands in fresh memory and is copied once
        # more into fresh memory (np.load, then np.array: backends.py:307-310), every write's bytes are first copied
        # out of the generator's buffer into fresh memory and XOR-stamped (KVCacheGenerator.generate, cache.py:
        # 110-160): the client work per byte the tool does; else one host buffer, reused
        self.tool_buffers = spec.get("family") == "mlperf"
        self.host = np.empty(0 if self.tool_buffers else spec["largest_entry_bytes"], dtype=np.uint8)
        self._stamp = np.frombuffer(os.urandom(4096), dtype=np.uint8)   # the XOR stamp's 4 KiB pattern
        self.error: BaseException | None = None

    def _pick(self, table: list) -> int:
        return self.rng.choices([t[0] for t in table], weights=[t[1] for t in table])[0]

    def _new_conversation(self, user: int) -> dict:
        return {"user": user, "turn": 0, "turns": self._pick(self.spec["turns"]),
                "tokens": self._pick(self.spec["contexts"]), "entry": None}

    # -- storage ---------------------------------------------------------------------------------------
    def _write_file(self, path: Path, nbytes: int) -> tuple[float, float, float]:
        block, t0 = TOOL_BLOCK if self.tool_buffers else self.spec["write_block"], time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < nbytes:
                n = min(block, nbytes - done)
                done += os.write(fd, self._generated(n) if self.tool_buffers else self.buf[:n])
                self.written += n
            f0 = time.monotonic()
            os.fsync(fd)
            f1 = time.monotonic()
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as exc:           # write()/fsync() name no file: a full target's message names it
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        finally:
            os.close(fd)
        return t0, time.monotonic(), f1 - f0

    def _read_file(self, path: Path, nbytes: int) -> tuple[float, float, float]:
        t0 = time.monotonic()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)     # cold: from the device
            size = min(nbytes, TOOL_BLOCK if self.tool_buffers else self.spec["write_block"])
            chunk = None if self.tool_buffers else bytearray(size)
            got, device = 0, 0.0
            while got < nbytes:
                want = min(size, nbytes - got)
                land = np.empty(want, np.uint8) if self.tool_buffers else chunk   # np.load's array: fresh pages
                r0 = time.monotonic()
                n = os.readv(fd, [memoryview(land)[:want]])
                device += time.monotonic() - r0
                if n <= 0:
                    raise OSError(f"{path}: short read ({got} of {nbytes} bytes)")
                if self.tool_buffers:                                   # np.array(data): a copy into fresh pages
                    np.array(land[:n])
                else:
                    self.host[got:got + n] = np.frombuffer(chunk, dtype=np.uint8, count=n)   # the host copy
                got += n
        finally:
            os.close(fd)
        return t0, time.monotonic(), device

    def _generated(self, n: int) -> np.ndarray:
        """n bytes as the tool's generator makes them: copied out of its buffer into fresh memory, XOR-stamped by a
        4 KiB pattern (still incompressible). Freed when the caller's write is done (its last reference goes)."""
        arr = self._cache_bytes(n)
        whole = n - n % 4096
        arr[:whole].reshape(-1, 4096)[:] ^= self._stamp
        return arr

    def _record(self, op, tier, t0, t1, nbytes, tokens, device_s, user) -> None:
        with self.lock:
            self.records.append(Call(op, tier, t0, t1, nbytes, tokens, device_s, self.rank, user))

    def _to_storage(self, key: str, nbytes: int, tokens: int, user: int) -> dict:
        path = self.folder / f"{key}.kv"
        t0, t1, fs = self._write_file(path, nbytes)
        self._record("write", "storage", t0, t1, nbytes, tokens, fs, user)
        return {"tier": "storage", "path": str(path), "bytes": nbytes, "tokens": tokens, "key": key}

    def _drop(self, entry: dict | None) -> None:
        if entry is None:
            return
        if entry["tier"] == "cpu":
            moved = self._where(entry)
            if moved is not entry:                                 # evicted to storage: that file goes
                with self.lock:
                    self.evicted.pop(entry["key"], None)
                entry = moved
        if entry["tier"] == "storage":
            Path(entry["path"]).unlink(missing_ok=True)
        else:
            with self.lock:
                arr = self.tier.entries.pop(entry["key"], None)
                if arr is not None:
                    self.tier.used -= arr.nbytes

    # -- one request -----------------------------------------------------------------------------------
    def _reload(self, entry: dict, user: int) -> None:
        """Read a cache back: from the CPU tier when it is there, else from storage, cold."""
        if entry["tier"] == "cpu":
            t0 = time.monotonic()
            with self.lock:
                arr = self.tier.entries.get(entry["key"])
                if arr is not None:
                    self.tier.entries.move_to_end(entry["key"])
            if arr is not None:
                if self.tool_buffers:
                    np.copy(arr)                                   # the tool's CPU backend read: a fresh copy
                else:
                    self.host[:arr.nbytes] = arr
                t1 = time.monotonic()
                self._record("read", "cpu", t0, t1, entry["bytes"], entry["tokens"], t1 - t0, user)
                return
            entry = self._where(entry)                             # evicted meanwhile: it is on storage now
        if entry["tier"] == "storage":
            t0, t1, dev = self._read_file(Path(entry["path"]), entry["bytes"])
            self._record("read", "storage", t0, t1, entry["bytes"], entry["tokens"], dev, user)

    def request(self, conv: dict) -> None:
        user, old = conv["user"], conv["entry"]
        if old is not None:                                        # reload the previous turn's cache
            self._reload(old, user)
            conv["tokens"] += self.spec["turn_tokens"]
        tokens = conv["tokens"]
        with self.lock:
            self.seq += 1
            key = f"u{user}-t{conv['turn']}-{self.seq}"
        conv["entry"] = self._put(key, tokens * self.spec["bytes_per_token"], tokens, user)
        self._drop(old)
        if tokens < self.spec["prefill_only_tokens"]:              # MLPerf's PREFILL_DECODE: one write, N reads
            for _ in range(self.spec["decode_reads"]):
                self._reload(conv["entry"], user)
        conv["turn"] += 1

    def _where(self, entry: dict) -> dict:
        """Where a CPU-tier entry is now: still in the tier, or on storage (waiting while its eviction writes)."""
        while True:
            with self.lock:
                if entry["key"] in self.tier.entries or entry["key"] not in self.evicted:
                    return entry
                moved = self.evicted[entry["key"]]
            if moved is not None:
                return moved
            if self.error is not None:                              # the evicting thread failed
                raise RuntimeError(f"entry {entry['key']}: its eviction to storage failed")
            time.sleep(0.001)

    def _cache_bytes(self, nbytes: int) -> np.ndarray:
        """A CPU-tier entry: nbytes of memory holding the cache's bytes (the buffer repeated)."""
        arr = np.empty(nbytes, dtype=np.uint8)
        src = np.frombuffer(self.buf, dtype=np.uint8)
        for off in range(0, nbytes, len(src)):
            n = min(len(src), nbytes - off)
            arr[off:off + n] = src[:n]
        return arr

    def _put(self, key: str, nbytes: int, tokens: int, user: int) -> dict:
        if not self.tier.fits(nbytes):
            return self._to_storage(key, nbytes, tokens, user)
        victims = []
        with self.lock:
            declined = not self.tier.room(nbytes) and self.tier.declines(nbytes)
        if declined:
            return self._to_storage(key, nbytes, tokens, user)
        t0 = time.monotonic()           # the tool builds the array (generate), then its CPU backend copies it (np.copy)
        arr = np.copy(self._generated(nbytes)) if self.tool_buffers else None
        with self.lock:
            while not self.tier.room(nbytes) and self.tier.entries:
                vkey, varr = self.tier.entries.popitem(last=False)
                self.tier.used -= varr.nbytes
                victims.append((vkey, varr))
                self.evicted[vkey] = None                           # being written: readers wait
            if arr is None:
                t0 = time.monotonic()
                arr = self._cache_bytes(nbytes)
            self.tier.entries[key] = arr
            self.tier.used += nbytes
        self._record("write", "cpu", t0, time.monotonic(), nbytes, tokens, 0.0, user)
        for vkey, varr in victims:                                  # the waterfall: evicted entries go to storage
            moved = self._to_storage(vkey, varr.nbytes, varr.nbytes // self.spec["bytes_per_token"], -1)
            with self.lock:
                self.evicted[vkey] = moved
        return {"tier": "cpu", "key": key, "bytes": nbytes, "tokens": tokens}

    evicted: dict

    # -- the client's loop -----------------------------------------------------------------------------
    def _worker(self, deadline: float) -> None:
        try:
            while time.monotonic() < deadline and self.error is None:
                with self.lock:
                    if not self.idle:
                        u = None
                    else:
                        u = self.idle.pop(self.rng.randrange(len(self.idle)))
                if u is None:
                    time.sleep(0.001)
                    continue
                conv = self.users[u]
                self.request(conv)
                if conv["turn"] >= conv["turns"]:                  # the conversation ended: its cache goes
                    self._drop(conv["entry"])
                    self.users[u] = self._new_conversation(u)
                with self.lock:
                    self.idle.append(u)
        except BaseException as exc:                                # noqa: BLE001 - reported by run()
            self.error = exc

    def run(self, t_start: float, threads_for=None) -> dict:
        """The run from t_start: `concurrency` closed-loop threads, or those `threads_for(deadline)` gives (the
        mlperf family's users and workers, mlperf_users.Users)."""
        self.evicted = {}
        c0 = os.times()
        deadline = t_start + self.spec["duration_s"]
        threads = threads_for(deadline) if threads_for else [
            threading.Thread(target=self._worker, args=(deadline,), daemon=True)
            for _ in range(self.spec["concurrency"])]
        for t in threads:
            t.start()
        # MLPerf's denominator: the wait for the duration as measured (benchmark.py:1242-1244 at 284ce72), not the
        # nominal figure; a loaded host wakes late and the wait grows
        time.sleep(max(0.0, deadline - time.monotonic()))
        elapsed = time.monotonic() - t_start
        for t in threads:
            t.join()
        c1 = os.times()
        if self.error is not None:
            raise self.error
        return {"rank": self.rank, "records": self.records, "t_end": time.monotonic(),
                "cpu_s": (c1.user - c0.user) + (c1.system - c0.system), "written": self.written,
                "elapsed_s": elapsed}

    def clear(self) -> None:
        """The client's files removed (after the run, whatever happened)."""
        for f in self.folder.glob("*.kv"):
            f.unlink(missing_ok=True)
