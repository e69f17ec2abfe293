"""The clients of one run, as one launcher's workers (kit.ranks: forked on this host, or MPI ranks as MLPerf
Storage runs them, `kv_cache.launcher`). Before any clock each client fills its write buffer with incompressible
bytes (kit.checkpoint); from the start line it runs client.Client for the nominal duration and returns its
records. A client that fails removes its files and stops the run; an ENOSPC keeps its errno, so the run can say
the target filled.
"""
from __future__ import annotations

import time

from ...kit import budget
from ...kit.checkpoint import incompressible
from ...kit.ranks import Done, Launch, Worker
from . import mlperf_users
from .client import TOOL_BLOCK, Client
from .workload import MLPERF


def _setup(rank: int, n: int, spec: dict) -> Client:
    return Client(spec, rank, incompressible(min(spec["write_block"], spec["largest_entry_bytes"])))


def _work(c: Client, rank: int, msg, line) -> dict:
    if c.spec["family"] != MLPERF:
        return c.run(time.monotonic())
    users = mlperf_users.Users(c)
    out = c.run(time.monotonic(), users.threads)
    return {**out, "issued": users.issued, "misses": users.misses, "turn_lookups": users.turn_lookups,
            "turn_misses": users.turn_misses, "queued_at_end": users.queue.qsize()}


WORKER = Worker("kv_cache client", _setup, _work, ref=f"{__name__}:WORKER", on_failure=Client.clear)


def _shifted(rec, shift: float):
    """A call record with its start and end (fields 2 and 3) moved onto the launcher's clock."""
    vals = list(rec)
    vals[2] += shift
    vals[3] += shift
    return type(rec)(*vals) if hasattr(type(rec), "_fields") else tuple(vals)


def result(launch: Launch, release: float, done: list[Done]) -> dict:
    """{t_start, ranks: [client results], hosts} with every client's records on the launcher's clock."""
    ranks = []
    for d in done:
        r, shift = d.result, launch.offset(d, release)
        if shift:
            r = {**r, "records": [_shifted(x, shift) for x in r["records"]], "t_end": r["t_end"] + shift}
        ranks.append({**r, "host": d.host})
    return {"t_start": release, "ranks": ranks, "hosts": launch.hosts(done)}


# --------------------------------------------------------------------------- the clients' budget
def check_budget(p, room: budget.Room | None = None) -> None:
    """Refuse (ValueError, one line with the numbers) forked clients this machine cannot hold (kit.budget), for the
    heaviest workload of `run`: per client a process, its queue's feeder and its threads (Workload.threads, and the
    mlperf family's user threads); its memory as
    client.Client allocates it: the write buffer (a block, at most the largest cache), the host buffer reads land
    in (the largest cache), a read chunk per thread, the CPU tier's budget and, while a thread adds an entry and
    its evictions are written, up to one more cache per thread beside it; and the process's own memory."""
    if p.launcher != "fork":
        return          # MPI clients live on their hosts: mpirun's preflight starts them there
    room = room or budget.Room.now()
    n, MIB, GIB = p.clients, budget.MIB, budget.GIB
    for name in p.run:
        w, largest = p.workload(name), p.largest_entry_bytes(name)
        block, tier = min(p.write_block_mib * MIB, largest), p.cpu_tier_bytes(name)
        threads = w.threads                                         # doing I/O: closed-loop's or one per user
        users = w.users_per_client if w.family == MLPERF else 0     # the mlperf family's user threads beside them
        in_flight = threads * largest if tier else 0
        # the mlperf family reads and writes through MLPerf's tool's buffers (client.Client.tool_buffers): per
        # thread a fresh block a read lands in, its copy and a generated block to write, no host buffer
        host, chunks, chunk = ((0, 3, min(TOOL_BLOCK, largest)) if w.family == MLPERF else (largest, 1, block))
        per = block + host + chunks * threads * chunk + tier + in_flight + budget.PROCESS_OWN_BYTES
        what = f"kv_cache.clients = {n:,} (workload {name})"
        knobs = _knobs(p, name)
        budget.check(f"{what},", tasks=n * (budget.TASKS_PER_WORKER + threads + users), room=room,
                     how=f"{n:,} × ({budget.TASKS_PER_WORKER} + "
                         + (f"{threads} workers + {users} user threads)" if users else f"concurrency {threads})"),
                     lower=f"lower {knobs['tasks']}, use launcher: mpi, or raise the limit")
        budget.check(f"{what},", files=n * budget.FILES_PER_WORKER, room=room, how="pipes in the parent",
                     lower="lower kv_cache.clients, use launcher: mpi, or raise the limit")
        budget.check(what, memory=n * per, room=room,
                     how=f"{n:,} × ({block / MIB:,.0f} MiB write buffer + "
                         + (f"{largest / MIB:,.0f} MiB host buffer (the largest cache) + " if host else "")
                         + f"{threads} threads × {chunks} × {chunk / MIB:,.0f} MiB "
                         + ("(a read's block, its copy, a write's block)" if chunks > 1 else "read chunks")
                         + (f" + cpu_tier_gib {tier / GIB:g} GiB + {threads} × {largest / MIB:,.0f} MiB "
                            "caches in flight" if tier else "")
                         + f" + {budget.PROCESS_OWN_BYTES / MIB:.0f} MiB per process)",
                     lower=f"lower {knobs['memory']}, or use launcher: mpi across hosts")


def _knobs(p, name: str) -> dict[str, str]:
    """The knobs that lower a workload's tasks and memory, as this workload has them: the closed loop's
    `concurrency`, the mlperf family's users (one thread each) and templates' contexts; a preset (MLPerf's closed
    option) fixes its users and CPU tier, so its hint names what is left and a workload of one's own."""
    w = p.workload(name)
    if name not in p.workloads:                                   # a preset: MLPerf's users and tier are fixed
        own = (f" (the preset fixes MLPerf's {w.users_per_client} users per client: a workload of your own, "
               "kv_cache.workloads.<name> with family: mlperf, may have fewer)")
        return {"tasks": f"kv_cache.clients{own}",
                "memory": f"kv_cache.clients, kv_cache.write_block_mib or the contexts of kv_cache.mlperf.templates"
                          f"{own}"}
    if w.family == MLPERF:
        return {"tasks": f"kv_cache.clients or workloads.{name}.users_per_client (one thread per user)",
                "memory": f"kv_cache.clients, workloads.{name}.users_per_client"
                          + (f", workloads.{name}.cpu_tier_gib" if w.cpu_tier_gib else "")
                          + ", kv_cache.write_block_mib or the contexts of kv_cache.mlperf.templates"}
    return {"tasks": f"kv_cache.clients or workloads.{name}.concurrency",
            "memory": f"kv_cache.clients, workloads.{name}.concurrency"
                      + (f", workloads.{name}.cpu_tier_gib" if w.cpu_tier_gib else "")
                      + ", kv_cache.write_block_mib or the longest conversation (kv_cache.contexts, turns, "
                        "turn_tokens)"}
