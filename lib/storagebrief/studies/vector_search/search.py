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

import threading
import time
from pathlib import Path

import numpy as np

from ...kit.client_bound import cpu_seconds
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
    """The point's queries on `threads` threads. A thread that raises (or cannot start) stops the others at their
    next query and the point's result carries `error`, its cause in one line: run.py fails the row, and no QPS or
    recall counts a query that never finished."""
    cfg, index, queries = state["cfg"], state["index"], state["queries"]
    k, L, threads = cfg["k"], cfg["search_list"], cfg["threads"]
    deadline = time.perf_counter() + cfg["max_point_s"]
    lock = threading.Lock()
    taken, errors = [0], []
    found = np.full((len(queries), k), -1, dtype=np.int64)
    stats = np.full((len(queries), 5), np.nan)     # wall_s, engine latency us, io time us, cpu us, ios

    def next_query() -> int | None:
        with lock:
            i = taken[0]
            if errors or i >= len(queries) or (i >= cfg["min_queries"] and time.perf_counter() > deadline):
                return None
            taken[0] += 1
            return i

    def loop() -> None:
        i = None
        try:
            while (i := next_query()) is not None:
                t0 = time.perf_counter()
                r = index.batch_search(queries[i:i + 1], k, L, 1)
                wall = time.perf_counter() - t0
                s = r.search_stats
                found[i] = np.asarray(r.identifiers)[0][:k]
                stats[i] = (wall, s["mean_latency"], s["mean_io_time"], s["mean_cpus"], s["mean_ios"])
        except BaseException as exc:                # the thread's death fails the point; it never counts
            with lock:
                errors.append(f"search thread {threading.current_thread().name} failed on query {i}: "
                              f"{type(exc).__name__}: {first_line(exc)}")

    b0, c0, t0 = read_bytes(), cpu_seconds(), time.perf_counter()
    pool = _start(loop, threads, errors, lock)
    for th in pool:
        th.join()
    wall, b1, c1 = time.perf_counter() - t0, read_bytes(), cpu_seconds()
    n = taken[0]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return {"error": errors[0] + more, "queries": n}
    return {"queries": n, "wall_s": wall, "read_bytes": b1 - b0, "cpu_s": c1 - c0,
            "found": found[:n], "stats": stats[:n]}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _start(loop, threads: int, errors: list, lock) -> list[threading.Thread]:
    """The search threads, started; one that cannot start (a pids or nproc limit) is recorded in `errors`, with
    the limits' numbers, and the others stop at their next query."""
    pool = []
    for j in range(threads):
        th = threading.Thread(target=loop, name=f"query-{j}")
        try:
            th.start()
        except RuntimeError as exc:                 # can't start new thread
            from ...kit.budget import process_limits
            with lock:
                errors.append(f"could not start search thread {j + 1} of {threads}: {first_line(exc)} "
                              f"(now: {process_limits()})")
            break
        pool.append(th)
    return pool


WORKER = Worker("vector search client", _setup, _work)
