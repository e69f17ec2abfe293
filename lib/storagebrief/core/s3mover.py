"""The compiled S3 data path of a worker process: the s3worker binary (studies/object_sweep/s3worker: Go with
minio-go v7.4.1, `make s3worker`) started with op "serve" (its serve.go), which makes every GET of a worker's S3
store (`MovedBytes`, the data-path half of core.s3store.S3Calls: read_spans, and the uploads of
make_body / upload) and hands back counts and timings, never the bytes: data a study only
counts never becomes a Python object, no request goes through boto3, and the bytes counted are the bytes the
client received. Chosen by measurement (issue 58): beside a Go minio-go client on the same gateway, the object
sweep's boto3 worker moved 0.24-0.86 x as much at 1.9-7.7 x its CPU per GB.

One `Mover` per worker process (its connections: `concurrency`), started by the worker before its clock and
stopped with it: in the worker's own cgroup (a child stays where its parent is), marked as ours (core.procs.Scope:
the leftovers sweep finds it after a kill -9 of the run) and dying with the worker (PR_SET_PDEATHSIG; start it
from the worker's main thread: the signal follows the thread that forked). Its configuration, the store's
handle without credentials, is the first line on its stdin; the credentials go in its environment only. Any
number of the worker's threads may have a command in flight at once: each is answered by id. Its CPU (user +
system, /proc/<pid>/stat) is the worker's client CPU as much as the worker's own threads' (`cpu_seconds`).
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import threading
from dataclasses import asdict
from pathlib import Path

from .causes import one_line
from .pidstat import cpu_seconds_of
from .procs import Scope
from .storebase import StoreHandle

REPO = Path(__file__).resolve().parents[3]
BINARY_ENV = "STORAGEBRIEF_S3WORKER"     # that file and no other (as STORAGEBRIEF_VERSITYGW for the gateway)
READY_S = 30.0                           # its client made and 'ready' said


def binary() -> Path:
    """$STORAGEBRIEF_S3WORKER when set, else the project's .tools/bin/s3worker (`make s3worker`)."""
    return Path(os.environ.get(BINARY_ENV) or REPO / ".tools" / "bin" / "s3worker")


def missing() -> str | None:
    """Why the compiled client cannot run here, or None when it can."""
    b = binary()
    if not b.is_file() or not os.access(b, os.X_OK):
        return f"the compiled S3 client (the object sweep's, emulate's) {b} is not built: run `make s3worker` (Go, minio-go)"
    return None


class MoverFailed(OSError):
    """The compiled client refused a command or ended: one line, with its own words."""


class Mover:
    """The s3worker in "serve" mode for one worker process (module docstring)."""

    def __init__(self, handle: StoreHandle, concurrency: int):
        if why := missing():
            raise MoverFailed(why)
        bare, secrets = handle.without_secrets()
        self.scope = Scope("s3mover")
        self.proc = self.scope.popen([str(binary())], env={**os.environ, **secrets}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, list] = {}       # id -> [threading.Event, reply]
        self._ready = threading.Event()
        self._over = threading.Event()            # its stdout closed and its end known
        self.ended: str | None = None
        self._stderr: collections.deque = collections.deque(maxlen=20)
        threading.Thread(target=self._replies, daemon=True, name="s3mover-replies").start()
        threading.Thread(target=self._errors, daemon=True, name="s3mover-stderr").start()
        self._write({"op": "serve", "concurrency": max(1, concurrency), "size": 0, "seed": 0, "keys": [],
                     "store": asdict(bare)})
        if not self._ready.wait(READY_S) or self.ended is not None:
            self.close()
            raise MoverFailed(f"the compiled S3 client (pid {self.proc.pid}) did not start: "
                              f"{self.ended or f'no ready within {READY_S:.0f} s'}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _write(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:    # it ended: say how, once its replies' reader has seen the end
            self._over.wait(5)
            raise MoverFailed(f"the compiled S3 client (pid {self.proc.pid}) "
                              f"{self.ended or f'is gone ({one_line(str(exc), 120)})'}") from None

    def _replies(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            event = msg.get("event")
            if event == "ready":
                self._ready.set()
            elif event == "error":               # its configuration refused: it exits
                self.ended = f"refused its configuration: {msg.get('error')}"
            elif event == "reply":
                with self._lock:
                    slot = self._waiting.pop(msg.get("id"), None)
                if slot is not None:
                    slot[1] = msg
                    slot[0].set()
        code = self.proc.wait()
        said = " | ".join(self._stderr)
        how = f"ended (exit status {code})" if code >= 0 else f"was killed ({signal.Signals(-code).name})"
        self.ended = self.ended or how + (f": {one_line(said, 200)}" if said else "")
        self._ready.set()
        self._over.set()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot[0].set()

    def _errors(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line.decode(errors="replace").strip())

    def call(self, cmd: dict) -> dict:
        """One command answered: its reply (MoverFailed with the client's words on an error or its end)."""
        slot = [threading.Event(), None]
        with self._lock:
            if self.ended is not None:
                raise MoverFailed(f"the compiled S3 client (pid {self.proc.pid}) {self.ended}")
            self._next += 1
            ident = self._next
            self._waiting[ident] = slot
        self._write({**cmd, "id": ident})
        slot[0].wait()
        got = slot[1]
        if got is None:
            raise MoverFailed(f"the compiled S3 client (pid {self.proc.pid}) {self.ended}")
        if "error" in got:
            raise MoverFailed(one_line(str(got["error"]), 300))
        return got

    def head(self, key: str) -> int:
        return int(self.call({"cmd": "head", "key": key})["bytes"])

    def read(self, spans, block: int, parallel: int = 1) -> tuple[int, list[float]]:
        """Every (key, offset, length, whole) span one GET, read in `block` reads and dropped, `parallel` at
        once; returns (bytes received, every block read's seconds)."""
        got = self.call({"cmd": "read", "block": int(block), "parallel": int(parallel),
                         "spans": [{"k": k, "o": int(o), "n": int(n), "w": bool(w)} for k, o, n, w in spans]})
        return int(got["bytes"]), got["latencies_s"]

    def make_body(self, nbytes: int, seed: int) -> None:
        """The body uploads send: `nbytes` incompressible bytes, made in the client (before a clock)."""
        self.call({"cmd": "body", "bytes": int(nbytes), "seed": int(seed)})

    def upload(self, key: str, nbytes: int, part_bytes: int, kill_pid: int | None = None) -> dict:
        """One multipart upload of `nbytes` in parts of `part_bytes`, each the body's first bytes; returns
        {"bytes", "parts", "seconds", "part_seconds"}. kill_pid: a test hook's process, SIGKILLed once the first
        part is stored."""
        got = self.call({"cmd": "upload", "key": key, "bytes": int(nbytes), "part": int(part_bytes),
                         "kill_pid": int(kill_pid or 0)})
        return {k: got[k] for k in ("bytes", "parts", "seconds", "part_seconds")}

    def cpu_seconds(self) -> float:
        """Its user + system CPU seconds so far (every thread); 0 once it has ended."""
        return cpu_seconds_of(self.proc.pid) or 0.0

    def close(self) -> None:
        """Ask it to exit, then make sure it has (Scope.kill)."""
        try:
            if self.proc.poll() is None:
                try:
                    self._write({"cmd": "exit"})
                    self.proc.stdin.close()
                except (MoverFailed, OSError):
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self.scope.kill()


class MovedBytes:
    """An S3 store's data path (core.s3store.S3Calls takes it in): every byte through its compiled client, a Mover
    started by `connect` before a clock; the store gives `handle()` (its reach) and `_own(key)` (its run's key)."""
    mover = None

    def connect(self, key: str | None, concurrency: int) -> None:
        """Before a clock: the compiled client started with `concurrency` connections, one opened by a HEAD of
        `key` when one is named (a missing object or a refused credential fails here, before any work)."""
        if self.mover is None:
            self.mover = Mover(self.handle(), concurrency)
        if key is not None:
            self.mover.head(key)

    def read_spans(self, spans, block: int, parallel: int = 1) -> tuple[int, list[float]]:
        """Every (key, offset, length, whole) span one GET (ranged unless whole) through the compiled client,
        its body read in `block` reads and dropped, `parallel` at once: (bytes received, every block read's
        seconds; a span's first includes its round trip). `connect` first."""
        return self._moving().read(spans, block, parallel)

    def make_body(self, nbytes: int, seed: int = 0, make=None) -> None:
        """Before a clock: the body `upload` sends, `nbytes` incompressible bytes made and held by the compiled
        client; nothing in the caller's process (`make` is a directory's: unused, None returned)."""
        self._moving().make_body(nbytes, seed)

    def upload(self, key: str, nbytes: int, part_bytes: int, kill_pid: int | None = None) -> dict:
        """`nbytes` of the compiled client's body as one multipart upload of `part_bytes` parts (as put_parts,
        which sends Python's bytes through boto3: the same dict back); an interrupted upload is aborted.
        kill_pid: a test hook (checkpoint's gateway killed once the first part is stored)."""
        if part_bytes < 5 << 20 and nbytes > part_bytes:
            raise ValueError(f"multipart part size {part_bytes} bytes is below S3's 5 MiB minimum "
                             "(write_block_mib >= 5)")
        return self._moving().upload(self._own(key), nbytes, part_bytes, kill_pid)

    def _moving(self):
        if self.mover is None:
            raise RuntimeError("the data path before connect(): the compiled client is started before the clock")
        return self.mover

    def data_path_cpu_seconds(self) -> float:
        """The compiled client's CPU seconds so far (0 before connect)."""
        return 0.0 if self.mover is None else self.mover.cpu_seconds()

    def disconnect(self) -> None:
        """The compiled client stopped (it also dies with this process)."""
        mover, self.mover = self.mover, None
        if mover is not None:
            mover.close()
