"""One run per target, and one writer per output folder, at a time: an advisory lock (flock) held for
the whole run.

The lock file is <target>/.storagebrief.lock; it names its holder (PID, command, start
time) so a second run can say who it waits for. The kernel drops a flock when its holder
dies, kill -9 included, so a crashed run never leaves a target locked; the file itself
stays (deleting lock files races with the next run). An output folder's lock lies beside it,
`.<folder>.storagebrief.lock` in its parent (where its `.incomplete-`/`.previous-` siblings go too):
the folder itself is swapped whole when a study completes, a lock inside would move with it.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

LOCK_NAME = ".storagebrief.lock"


class TargetBusy(RuntimeError):
    """Another run holds the target and run.on_busy_target is 'refuse'."""


class FolderBusy(TargetBusy):
    """Another run writes the output folder and run.on_busy_target is 'refuse'."""


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return "another storagebrief run"
    return f"PID {info.get('pid', '?')} ({info.get('command', '?')}, since {info.get('since', '?')})"


def lock_file(path: Path, what: str, on_busy: str, log, busy=TargetBusy) -> int:
    """An exclusive flock on `path` (created if missing), naming this process as its holder; when held
    elsewhere: wait (saying for whom) or raise `busy` naming the holder. Returns the open fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            if on_busy == "refuse":
                raise busy(f"{what} is in use by {who}; wait for it, or set run.on_busy_target=wait to queue "
                           "behind it") from None
            log(f"{what} is in use by {who}: waiting for it to finish (run.on_busy_target=wait; Ctrl-C to give up)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        me = {"pid": os.getpid(), "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])[:300],
              "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def folder_lock_path(folder: Path) -> Path:
    folder = Path(folder)
    return folder.with_name(f".{folder.name}{LOCK_NAME}")


class FolderLock:
    """One writer per output folder: its lock file beside it, held from the ownership check to the end."""

    def __init__(self, folder: Path, on_busy: str = "wait", log=print):
        self.folder, self.on_busy, self.log = Path(folder), on_busy, log
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        if self.fd is None:
            self.fd = lock_file(folder_lock_path(self.folder), f"output folder '{self.folder}'", self.on_busy,
                                self.log, FolderBusy)
        return self

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


class TargetLocks:
    """Exclusive locks on a set of target directories, taken in path order (no deadlock between
    two runs that share several targets) and released together."""

    def __init__(self, targets, on_busy: str = "wait", log=print):
        self.targets = sorted(targets, key=lambda t: str(t.path))
        self.on_busy, self.log = on_busy, log
        self.fds: dict[str, int] = {}

    def acquire(self) -> "TargetLocks":
        try:
            for t in self.targets:
                key = os.path.realpath(t.path)
                if key not in self.fds:
                    self.fds[key] = self._lock(t)
        except BaseException:
            self.release()
            raise
        return self

    def _lock(self, t) -> int:
        return lock_file(Path(t.path) / LOCK_NAME, f"target '{t.name}' ({t.path})", self.on_busy, self.log)

    def keep_only(self, targets) -> None:
        """Release the targets a study turned out not to use."""
        keep = {os.path.realpath(t.path) for t in targets}
        for key in [k for k in self.fds if k not in keep]:
            os.close(self.fds.pop(key))

    def release(self) -> None:
        for fd in self.fds.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self.fds.clear()

    def __enter__(self) -> "TargetLocks":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
