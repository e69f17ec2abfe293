"""An ingest job beside a training job: appends real TFRecord frames at a set rate, fsync'ed twice a
second, rolling to a new shard every 256 MiB, as one kit.ranks worker inside the run's (throttled) cgroup that
dies with its parent. Used by train_resnet50 (frames of its dataset) and checkpoint's framework sweep
(BERT-shaped frames). A write that fails (a full target) ends the job early: it reports what it wrote and why."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from .ranks import Forked, Worker


def _append(cfg: dict, rank: int, msg, line) -> dict:
    """Append frames at cfg's rate until the launcher asks to stop; fsync twice a second."""
    path, payload, rate = cfg["path"], cfg["payload"], cfg["rate"]
    written, error = 0, None
    try:
        start = last_sync = time.monotonic()
        shard = 0
        fh = open(f"{path}-{shard:03d}.tfrecord", "wb")
        while not line.stopping():
            due = rate * (time.monotonic() - start) - written
            if due >= len(payload):
                fh.write(payload)
                written += len(payload)
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
    except OSError as exc:
        error = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    return {"written": written, "error": error}


WORKER = Worker("ingest writer", lambda rank, n, cfg: cfg, _append)


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
        self.launch = Forked(WORKER, [0], {"path": str(directory / "ingest"), "payload": payload, "rate": self.rate},
                             procs_files=procs_files)
        self.t0 = 0.0
        self.running, self.result, self.error = False, None, None

    def start(self) -> None:
        self.launch.__enter__()
        try:
            self.t0 = self.launch.begin()
        except BaseException as exc:
            self.launch.__exit__(type(exc), exc, None)
            raise
        self.running = True

    def kill(self) -> None:
        """End the writer at once, whatever it was doing (a failed run's cleanup); its folder stays for the caller."""
        if self.running:
            self.running = False
            self.launch.__exit__(RuntimeError, RuntimeError("ingest writer killed"), None)

    def stop(self) -> dict:
        """What it wrote (ingest_bytes, ingest_mb_per_s); its folder removed. Safe to call again (a cleanup path)."""
        if self.running:
            self.running = False
            self.launch.ask_stop()
            try:
                _, done = self.launch.end(timeout_s=30)
            except BaseException as exc:
                self.launch.__exit__(type(exc), exc, None)
                raise
            self.launch.__exit__(None, None, None)
            elapsed = max(time.monotonic() - self.t0, 1e-9)
            written, self.error = done[0].result["written"], done[0].result["error"]
            self.result = {"ingest_bytes": int(written), "ingest_mb_per_s": written / elapsed / 1e6}
        shutil.rmtree(self.directory, ignore_errors=True)
        return self.result or {"ingest_bytes": 0, "ingest_mb_per_s": 0.0}
