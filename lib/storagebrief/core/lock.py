"""One run per target, and one writer per output folder, at a time: an advisory lock (flock) held for
the whole run.

The lock file is <target>/.storagebrief.lock; it names its holder (PID, command, start
time) so a second run can say who it waits for. The kernel drops a flock when its holder
dies, kill -9 included, so a crashed run never leaves a target locked; the file itself
stays (deleting lock files races with the next run). An output folder's lock lies beside it,
`.<folder>.storagebrief.lock` in its parent (where its `.incomplete-`/`.previous-` siblings go too):
the folder itself is swapped whole when a study completes, a lock inside would move with it.

Lock files may sit in folders other users can write (issue 44): every lock is opened with O_NOFOLLOW
(a planted symlink is refused, never followed to a file it would truncate) and O_CLOEXEC, created with
O_EXCL, and must be a regular file. When the output folder's parent is writable by others (/tmp, a
group folder) or not ours, its lock lives in this user's private runtime folder instead (core.runtime_dir;
named from the folder's real path), so nobody can plant it; an output-folder lock file that exists and is
not this user's is refused with one line naming it and its owner, never waited on. A target's lock stays
shared between users on purpose (one run per target, whoever runs it) and names the lock file's owner
when it is someone else.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import pwd
import stat
import sys
import time
from pathlib import Path

from . import runtime_dir
from .causes import untrusted

LOCK_NAME = ".storagebrief.lock"


class TargetBusy(RuntimeError):
    """Another run holds the target and run.on_busy_target is 'refuse'."""


class FolderBusy(TargetBusy):
    """Another run writes the output folder and run.on_busy_target is 'refuse'."""


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid, cmd, since = (untrusted(info.get(k, "?"), n) for k, n in (("pid", 12), ("command", 120), ("since", 32)))
        who = f"PID {pid} ({cmd}, since {since})"
    except (OSError, ValueError, AttributeError):
        who = "another storagebrief run"
    uid = os.fstat(fd).st_uid
    return who if uid == os.geteuid() else f"{who}, as its lock file's owner {_user(uid)} says"


def _open_lock(path: Path, what: str, busy, own_only: bool) -> int:
    """The lock file, created (O_EXCL) or opened, never through a symlink; a regular file (of this user when
    own_only), else `busy` with one line."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for _ in range(100):
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644 if own_only else 0o666)
            break
        except FileExistsError:
            pass
        try:
            fd = os.open(path, flags)
            break
        except FileNotFoundError:
            continue                  # removed between the two opens: create it again
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise busy(f"{what}: its lock file {path} is a symbolic link, which storagebrief never follows "
                           "(someone may have planted it); remove it") from None
            raise
    else:
        raise busy(f"{what}: its lock file {path} keeps appearing and vanishing; try again")
    st = os.fstat(fd)
    why = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"belongs to {_user(st.st_uid)}, not to this user" if own_only and st.st_uid != os.geteuid() else None)
    if why:
        os.close(fd)
        raise busy(f"{what}: its lock file {path} {why}; storagebrief does not wait on a lock it did not make: "
                   "remove it (or choose another --out)")
    return fd


def lock_file(path: Path, what: str, on_busy: str, log, busy=TargetBusy, own_only: bool = False) -> int:
    """An exclusive flock on `path` (created if missing), naming this process as its holder; when held
    elsewhere: wait (saying for whom) or raise `busy` naming the holder. own_only: a lock file another user
    made is refused (`busy`), never waited on. Returns the open fd."""
    fd = _open_lock(Path(path), what, busy, own_only)
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


def others_can_write(folder: Path) -> bool:
    """Someone other than this user may create names in `folder` (world- or group-writable, or not ours)."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    return bool(st.st_mode & 0o022) or st.st_uid not in (os.geteuid(), 0)


def folder_lock_path(folder: Path) -> Path:
    """Beside the folder; in this user's runtime folder when the parent is one others can write."""
    folder = Path(folder)
    if others_can_write(folder.parent):
        real = os.path.realpath(folder)
        digest = hashlib.sha256(real.encode()).hexdigest()[:24]
        return runtime_dir.path() / f"out-{digest}{LOCK_NAME}"
    return folder.with_name(f".{folder.name}{LOCK_NAME}")


class FolderLock:
    """One writer per output folder: its lock file beside it, held from the ownership check to the end."""

    def __init__(self, folder: Path, on_busy: str = "wait", log=print):
        self.folder, self.on_busy, self.log = Path(folder), on_busy, log
        self.fd: int | None = None
        self.path = self.folder

    def acquire(self) -> "FolderLock":
        for _ in range(100):
            if self.fd is not None:
                return self
            path = folder_lock_path(self.folder)
            try:
                fd = lock_file(path, f"output folder '{self.folder}'", self.on_busy, self.log, FolderBusy,
                               own_only=True)
            except FileNotFoundError:
                continue                   # the runtime folder went with its last lock: made again next try
            if path.parent == self.folder.parent or _names(fd, path):
                self.fd, self.path = fd, path
            else:
                os.close(fd)               # its last holder removed it before we locked it: take the new one
        raise FolderBusy(f"output folder '{self.folder}': its lock file kept changing; try again")

    def release(self) -> None:
        """Unlocked; a lock in the runtime folder is removed first (nothing of a finished run stays in /dev/shm),
        which a waiter notices by its inode (acquire)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                if self.path.parent != self.folder.parent and _names(fd, self.path):
                    self.path.unlink()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


def _names(fd: int, path: Path) -> bool:
    """`path` still names the file open on `fd`."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def stale_runtime_locks() -> list[str]:
    """Output-folder locks in the runtime folders that no process holds (a run killed with -9 left them):
    removed, each under its own lock, so a waiting run takes a new file."""
    gone = []
    for folder in runtime_dir.usable():
        for path in folder.glob(f"out-*{LOCK_NAME}"):
            fd = runtime_dir.open_own(path, os.O_RDWR)
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _names(fd, path):
                    path.unlink()
                    gone.append(str(path))
            except BlockingIOError:
                pass                       # held: a live run's
            finally:
                os.close(fd)
    return gone


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
