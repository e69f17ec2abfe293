"""The object sweep's client: a compiled worker (studies/object_sweep/s3worker: Go with minio-go v7.4.1, built by
`make s3worker` into .tools/bin/s3worker) that moves every byte of a batch, GETs or PUTs on a directory's files or an
S3 bucket, with `concurrency` requests in flight; Python starts it, hands it the target's store handle and reads its
counts. Chosen by measurement (issue 58): at points the object sweep's tests never used, its boto3 worker moved
0.24-0.86 × what a Go minio-go client moved on the same gateway, at 1.9-7.7 × its CPU per GB.

It is a kit.child worker speaking JSON lines (its configuration the first line on stdin, credentials in its
environment): `start` makes it ready, the caller sends {"cmd": "go"} and reads {"event": "done"}; `batch` turns its
counts (and the thread readings taken from outside, by pid) into a kit.s3ops.Batch, judged as a compiled client:
the cores it can use are its goroutines', capped by its CPUs (kit/client_bound.usable_cores)."""
from __future__ import annotations

from pathlib import Path

from ..core.s3mover import BINARY_ENV, binary, missing  # noqa: F401  (the one binary, core's data path too)
from .child import Child
from .client_bound import ProcessCPU, sched_between, usable_cores
from .s3ops import Batch


def start(cfg: dict, env: dict, log_file: Path, label: str, join: list[str] | None) -> Child:
    """The worker started (in `join`'s cgroups) and sent its configuration; the caller expects 'ready'."""
    w = Child("s3worker", {}, log_file, label, env=env, join=join, argv=[str(binary())])
    w.send(cfg)
    return w


def batch(done: dict, pid: int, sched_before: dict, sched_after: dict) -> Batch:
    """Its 'done' event's counts as a Batch; its threads' run-queue time from two thread_sched(pid) readings."""
    b = done["batch"]
    proc = ProcessCPU(b["client_cpu_seconds"], b["wall_seconds"], usable_cores(b["concurrency"], False, pid),
                      *sched_between(sched_before, sched_after), f"{b['op']} worker pid {pid} (Go)", pid)
    return Batch(b["op"], b["objects"], b["object_bytes"], b["concurrency"], b["wall_seconds"],
                 b["client_cpu_seconds"], list(b["latencies_s"]), processes=[proc])
