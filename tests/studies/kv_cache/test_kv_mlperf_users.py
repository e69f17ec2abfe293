"""The mlperf workload family is MLPerf's user model (kv_cache_benchmark at upstream commit 284ce72): one worker per
user (benchmark.py:1231), 1 + ⌈G/32⌉ reads of a request's new cache below 10K tokens (benchmark.py:584-613), every
earlier turn's file reloaded (benchmark.py:552-565), writes bounded by max_concurrent_allocs and reads not
(cache.py:640-653), the files kept until the capacity LRU drops them (cache.py:431-437); the presets as the
tool's README runs the closed options (README.md:1699-1776)."""
from __future__ import annotations

import collections
import itertools
import math
import threading

import pytest

from storagebrief.core import config
from storagebrief.kit.checkpoint import incompressible
from storagebrief.studies.kv_cache import clients, mlperf_users as mu
from storagebrief.studies.kv_cache.client import Client
from storagebrief.studies.kv_cache.params import KvCacheParams
from storagebrief.studies.kv_cache.workload import PRESETS
from conftest import REPO

BPT = 131072


def _spec(folder, **kw) -> dict:
    return {"folder": str(folder), "family": "mlperf", "seed": 42, "users": 4, "concurrency": 2, "cpu_tier_bytes": 0,
            "bytes_per_token": BPT, "contexts": [(16, 1)], "turns": [(2, 1)], "turn_tokens": 8, "decode_reads": 1,
            "prefill_only_tokens": 10000, "duration_s": 0.6, "write_block": 1 << 20, "largest_entry_bytes": 64 * BPT,
            "max_concurrent_allocs": 1, "decode_batch_tokens": 32, "end_conversation_probability": 0.2,
            "max_turns": 50, "storage_capacity_bytes": 0,
            "templates": [{"name": "t", "context_tokens": [16, 64], "generate_tokens": [10, 100],
                           "think_s": [0.005, 0.02]}], **kw}


def test_the_presets_are_the_tools_closed_options():
    p = KvCacheParams.model_validate({"run": list(PRESETS)})
    got = {n: (p.workload(n).family, p.workload(n).model, p.workload(n).users_per_client,
               p.workload(n).max_concurrent_allocs, p.workload(n).cpu_tier_gib, p.workload(n).threads) for n in PRESETS}
    assert got == {"mlperf-closed-1": ("mlperf", "llama3.1-8b", 200, 16, None, 200),
                   "mlperf-closed-2": ("mlperf", "llama3.1-8b", 100, 0, 4.0, 100),
                   "mlperf-closed-3": ("mlperf", "llama3.1-70b", 70, 4, None, 70)}
    assert p.mlperf.decode_batch_tokens == 32 and p.mlperf.end_conversation_probability == 0.2


def test_one_worker_per_user_at_most_500(tmp_path):
    for users, want in ((4, 4), (200, 200), (700, 500)):
        c = Client(_spec(tmp_path, users=users), 0, incompressible(1 << 20))
        names = [t.name for t in mu.Users(c).threads(0.0)]
        assert sum(n.startswith("kv-worker-") for n in names) == want
        assert sum(n.startswith("kv-user-") for n in names) == users


def test_the_request_stream_reads_1_plus_ceil_gen_over_32_and_reloads_every_earlier_turn():
    spec = _spec(".")
    reqs = list(itertools.islice(mu.user_requests(0, 0, spec), 400))
    assert reqs == list(itertools.islice(mu.user_requests(0, 0, spec), 400))       # the same for the same seed
    for r in reqs:
        assert r.decode_reads == 1 + math.ceil(r.generate_tokens / 32)
        assert 16 // 4 <= r.context_tokens <= 64 and 10 // 4 <= r.generate_tokens <= 100
    convs = collections.defaultdict(list)
    for r in reqs:
        convs[r.conversation].append(r)
    for turns in convs.values():
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1))
        for i, r in enumerate(turns):
            assert r.reloads == tuple(t.key for t in turns[:i])
    # conversations end with probability 0.2 per turn: ~5 turns on average over 400 requests
    assert 3 < len(reqs) / len(convs) < 8
    big = mu.decode_reads(100, 10000, spec)
    assert big == 0                                                                  # PREFILL only from 10K tokens


def test_a_request_reads_its_earlier_turns_and_its_new_cache_1_plus_ceil_gen_over_32_times(tmp_path):
    c = Client(_spec(tmp_path), 0, incompressible(1 << 20))
    c.evicted = {}
    users = mu.Users(c)
    first, second = itertools.islice(mu.user_requests(0, 0, c.spec), 2)
    second = second._replace(reloads=(first.key,), turn=2)
    users.process(first)
    users.process(second)
    reads = [r for r in c.records if r.op == "read"]
    writes = [r for r in c.records if r.op == "write"]
    assert len(writes) == 2 and [w.nbytes for w in writes] == [first.context_tokens * BPT, second.context_tokens * BPT]
    assert len(reads) == first.decode_reads + 1 + second.decode_reads
    assert sum(r.nbytes == first.context_tokens * BPT for r in reads) >= first.decode_reads + 1
    c.clear()


def _max_overlap(intervals) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


@pytest.mark.parametrize("allocs", [1, 2])
def test_writes_in_flight_never_exceed_max_concurrent_allocs(tmp_path, allocs):
    c = clients._setup(0, 1, _spec(tmp_path, users=6, max_concurrent_allocs=allocs))
    active, most, lock = [0], [0], threading.Lock()
    put = c._put

    def counted(*a, **kw):                        # the writes' own count, not their timestamps
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            return put(*a, **kw)
        finally:
            with lock:
                active[0] -= 1
    c._put = counted
    r = clients._work(c, 0, None, None)
    writes = [x for x in r["records"] if x[0] == "write"]
    assert writes and most[0] <= allocs
    assert _max_overlap([(x[2], x[3]) for x in writes]) <= allocs
    assert r["issued"] >= len(writes)
    c.clear()


def test_the_capacity_lru_drops_the_least_recently_used_files(tmp_path):
    c = Client(_spec(tmp_path, storage_capacity_bytes=100 * BPT), 0, incompressible(1 << 20))
    c.evicted = {}
    users = mu.Users(c)
    reqs = list(itertools.islice(mu.user_requests(0, 0, c.spec), 12))
    for r in reqs:
        users.process(r._replace(reloads=(), decode_reads=0))
    files = list((tmp_path / "c0").glob("*.kv"))
    assert sum(f.stat().st_size for f in files) <= 100 * BPT
    kept = [k for k in users.entries]
    assert 0 < len(kept) < len(reqs) and kept == [r.key for r in reqs][-len(kept):]   # the newest kept, oldest gone
    users._read(reqs[0].key, 0)
    assert users.misses == 1 and users.turn_lookups == users.turn_misses == 0     # a decode read's miss
    users.process(reqs[-1]._replace(reloads=(reqs[0].key, reqs[-2].key), decode_reads=0, key="next"))
    assert (users.turn_lookups, users.turn_misses, users.misses) == (2, 1, 2)    # MLPerf's multi_turn_stats
    c.clear()


def test_an_mlperf_template_beyond_the_window_is_refused_naming_it():
    with pytest.raises(ValueError, match="mlperf.templates"):
        config.validate({"targets": [{"name": "t", "path": "/tmp/x"}],
                         "kv_cache": {"run": ["mlperf-closed-1"], "mlperf": {"templates": [
                             {"name": "x", "context_tokens": [1, 200000], "generate_tokens": [1, 2],
                              "think_s": [0, 1]}]}}}, root=REPO)


def test_a_request_looks_up_every_turn_its_conversation_holds_when_taken_later_ones_included(tmp_path):
    """The tool reloads get_all_previous_turn_keys at processing time: every key of the conversation but the
    request's own, so turns its user enqueued meanwhile are looked up too and miss until written."""
    c = Client(_spec(tmp_path), 0, incompressible(1 << 20))
    c.evicted = {}
    users = mu.Users(c)
    reqs = []
    for r in mu.user_requests(0, 0, c.spec):
        if reqs and r.conversation != reqs[0].conversation:
            break
        reqs.append(r)
    while len(reqs) < 3:                                       # one conversation of three turns
        reqs.append(reqs[-1]._replace(turn=len(reqs) + 1, key=f"{reqs[0].key}-x{len(reqs)}"))
    first, second, third = (r._replace(decode_reads=0) for r in reqs[:3])
    for r in (first, second, third):
        users.enqueue(r)
    assert users.reloads(first) == [second.key, third.key]
    users.process(first)                                       # both later turns not written yet: 2 misses
    users.process(second)                                      # the first read, the third a miss
    assert (users.turn_lookups, users.turn_misses) == (4, 3)
    assert sum(1 for x in c.records if x.op == "read") == 1
    c.clear()


def test_a_decode_read_that_finds_its_file_evicted_writes_it_again_and_reads_no_more(tmp_path):
    """benchmark.py:600-606: the first decode read missed, so the tool allocates the entry again, no batched reads."""
    c = Client(_spec(tmp_path, storage_capacity_bytes=1), 0, incompressible(1 << 20))   # every file evicted at once
    c.evicted = {}
    users = mu.Users(c)
    req = next(mu.user_requests(0, 0, c.spec))._replace(reloads=(), decode_reads=4)
    users._make_room = lambda nbytes: None                      # written, then evicted before its first read:
    put = users._write

    def write_then_evict(r):
        put(r)
        with c.lock:
            users.entries.pop(r.key, None)
    users._write = write_then_evict
    users.process(req)
    ops = [x.op for x in c.records]
    assert ops == ["write", "write"] and users.misses == 1      # no read: missed once, written again
    c.clear()


def test_users_draw_the_tools_qos_levels_and_the_queue_serves_the_highest_priority_first(tmp_path):
    """workload.py:280-296 (interactive 0.15, responsive below 0.50, else batch) and the tool's PriorityQueue
    keyed (-priority, time) (benchmark.py:168, 425-427): with a backlog, interactive users' requests go first."""
    spec = _spec(tmp_path)
    levels = collections.Counter(next(mu.user_requests(u, 0, spec)).priority for u in range(2000))
    assert set(levels) == {1, 2, 3}
    assert 0.12 < levels[3] / 2000 < 0.18 and 0.32 < levels[2] / 2000 < 0.38 and 0.47 < levels[1] / 2000 < 0.53
    c = Client(spec, 0, incompressible(1 << 20))
    users = mu.Users(c)
    base = next(mu.user_requests(0, 0, spec))
    for i, prio in enumerate([1, 3, 2, 3, 1]):
        users.enqueue(base._replace(key=f"k{i}", priority=prio))
    order = [users.queue.get_nowait()[-1].key for _ in range(5)]
    assert order == ["k1", "k3", "k2", "k0", "k4"]
    c.clear()


def test_readers_of_one_cache_take_turns_as_under_the_tools_entry_lock(tmp_path):
    """cache.py:777-826: the tool reads an entry under its lock, so workers reloading one conversation's file wait
    for one another (and cannot share its pages in the page cache); reads of other files go on beside them."""
    import time

    c = Client(_spec(tmp_path), 0, incompressible(1 << 20))
    c.evicted = {}
    users = mu.Users(c)
    for key in ("a", "b"):
        users.entries[key] = c._put(key, 4 * BPT, 4, 0)
    spans, guard = [], threading.Lock()

    def slow(entry, user):                                     # a read that takes 0.2 s
        t0 = time.monotonic()
        time.sleep(0.2)
        with guard:
            spans.append((entry["key"], t0, time.monotonic()))

    c._reload = slow
    threads = [threading.Thread(target=users._read, args=(k, 0)) for k in ("a", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a1, a2), b = sorted(s[1:] for s in spans if s[0] == "a"), next(s[1:] for s in spans if s[0] == "b")
    assert a2[0] >= a1[1] - 1e-3                               # the second read of "a" began after the first ended
    assert b[0] < a1[1]                                        # "b" did not wait for "a"
    c.clear()
