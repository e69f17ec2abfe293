"""The clients of one run, as one launcher's workers (kit.ranks: forked on this host, or MPI ranks as MLPerf
Storage runs them, `kv_cache.launcher`). Before any clock each client fills its write buffer with incompressible
bytes (kit.checkpoint); from the start line it runs client.Client for the nominal duration and returns its
records. A client that fails removes its files and stops the run; an ENOSPC keeps its errno, so the run can say
the target filled.
"""
from __future__ import annotations

import time

from ...kit.checkpoint import incompressible
from ...kit.ranks import Done, Launch, Worker
from .client import Client


def _setup(rank: int, n: int, spec: dict) -> Client:
    return Client(spec, rank, incompressible(min(spec["write_block"], spec["largest_entry_bytes"])))


def _work(c: Client, rank: int, msg, line) -> dict:
    return c.run(time.monotonic())


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
