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
read comes from the device). Every call is recorded: op, tier, start, end (CLOCK_MONOTONIC, one clock for
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


class _Tier:
    """The CPU tier: entries (numpy arrays holding the bytes) under a byte budget, least recently used first."""

    def __init__(self, budget: int):
        self.budget, self.used, self.entries = budget, 0, OrderedDict()

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= self.budget


class Client:
    def __init__(self, spec: dict, rank: int, buf):
        self.spec, self.rank, self.buf = spec, rank, buf
        self.folder = Path(spec["folder"]) / f"c{rank}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(spec["seed"] * 1009 + rank)
        self.lock = threading.Lock()
        self.tier = _Tier(spec["cpu_tier_bytes"])
        self.records: list[Call] = []
        self.users = [self._new_conversation(u) for u in range(spec["users"])]
        self.idle = list(range(spec["users"]))
        self.written = 0
        self.seq = 0
        self.host = np.empty(spec["largest_entry_bytes"], dtype=np.uint8)   # the host buffer reads land in
        self.error: BaseException | None = None

    def _pick(self, table: list) -> int:
        return self.rng.choices([t[0] for t in table], weights=[t[1] for t in table])[0]

    def _new_conversation(self, user: int) -> dict:
        return {"user": user, "turn": 0, "turns": self._pick(self.spec["turns"]),
                "tokens": self._pick(self.spec["contexts"]), "entry": None}

    # -- storage ---------------------------------------------------------------------------------------
    def _write_file(self, path: Path, nbytes: int) -> tuple[float, float, float]:
        block, t0 = self.spec["write_block"], time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            while done < nbytes:
                n = min(block, nbytes - done)
                done += os.write(fd, self.buf[:n])
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
            chunk = bytearray(min(nbytes, self.spec["write_block"]))
            view, got, device = memoryview(chunk), 0, 0.0
            while got < nbytes:
                r0 = time.monotonic()
                n = os.readv(fd, [view[:min(len(chunk), nbytes - got)]])
                device += time.monotonic() - r0
                if n <= 0:
                    raise OSError(f"{path}: short read ({got} of {nbytes} bytes)")
                self.host[got:got + n] = np.frombuffer(chunk, dtype=np.uint8, count=n)   # the host copy
                got += n
        finally:
            os.close(fd)
        return t0, time.monotonic(), device

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
            while self.tier.used + nbytes > self.tier.budget and self.tier.entries:
                vkey, varr = self.tier.entries.popitem(last=False)
                self.tier.used -= varr.nbytes
                victims.append((vkey, varr))
                self.evicted[vkey] = None                           # being written: readers wait
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
