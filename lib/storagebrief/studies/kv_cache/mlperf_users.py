"""MLPerf's user model (the `mlperf` workload family), as MLPerf Storage's KV-cache tool runs it at upstream
commit 284ce72 (kv_cache_benchmark/kv_cache/, public fork idevasena/storage_mlcommons; file:line below).

- Users: each draws a template (chatbot, coding, document) and from it a context length L, a generation length G
  and a think time (workload.py:239-275). A user thread sleeps think × U(0.8, 1.2), then enqueues a request
  whether or not its last one finished: an open loop (benchmark.py:429-436, 489).
- Conversations: a user goes on with its conversation with probability 0.8 and at most `max_turns` turns
  (benchmark.py:439-453, config.yaml:171-172). A request's context is U[L/4, L] tokens, its generation U[G/4, G]
  (benchmark.py:460-461); its cache is one file per turn holding that turn's context (conversation.py:79-96).
- QoS: each user draws a level after its template, interactive (priority 3) with probability 0.15, responsive (2)
  below 0.50, else batch (1) (workload.py:280-296, config.yaml:75-107); the queue hands out the highest priority
  first, then the earliest enqueued (benchmark.py:168, 425-427).
- Workers: min(users, 500) threads take requests from the queue (benchmark.py:1231-1235); none starts after the
  duration (benchmark.py:529-532). Reads of one cache take turns, as the tool's `access_cache` reads under the entry's
  lock (cache.py:777-826): workers reloading the same conversation wait for one another rather than share the
  page cache. Per request: read back every other turn's file of the conversation still
  cached (benchmark.py:552-565): the turns enqueued by then, later ones included (conversation.py:98-104);
  write the new one (benchmark.py:567-573) under `max_concurrent_allocs` (a semaphore around the writes only, cache.py:277-280, 640-653; 0: none), then below 10,000 tokens read it
  1 + ⌈G / 32⌉ times (benchmark.py:584-613); where the first of those reads finds it evicted, write it again and
  read no more (benchmark.py:600-606).
- Capacity: the files stay until the storage tier's capacity is reached; then the least recently used go
  (cache.py:258-266, 431-437).

Left out: the QoS latency targets, the prefix cache (its system-prompt entries are never written
when caching is on by default, so its reads miss), RAG, autoscaling. Reads and writes are client.Client's
(cold reads, fsync'ed writes of incompressible bytes), so both families count the same I/O.
"""
from __future__ import annotations

import math
import queue
import random
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

MAX_WORKERS = 500                 # benchmark.py:1231
INTERACTIVE, RESPONSIVE = 0.15, 0.50          # qos_distribution (config.yaml:105-107): priority 3 below, 2 below, 1


class Request(NamedTuple):
    user: int
    conversation: int
    turn: int                     # 1, 2, ... within the conversation
    key: str                      # the turn's file
    context_tokens: int           # this turn's new context: the tokens its file holds
    generate_tokens: int
    think_s: float                # the user's wait before enqueueing it
    reloads: tuple                # the earlier turns' keys of this conversation, oldest first
    decode_reads: int             # reads of the new file after its write (0 from prefill_only_tokens on)
    priority: int = 1             # the user's QoS priority: 3 interactive, 2 responsive, 1 batch


def workers(spec: dict) -> int:
    """One worker thread per user, at most 500 (MLPerf's num_workers)."""
    return min(spec["users"], MAX_WORKERS)


def decode_reads(generate_tokens: int, context_tokens: int, spec: dict) -> int:
    """1 + ⌈G / batch⌉ below prefill_only_tokens (PREFILL_DECODE: one read, then one per decode batch), else 0."""
    if context_tokens >= spec["prefill_only_tokens"]:
        return 0
    return 1 + max(1, math.ceil(generate_tokens / spec["decode_batch_tokens"]))


def profile(rng: random.Random, spec: dict) -> tuple[int, int, float, int]:
    """(L, G, think s, QoS priority) of one user, from a template drawn at random."""
    t = rng.choice(spec["templates"])
    L, G, think = rng.randint(*t["context_tokens"]), rng.randint(*t["generate_tokens"]), rng.uniform(*t["think_s"])
    q = rng.random()
    return L, G, think, 3 if q < INTERACTIVE else 2 if q < RESPONSIVE else 1


def user_requests(user: int, rank: int, spec: dict):
    """One user's requests, in order (an endless generator, the same for the same seed, rank and user)."""
    rng = random.Random(f"{spec['seed']}-{rank}-{user}")
    L, G, think, priority = profile(rng, spec)
    conversation, turns = -1, []
    while True:
        if turns and (rng.random() >= 1 - spec["end_conversation_probability"] or len(turns) >= spec["max_turns"]):
            turns = []
        if not turns:
            conversation += 1
        ctx, gen = rng.randint(max(1, L // 4), L), rng.randint(max(1, G // 4), G)
        key = f"u{user}-c{conversation}-t{len(turns) + 1}"
        yield Request(user, conversation, len(turns) + 1, key, ctx, gen, think * rng.uniform(0.8, 1.2),
                      tuple(turns), decode_reads(gen, ctx, spec), priority)
        turns.append(key)


class Users:
    """One client's users and workers over its client.Client (its tiers, files and records)."""

    def __init__(self, client):
        self.c, self.spec = client, client.spec
        self.queue: queue.PriorityQueue = queue.PriorityQueue()   # (-priority, enqueued at, n, request)
        allocs = self.spec["max_concurrent_allocs"]
        self.allocs = threading.Semaphore(allocs) if allocs > 0 else None
        self.entries: OrderedDict = OrderedDict()        # key -> entry (client._put's), least recently used first
        self.stored = 0                                  # bytes of every entry kept, either tier
        self.misses = self.issued = 0
        self.turn_lookups = self.turn_misses = 0         # earlier turns' reloads only (MLPerf's multi_turn_stats)
        self.turns: dict = {}                            # (user, conversation) -> every turn's key enqueued so far
        self.key_locks: dict = {}                        # key -> its lock: one read of a cache at a time (the tool's)

    def threads(self, deadline: float) -> list[threading.Thread]:
        users = [threading.Thread(target=self._user, args=(u, deadline), daemon=True, name=f"kv-user-{u}")
                 for u in range(self.spec["users"])]
        return users + [threading.Thread(target=self._worker, args=(deadline,), daemon=True, name=f"kv-worker-{i}")
                        for i in range(workers(self.spec))]

    def _user(self, user: int, deadline: float) -> None:
        for req in user_requests(user, self.c.rank, self.spec):
            time.sleep(max(0.0, min(req.think_s, deadline - time.monotonic())))
            if time.monotonic() >= deadline or self.c.error is not None:
                return
            self.enqueue(req)

    def enqueue(self, req: Request) -> None:
        """Queue a request, its key first added to its conversation's turns (the tool's add_turn)."""
        with self.c.lock:
            self.issued += 1
            self.turns.setdefault((req.user, req.conversation), []).append(req.key)
            n = self.issued
        self.queue.put((-req.priority, time.monotonic(), n, req))

    def _worker(self, deadline: float) -> None:
        try:
            while time.monotonic() < deadline and self.c.error is None:
                try:
                    req = self.queue.get(timeout=0.05)[-1]
                except queue.Empty:
                    continue
                if time.monotonic() >= deadline:          # no request starts after the duration
                    return
                self.process(req)
        except BaseException as exc:                      # noqa: BLE001 - reported by Client.run
            self.c.error = exc

    def _lookup(self, key: str) -> dict | None:
        with self.c.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def _read(self, key: str, user: int, turn: bool = False) -> bool:
        """Read a cached file back: False where it is gone (evicted by capacity: MLPerf's miss, no I/O)."""
        entry = self._lookup(key)
        if turn:
            with self.c.lock:
                self.turn_lookups += 1
        if entry is None:
            self._missed(turn)
            return False
        with self.c.lock:
            lock = self.key_locks.setdefault(key, threading.Lock())
        try:
            with lock:                                    # the tool reads a cache under its entry lock
                self.c._reload(entry, user)               # (cache.py:777-826): readers of one file take turns
        except FileNotFoundError:                         # evicted while this read opened it
            self._missed(turn)
            return False
        return True

    def _missed(self, turn: bool) -> None:
        with self.c.lock:
            self.misses += 1
            self.turn_misses += turn

    def _make_room(self, nbytes: int) -> None:
        """Least recently used entries go until the new one fits the storage capacity (cache.py:431-437)."""
        cap = self.spec["storage_capacity_bytes"]
        while True:
            with self.c.lock:
                on_storage = self.stored - self.c.tier.used
                if not cap or on_storage + nbytes <= cap or not self.entries:
                    return
                _, victim = self.entries.popitem(last=False)
                self.stored -= victim["bytes"]
            self.c._drop(victim)

    def reloads(self, req: Request) -> list[str]:
        """The turns a request reloads, as the tool looks them up when a worker takes it: every key its conversation
        holds then but its own (conversation.py:98-104), so turns its user enqueued since (an open loop) are looked
        up too and miss unless written already; a request no user enqueued (a test's) reloads its earlier turns."""
        with self.c.lock:
            keys = self.turns.get((req.user, req.conversation))
            return list(req.reloads) if keys is None else [k for k in keys if k != req.key]

    def process(self, req: Request) -> None:
        for key in self.reloads(req):                     # every other turn of the conversation, if cached
            self._read(key, req.user, turn=True)
        self._write(req)
        if req.decode_reads and not self._read(req.key, req.user):
            self._write(req)                              # evicted already: the tool writes it again, no more reads
            return
        for _ in range(req.decode_reads - 1):
            self._read(req.key, req.user)

    def _write(self, req: Request) -> None:
        nbytes = req.context_tokens * self.spec["bytes_per_token"]
        self._make_room(nbytes)
        if self.allocs:
            self.allocs.acquire()
        try:
            entry = self.c._put(req.key, nbytes, req.context_tokens, req.user)
        finally:
            if self.allocs:
                self.allocs.release()
        with self.c.lock:
            self.entries[req.key] = entry
            self.stored += nbytes

    def clear(self) -> None:
        for entry in list(self.entries.values()):
            if entry.get("path"):
                Path(entry["path"]).unlink(missing_ok=True)
