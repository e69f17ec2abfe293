"""The object sweep's worker: its start command and its budget. The worker itself is compiled (s3worker/main.go, Go
with minio-go, run through kit/s3worker): one batch of GETs or PUTs in a process of its own, so that its CPU time
is the client's alone (the engine's monitor and trace readers run in the study's process) and, on a directory
target, so that it can sit in the target's throttle cgroup."""
from __future__ import annotations

import os

GO = {"cmd": "go"}             # the parent's start: the clock runs


# --------------------------------------------------------------------------- the sweep's budget
WORKER_OWN_BYTES = 128 << 20   # the worker's own (the Go client's runtime and buffers: 1 MiB a request; kept at the
                               # Python worker's 48 MiB measured ×2, an upper bound)
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
