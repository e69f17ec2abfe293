"""The search worker (kit.ranks, in the run's cgroup: the target's throttle): it opens the index before the clock
(DiskANN reads its PQ tables and header then), and from the start line runs the planted queries one at a time on
`threads` Python threads, each query a one-row batch so that the engine's statistics are that query's own
(latency, reads, I/O time, CPU time), and each timed alone: per-query percentiles, not batch means (v3.0's
p99 is a percentile of batch averages).

Reads per query, the worker's two sources: the engine's own count (search_stats mean_ios) and this process's
/proc/self/io read_bytes / 4096 over the measured interval (direct I/O is counted there; the page cache is not
involved). The third, the block layer's, is the launcher's (run.py).
"""
from __future__ import annotations

import resource
import threading
import time
from pathlib import Path

import numpy as np

from ...kit.ranks import Worker
from .dataset import engine

PAGE = 4096


def read_bytes() -> int:
    """This process's bytes fetched from storage so far (/proc/self/io: direct I/O included, cache hits not)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _setup(rank: int, n: int, cfg: dict) -> dict:
    diskannpy = engine()

    folder = Path(cfg["folder"])
    index = diskannpy.StaticDiskIndex(str(folder / "index"), num_threads=1, beam_width=cfg["beam_width"])
    queries = np.load(folder / "queries.npy")
    # one query before the clock: the search's code paths paged in here, not inside the first timed query
    # (the first point on an emulated HDD read 391 extra sectors per query without it, measured)
    index.batch_search(queries[-1:], cfg["k"], cfg["search_list"], 1)
    return {"index": index, "queries": queries, "cfg": cfg}


def _work(state: dict, rank: int, msg, line) -> dict:
    cfg, index, queries = state["cfg"], state["index"], state["queries"]
    k, L, threads = cfg["k"], cfg["search_list"], cfg["threads"]
    deadline = time.perf_counter() + cfg["max_point_s"]
    lock = threading.Lock()
    taken = [0]
    found = np.full((len(queries), k), -1, dtype=np.int64)
    stats = np.full((len(queries), 5), np.nan)     # wall_s, engine latency us, io time us, cpu us, ios

    def next_query() -> int | None:
        with lock:
            i = taken[0]
            if i >= len(queries) or (i >= cfg["min_queries"] and time.perf_counter() > deadline):
                return None
            taken[0] += 1
            return i

    def loop() -> None:
        while (i := next_query()) is not None:
            t0 = time.perf_counter()
            r = index.batch_search(queries[i:i + 1], k, L, 1)
            wall = time.perf_counter() - t0
            s = r.search_stats
            found[i] = np.asarray(r.identifiers)[0][:k]
            stats[i] = (wall, s["mean_latency"], s["mean_io_time"], s["mean_cpus"], s["mean_ios"])

    b0, c0, t0 = read_bytes(), cpu_seconds(), time.perf_counter()
    pool = [threading.Thread(target=loop, name=f"query-{j}") for j in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall, b1, c1 = time.perf_counter() - t0, read_bytes(), cpu_seconds()
    n = taken[0]
    return {"queries": n, "wall_s": wall, "read_bytes": b1 - b0, "cpu_s": c1 - c0,
            "found": found[:n], "stats": stats[:n]}


WORKER = Worker("vector search client", _setup, _work)
