"""One batch of GETs or PUTs in a process of its own (python -m storagebrief.studies.object_sweep.worker).

Its own process so that its CPU time is the client's alone (the engine's monitor and trace readers run
in the study's process) and, on a directory target, so that it can sit in the target's throttle cgroup.
The configuration comes on stdin as JSON with the target's store handle (core.store.StoreHandle: the worker opens
the same store itself, a directory's folder or an S3 client), credentials in the environment (never argv or a
file): STORAGEBRIEF_S3_ACCESS / STORAGEBRIEF_S3_SECRET for the local gateway, else boto3's own chain (the
environment or the AWS profile named in the config). A kit.child: it says {"event": "ready"} once imports,
client and payload are made, runs the batch on {"cmd": "go"} and says {"event": "done", "batch": row} (or
{"event": "done", "error": "..."}: the parent names a dead gateway before the error)."""
from __future__ import annotations

import json
import os
import sys

GO = {"cmd": "go"}             # the parent's start: the clock runs


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    from ...kit import s3ops

    # a PUT's body made once, the one copy its threads all send; a GET holds none (only its size: it was a
    # zeroed copy of the object, never read)
    body = s3ops.payload(cfg["size"], cfg["seed"]) if cfg["op"] == "put" else cfg["size"]
    from ...core.store import StoreHandle
    store = StoreHandle(**cfg["store"]).with_secrets(os.environ).open(pool=cfg["concurrency"])
    _say({"event": "ready"})
    if json.loads(sys.stdin.readline() or "{}") != GO:
        return 1
    try:
        batch = s3ops.store_batch(store, cfg["op"], cfg["keys"], body, cfg["concurrency"])
    except Exception as exc:   # noqa: BLE001 -- the parent names the cause (a dead gateway first)
        _say({"event": "done", "error": str(store.failure(exc))})
        return 0
    # one of several processes sharing the point: its part, latencies included, for the parent to merge
    _say({"event": "done", "batch": batch.part() if cfg.get("part") else batch.row()})
    return 0


def _say(event: dict) -> None:
    print(json.dumps(event), flush=True)


# --------------------------------------------------------------------------- the sweep's budget
WORKER_OWN_BYTES = 128 << 20   # the worker's Python, numpy and boto3 client (measured 48 MiB on a directory; ×2 for S3)
READ_CHUNK = 1 << 20           # a GET's read per request in flight (s3ops)


def check_budget(p, room=None) -> None:
    """Refuse (ValueError, one line with the numbers) a sweep this machine cannot hold (kit.budget). A point's
    workers (client_processes, never more than its concurrency) run at once, with `concurrency` threads among
    them, beside the busy load (stress-ng: a process per CPU and its parent); each worker's memory: the largest
    PUT body, made once and sent by its threads (s3ops.payload, one copy: measured 320 MiB peak for a 256 MiB
    PUT, 48 MiB for a GET) and its own; a read chunk per thread. The study's process makes the GET objects' body
    too, one size at a time, before any worker: the same largest size."""
    from ...kit import budget
    conc, largest = max(p.concurrency), max(p.object_sizes)
    workers = min(p.client_processes, conc)
    busy = (os.cpu_count() or 1) + 1 if "busy" in p.loads else 0
    what = (f"object_sweep: concurrency {conc:,}, object_sizes up to {largest / budget.MIB:,.1f} MiB"
            + (f", client_processes {workers:,}:" if workers > 1 else ":"))
    each = (f"the largest object {largest / budget.MIB:,.1f} MiB, made once + {WORKER_OWN_BYTES / budget.MIB:.0f} MiB "
            "for the worker")
    room = room or budget.Room.now()
    budget.check(what, tasks=workers + conc + busy, room=room,
                 how=f"{workers:,} worker(s) and their {conc:,} threads" + (f" + the busy load's {busy:,}" if busy else ""),
                 lower="lower object_sweep.concurrency, drop 'busy' from loads, or raise the limit")
    budget.check(what, files=conc + 16 * workers, room=room,
                 how=f"{conc:,} requests in flight + 16 of each worker's own",
                 lower="lower object_sweep.concurrency or client_processes, or raise the limit")
    budget.check(what, memory=workers * (largest + WORKER_OWN_BYTES) + conc * READ_CHUNK, room=room,
                 how=(f"{workers:,} workers × ({each})" if workers > 1 else each)
                     + f" + {conc:,} × {READ_CHUNK / budget.MIB:.0f} MiB read chunks",
                 lower="lower object_sweep.object_sizes, concurrency or client_processes")

if __name__ == "__main__":
    sys.exit(main())
