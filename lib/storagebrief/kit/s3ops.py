"""Timed S3 PUTs and GETs at a fixed concurrency, with the client's own CPU cost beside them.

One call moves a list of keys with `concurrency` requests in flight through the target's store (core.store: a
thread pool over its client, e.g. boto3, whose urllib3 pool holds one connection per thread; a directory's files), timing every request (start of the call to the last
body byte read or sent), and reads this process's CPU time (user + system, all threads) around the
whole batch: CPU seconds per GB is the client's cost, and CPU busy (and run-queue wait) ÷ (wall × the
cores this process can use: one for an interpreter-bound client, kit/client_bound) says whether the
client, not the store, was the limit. The payload is random bytes made once (incompressible,
as in warp and elbencho); GET bodies are read, counted and dropped: a
body whose received length is not the object's size fails the batch (ShortRead), so bytes_moved is
always bytes received.

`s3dlio_batch` does the same with s3dlio (Rust, the library MLPerf Storage v3.0 uses for object
runs) for the client comparison in benchmarks/s3_clients.py; its client is one process-wide
singleton bound to the first endpoint it sees, so a process uses it for one endpoint only.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import latency
from .client_bound import ProcessCPU, SelfMeter, cpu_seconds


PAYLOAD_CHUNK = 16 << 20


def payload(size: int, seed: int = 0) -> bytes:
    """`size` random bytes as one bytes object, made in 16 MiB pieces: an array's `.tobytes()` held the object
    twice at its peak (a 1 GiB payload: 2 GiB); BytesIO grows its buffer in place and getvalue() hands that
    buffer over (measured at 256 MiB: 278 MiB peak against 518 MiB). bytes, not a view: boto3 sends bytes
    without a copy per request."""
    import io
    rng, out = np.random.default_rng(seed), io.BytesIO()
    for off in range(0, size, PAYLOAD_CHUNK):
        out.write(rng.integers(0, 256, min(PAYLOAD_CHUNK, size - off), dtype=np.uint8))
    return out.getvalue()


class ShortRead(OSError):
    """A GET's body came back shorter (or longer) than the object: the batch fails, nothing is counted."""


def _length(body) -> int:
    """A batch's object size: its PUT body's length, or a GET's size (an int: no body held)."""
    return body if isinstance(body, int) else len(body)


@dataclass
class Batch:
    """What one batch of requests measured."""
    op: str                       # get | put
    objects: int
    object_bytes: int
    concurrency: int
    wall_s: float
    cpu_s: float                  # this process (the client), user + system
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    processes: list[ProcessCPU] = field(default_factory=list)   # each client process (kit/client_bound)

    @property
    def bytes(self) -> int:
        return self.objects * self.object_bytes

    def row(self) -> dict:
        ncpu = os.cpu_count() or 1
        gb = self.bytes / 1e9
        return {"objects": self.objects, "bytes_moved": self.bytes, "wall_seconds": self.wall_s,
                "throughput_mb_per_s": self.bytes / self.wall_s / 1e6 if self.wall_s > 0 else np.nan,
                "objects_per_s": self.objects / self.wall_s if self.wall_s > 0 else np.nan,
                **latency.stats(self.latencies_s, "latency_ms", ("p50", "p99", "mean", "max"), 1e3, empty=np.nan),
                "client_cpu_seconds": self.cpu_s,
                "client_cpu_s_per_gb": self.cpu_s / gb if gb > 0 else np.nan,
                "client_cpu_percent_of_machine": 100 * self.cpu_s / (self.wall_s * ncpu) if self.wall_s > 0 else np.nan,
                "client_processes": [p.as_dict() for p in self.processes],
                "errors": self.errors}

    def part(self) -> dict:
        """What a merge needs from one process's share: its row, plus every request's latency."""
        return {**self.row(), "op": self.op, "object_bytes": self.object_bytes, "concurrency": self.concurrency,
                "latencies_s": list(self.latencies_s)}


def merged(parts: list[dict]) -> Batch:
    """One batch from the shares of several client processes that ran at once (Batch.part of each): objects,
    CPU and latencies summed or pooled, concurrency summed, wall the longest share's (they start together on
    one 'go'), each process kept for the client-bound judgement."""
    first = parts[0]
    return Batch(first["op"], sum(p["objects"] for p in parts), first["object_bytes"],
                 sum(p["concurrency"] for p in parts), max(p["wall_seconds"] for p in parts),
                 sum(p["client_cpu_seconds"] for p in parts), [x for p in parts for x in p["latencies_s"]],
                 sum(p["errors"] for p in parts),
                 [ProcessCPU(**q) for p in parts for q in p["client_processes"]])


def store_batch(store, op: str, keys: list[str], body: bytes | int, concurrency: int) -> Batch:
    """PUT `body` to every key, or GET every key whole (`body`: their size), through `store` (core.store: a
    directory's files or an S3 client), `concurrency` at a time; every request timed from its start to its last
    byte; raises the first failure, and ShortRead when a GET received other than the object's size."""
    if op == "put":
        store.prepare_puts(keys)       # a directory's folders exist before the clock, as a bucket does

    def one(key: str) -> float:
        t0 = time.perf_counter()
        got = store.transfer(op, key, body)
        if op == "get" and got != body:
            raise ShortRead(f"GET {store.url(key)} returned {got} of {body} bytes: a short body is not a whole object")
        return time.perf_counter() - t0

    return _timed(one, keys, op, body, concurrency, interpreter_bound=True)


def _timed(one, keys: list[str], op: str, body, concurrency: int, interpreter_bound: bool) -> Batch:
    """`one` over every key, `concurrency` threads; the process measured before its threads end (their
    run-queue wait goes with them)."""
    meter = SelfMeter().start()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        lats = list(pool.map(one, keys))
        proc = meter.stop(concurrency, interpreter_bound, label=f"{op} worker pid {os.getpid()}")
    return Batch(op, len(keys), _length(body), concurrency, proc.wall_seconds, proc.cpu_seconds, lats,
                 processes=[proc])


def s3dlio_batch(bucket: str, op: str, keys: list[str], body: bytes, concurrency: int) -> Batch:
    """The same batch through s3dlio's put_many / get_many (no per-request times: it returns none)."""
    import s3dlio
    uris = [f"s3://{bucket}/{k}" for k in keys]
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    if op == "put":
        s3dlio.put_many([(u, body) for u in uris], max_in_flight=concurrency)
    else:
        got = s3dlio.get_many(uris, max_in_flight=concurrency)
        if len(got) != len(uris):
            raise RuntimeError(f"s3dlio.get_many returned {len(got)} of {len(uris)} objects")
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return Batch(op, len(keys), len(body), concurrency, wall, cpu)
