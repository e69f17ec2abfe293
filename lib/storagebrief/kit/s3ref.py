"""The compiled reference S3 client (benchmarks/s3ref: Go with minio-go, built by `make s3ref`), one batch at a time.

A Python S3 client spends 15-30 CPU-seconds per GB at 64 KiB where a compiled one spends 2-8 (measured on the
local gateway, issue 45), so an object point can be the client's figure rather than the store's. Run beside the
study's own client on the same keys, the reference client's MB/s says what the store gave a client that is not the
limit. Shared by the object sweep (its `reference_client` knob) and benchmarks/object_clients.py.

Protocol (benchmarks/s3ref/main.go): keys on stdin, one per line, then a blank line; credentials in the
environment only (never argv); it prints 'ready' once its client and PUT body are made, waits for 'go', moves the
batch and prints one JSON line (objects, bytes_moved, wall_seconds, client_cpu_seconds) or {"error": ...}.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

from ..core.causes import EnvironmentFailure, untrusted
from ..core.procs import Scope

REPO = Path(__file__).resolve().parents[3]
BINARY = REPO / ".tools" / "bin" / "s3ref"


class ReferenceFailed(EnvironmentFailure):
    """The reference client did not start, died, or its batch failed (its own words): one line, never 'a bug'."""


def missing() -> str | None:
    """Why the reference client cannot run here, or None when it can."""
    if not BINARY.is_file() or not os.access(BINARY, os.X_OK):
        return f"the reference S3 client {BINARY} is not built: run `make s3ref` (Go, minio-go)"
    return None


def _ended(proc: subprocess.Popen) -> str:
    """How the reference client ended, in words: 'killed by signal 9 (SIGKILL)' or 'exited (status N)'."""
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-code} ({name}) (from outside the run, or the OOM killer)"
    return f"exited (status {code})"


def _line(proc: subprocess.Popen, timeout_s: float, what: str) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise ReferenceFailed(f"the reference client gave no {what} within {timeout_s:g} s")
    line = proc.stdout.readline()
    if not line:
        raise ReferenceFailed(f"the reference S3 client {BINARY} (pid {proc.pid}) {_ended(proc)} before its {what}")
    return line.strip()


class Batch:
    """One started reference client, ready before the clock: go() then result()."""

    def __init__(self, handle, op: str, size: int, concurrency: int, keys: list[str], scope: Scope,
                 ready_s: float = 60.0):
        why = missing()
        if why:
            raise ReferenceFailed(why)
        bare, secrets = handle.without_secrets()      # the store's handle (core.store): credentials in env only
        reach = bare.s3
        env = {**os.environ, **secrets}
        self.proc = scope.popen([str(BINARY), "-endpoint", reach["endpoint"], "-bucket", reach["bucket"],
                                 "-region", reach["region"], "-op", op,
                                 "-size", str(size), "-concurrency", str(concurrency)], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._send("\n".join(keys) + "\n\n", "its keys")
        got = _line(self.proc, ready_s, "'ready'")
        if got != "ready":
            raise ReferenceFailed(f"the reference client did not start: {untrusted(got, 300)}")

    def _send(self, text: str, what: str) -> None:
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ReferenceFailed(f"the reference S3 client {BINARY} (pid {self.proc.pid}) {_ended(self.proc)} "
                                  f"before it was sent {what}") from None

    def go(self) -> None:
        self.t0 = time.monotonic()
        self._send("go\n", "'go'")

    def result(self, timeout_s: float) -> dict:
        """Its batch: objects, bytes_moved, wall_seconds, client_cpu_seconds, plus MB/s and CPU s per GB."""
        line = _line(self.proc, timeout_s, "result (mid-batch)")
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise ReferenceFailed(f"the reference client printed {untrusted(line, 120)!r} where its batch's JSON "
                                  "result belongs")
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)
        if "error" in row:
            raise ReferenceFailed(f"the reference client's batch failed: {untrusted(row['error'], 300)}")
        gb = row["bytes_moved"] / 1e9
        return {**row, "mb_per_s": row["bytes_moved"] / row["wall_seconds"] / 1e6 if row["wall_seconds"] else None,
                "cpu_s_per_gb": row["client_cpu_seconds"] / gb if gb else None}
