"""emulate on S3 targets: the dataset as objects, the loader's GETs, the gateway's share of a run.

Dataset: one object per sample file, as DLIO lays a dataset out in a bucket. The files are generated
exactly as for a directory target (dataset.py: same formats, sizes, seed) and made the store's data by
`store.fill` (core.store: on S3, generated in a staging folder beside the gateway's root, PUT through the
target's own endpoint under `<run prefix><workload>/data/<file name>`, the staging folder removed; on a
directory, in place). Generation is not timed.

Reads (ObjectLoader): one GET per sample, covering exactly the bytes the directory loader reads (the
sample's span: the whole object for one-sample npz / jpeg files but their format header, a ranged GET
of one record for a multi-sample tfrecord file), its body streamed in `read_block` reads. This is what
object loaders do: s3torchconnector's sequential reader and s3dlio (MLPerf Storage v3.0) fetch a sample
with one request and stream it; a ranged GET per read block would multiply the requests by
sample ÷ block and measure HTTP round trips, not a loader. Every block read is timed as the directory
loader times each preadv: the first one of a sample includes the request's round trip (time to first
byte), so `read_latency_us_*` compare like for like. The GETs are the compiled client's (core.s3mover: Go with
minio-go, started by each accelerator before its clock, one connection per read thread; `store.read_spans`):
each read thread hands it a batch and gets back the bytes received and every block read's time, so no sample
becomes a Python object and no request goes through boto3, and the accelerator's client CPU is its own and its
client's. Chosen by measurement (issue 58): boto3 moved 0.24-0.86 x what a minio-go client did on the same
gateway, at 1.9-7.7 x its CPU per GB.

Page cache: the gateway's objects are plain files, so a cold cache drops (or fadvises) them; under
`dataset_sizing: memory_cap` the client evicts each sample's backing file after its batch's GETs (fadvise
DONTNEED; a memory cap on the gateway's cgroup would cap its own heap too). An external store's cache
is its own: the row says it is not controlled.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...core.cache import fadvise_dontneed
from ...core.causes import one_line
from .loader import Loader

class ObjectLoader(Loader):
    """The Loader's threads and queues, reading samples with GETs (module docstring). The accelerator's own
    store, opened from the target's store handle (core.store.StoreHandle), and its compiled client (one
    connection per read thread) are made here, before the clock; one HEAD opens a connection. Each read thread
    hands its batch to that client and gets back the bytes received and every block read's time: no byte of a
    sample becomes a Python object, and the accelerator holds no read buffer (read_buffers). `evict`: each sample's backing file (the gateway's) leaves the page cache
    after its batch's GETs."""

    @classmethod
    def from_config(cls, cfg: dict, batches: list) -> "ObjectLoader":
        return cls(cfg["files"], batches, cfg["read_threads"], cfg["prefetch"], cfg["block"],
                   {"store": cfg["store"], "sizes": cfg["sizes"], "backing": cfg["backing"] if cfg["evict"] else None})

    def __init__(self, keys: list[str], batches: list, threads: int, prefetch: int, block: int, s3: dict):
        super().__init__(keys, batches, threads, prefetch, block)
        self.s3 = s3
        from ...core.store import StoreHandle, open_store
        self.store = open_store(StoreHandle(**s3["store"]), pool=self.threads)
        self.store.connect(keys[0], self.threads)

    def read_buffers(self, block: int) -> list:
        """None: the compiled client reads every body into its own buffer and drops it."""
        return []

    def read_batch(self, k: int, batch) -> int:
        sizes = self.s3["sizes"]
        spans = [(self.files[f], offset, length, offset == 0 and length == sizes[f]) for f, offset, length in batch]
        got, latencies = self.store.read_spans(spans, self.block)   # a short or long body fails the run
        self.latencies[k].extend(latencies)
        if self.s3["backing"]:   # the gateway's files out of the page cache: later epochs from the device
            fadvise_dontneed([Path(self.s3["backing"]) / key.rsplit("/", 1)[-1] for key, *_ in spans])
        return got

    def helper_cpu_s(self) -> float:
        return self.store.data_path_cpu_seconds()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.store.disconnect()


def gateway_columns(store, cpu_before: float | None, cpu_after: float | None, summary: dict) -> dict:
    """The local gateway's CPU over the run, per GB the loaders read, and with the client's as a share of the
    machine (limits.py: the two share this machine's CPUs)."""
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    gb = summary.get("loader_bytes", 0) / 1e9
    wall, ncpu = summary.get("total_time_s") or 0, os.cpu_count() or 1
    both = (summary.get("client_cpu_s") or 0) + (cpu or 0)
    return {"access": store.access, "gateway_cpu_s": cpu,
            "gateway_cpu_s_per_gb": cpu / gb if cpu is not None and gb > 0 else None,
            "client_gateway_cpu_percent_of_machine":
                100 * both / (wall * ncpu) if cpu_before is not None and wall > 0 else None}


def failed_row(config, reason: str) -> dict:
    """A run an S3 failure ended (or prevented): the row the engine writes as failed."""
    return {"workload": config.workload, "accelerators": config.accelerators, "au_percent": float("nan"),
            "access": "S3", "limited_by": "object store failed", "limited_by_reason": reason}


def store_failure(store) -> str | None:
    """One line when the run failed because the local gateway died; None otherwise (not a store failure)."""
    from ...core.s3gateway import GatewayDied
    try:
        store.check()
    except GatewayDied as exc:
        return one_line(str(exc))
    return None


def sizing(data: dict, evict: bool) -> str:
    """The dataset_sizing of an S3 run."""
    if data["backing"] is None:
        return "remote store: page cache not controlled"
    return ("memory_cap->fadvise_evict of the gateway's files (S3)" if evict else
            "gateway's files: cold cache per run, not capped")
