"""The search workers (kit.ranks, forked, in the run's cgroup: the target's throttle): `threads` processes, each with
the index open (DiskANN reads its PQ tables and header then, before the clock), each running one query at a time,
so `threads: N` keeps N queries in flight. Python threads around the engine's one-row calls kept about one in flight
(the call holds the GIL: two threads ran at 0.99-1.42x one thread's QPS, issue 59); N processes ran at 2.0-2.5x
on `local` at N = 2 (docs/studies/vector_search.md). The workers take the query numbers from one shared queue in
order, so query i is the i-th taken, and each query is a one-row batch so that the engine's statistics are that
query's own (latency, reads, I/O time, CPU time), timed alone: per-query percentiles, not batch means (v3.0's p99
is a percentile of batch averages).

Reads per query, the workers' two sources: the engine's own count (search_stats mean_ios) and the processes'
/proc/self/io read_bytes / 4096 over the measured interval (direct I/O is counted there; the page cache is not
involved). The third, the block layer's, is the launcher's (run.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...kit.client_bound import cpu_seconds
from ...kit.ranks import Worker
from .dataset import engine

PAGE = 4096
STATS = ("start", "end", "latency_us", "io_us", "cpu_us", "ios")   # per query: CLOCK_MONOTONIC s, the engine's


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
    """This worker's queries, one at a time, from the shared queue until it ends or `max_point_s` passed (query i
    is the i-th taken: none starts past the deadline once min_queries were taken). A query that raises ends this
    worker's loop and its result carries `error`, its cause in one line: run.py fails the row, and no QPS or
    recall counts a query that never finished."""
    cfg, index, queries = state["cfg"], state["index"], state["queries"]
    k, L = cfg["k"], cfg["search_list"]
    deadline = time.monotonic() + cfg["max_point_s"]
    done, found, stats = [], [], []
    b0, c0 = read_bytes(), cpu_seconds()
    i = None
    try:
        for i in line.tasks():
            if i >= cfg["min_queries"] and time.monotonic() > deadline:
                break
            t0 = time.monotonic()
            r = index.batch_search(queries[i:i + 1], k, L, 1)
            t1 = time.monotonic()
            s = r.search_stats
            done.append(i)
            found.append(np.asarray(r.identifiers)[0][:k])
            stats.append((t0, t1, s["mean_latency"], s["mean_io_time"], s["mean_cpus"], s["mean_ios"]))
    except Exception as exc:                # the query's failure fails the point; it never counts
        return {"error": f"search process {rank} failed on query {i}: {type(exc).__name__}: {first_line(exc)}",
                "queries": len(done)}
    return {"index": np.asarray(done, dtype=np.int64), "found": np.asarray(found, dtype=np.int64).reshape(-1, k),
            "stats": np.asarray(stats, dtype=float).reshape(-1, len(STATS)),
            "read_bytes": read_bytes() - b0, "cpu_s": cpu_seconds() - c0}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def merge(results: list[dict], release: float) -> dict:
    """The workers' results as one point's: queries in the order they were taken, the wall time from the start
    line to the last query's end, bytes and CPU summed; `error`: the first worker's that failed."""
    errors = [r["error"] for r in results if r.get("error")]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return {"error": errors[0] + more, "queries": sum(int(r.get("queries", 0)) for r in results)}
    index = np.concatenate([r["index"] for r in results])
    order = np.argsort(index, kind="stable")
    stats = np.concatenate([r["stats"] for r in results])[order]
    end = float(stats[:, 1].max()) if len(stats) else release
    return {"queries": len(index), "index": index[order], "found": np.concatenate([r["found"] for r in results])[order],
            "stats": stats, "wall_s": end - release, "processes": len(results),
            "read_bytes": sum(r["read_bytes"] for r in results), "cpu_s": sum(r["cpu_s"] for r in results)}


WORKER = Worker("vector search client", _setup, _work)
