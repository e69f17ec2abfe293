"""An ingest job beside a training job: appends real TFRecord frames at a set rate, fsync'ed twice a
second, rolling to a new shard every 256 MiB, in a forked child inside the run's (throttled) cgroup
that dies with its parent. Used by train_resnet50 (frames of its dataset) and checkpoint's framework
sweep (BERT-shaped frames)."""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import time
from pathlib import Path

from ..core import cgroups
from ..core.procs import die_with_parent


def _ingest_loop(path: str, payload: bytes, rate: float, stop, counter, procs_files: list[str]) -> None:
    """Append TFRecord frames at `rate` bytes/s, fsync twice a second (runs in a forked child)."""
    die_with_parent()
    try:
        if procs_files:
            cgroups.join(procs_files)
        start = last_sync = time.monotonic()
        written = 0
        shard = 0
        fh = open(f"{path}-{shard:03d}.tfrecord", "wb")
        while not stop.is_set():
            due = rate * (time.monotonic() - start) - written
            if due >= len(payload):
                fh.write(payload)
                written += len(payload)
                counter.value = written
                if fh.tell() > (256 << 20):   # roll files like an ingest job writing shards
                    fh.close()
                    shard += 1
                    fh = open(f"{path}-{shard:03d}.tfrecord", "wb")
            else:
                time.sleep(min(0.05, (len(payload) - due) / rate))
            if time.monotonic() - last_sync >= 0.5:
                fh.flush()
                os.fsync(fh.fileno())
                last_sync = time.monotonic()
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
    except BaseException:
        os._exit(1)


class IngestWriter:
    group = None    # the writer's throttled cgroup, if the target has an emulated profile

    def __init__(self, directory: Path, source_files: list[str], mb_per_s: float, procs_files: list[str],
                 payload: bytes | None = None):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        if payload is None:
            # Real records: the first frames of the dataset, read before the measured phase.
            with open(source_files[0], "rb") as fh:
                payload = fh.read(4 << 20)
        self.payload = payload
        self.rate = mb_per_s * 1e6
        ctx = mp.get_context("fork")
        self.stop_event = ctx.Event()
        self.counter = ctx.Value("q", 0)
        self.proc = ctx.Process(target=_ingest_loop, daemon=True,
                                args=(str(directory / "ingest"), self.payload, self.rate, self.stop_event,
                                      self.counter, procs_files))
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.proc.start()

    def stop(self) -> dict:
        self.stop_event.set()
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        out = {"ingest_bytes": int(self.counter.value), "ingest_mb_per_s": self.counter.value / elapsed / 1e6}
        shutil.rmtree(self.directory, ignore_errors=True)
        return out
