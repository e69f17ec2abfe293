"""This user's private runtime folder: where registries and locks live that must not sit in a folder
other users can write (/dev/shm, /tmp).

Candidates, first usable wins: `$XDG_RUNTIME_DIR/storagebrief` (when $XDG_RUNTIME_DIR is a folder of ours),
`/dev/shm/storagebrief-<uid>` (memory: gone at reboot, like the processes its entries name), and
`~/.cache/storagebrief/runtime`. Each is created with os.mkdir(0o700) and then judged by lstat: a real
directory (not a symlink), owned by this effective user, no group or other permission bits. A name that is
squatted (made by another user, a symlink, a file) or has loose modes is never used nor repaired: the next
candidate is taken and `skipped()` says why, for the log and doctor. The leftovers sweep reads every candidate
that passes the same test (`usable()`), so an entry written while the first was squatted is still found.

Files inside are made with mkstemp or O_CREAT|O_EXCL|O_NOFOLLOW and read with O_NOFOLLOW, owner checked
(`open_own`): the folder is ours, the check is the second net.

A process that used the folder removes it at exit when it is empty (`remove_if_empty`), so runs leave no empty
`/dev/shm/storagebrief-<uid>` behind. Users hold a shared flock on the folder from `path()` until they exit; the
removal takes it exclusively without waiting (any other user of it keeps it) and a `path()` that finds its folder
removed meanwhile makes it again: nobody writes into a folder that is being removed.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import stat
from pathlib import Path

from .causes import EnvironmentFailure

NAME = "storagebrief"
SHM = Path("/dev/shm")


class RuntimeDirError(EnvironmentFailure):
    """No private folder could be made (every candidate squatted or unwritable): one line naming them."""


def candidates() -> list[Path]:
    out = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and why_not(Path(xdg)) is None:
        out.append(Path(xdg) / NAME)
    out.append(SHM / f"{NAME}-{os.geteuid()}")
    try:
        out.append(Path.home() / ".cache" / NAME / "runtime")
    except RuntimeError:          # no home (no $HOME, no passwd entry)
        pass
    return out


def why_not(path: Path) -> str | None:
    """None when `path` is a private folder of ours; else why it is not (one phrase)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):o} (others may write or read it; 700 expected)"
    return None


_skipped: list[str] = []


def skipped() -> list[str]:
    """Why candidates before the folder in use were passed over (empty when the first one was used)."""
    return list(_skipped)


_held: dict[Path, tuple[int, int]] = {}     # folder -> (fd holding a shared flock on it, the PID that opened it)


def path() -> Path:
    """The folder (created when missing), held (a shared flock) until this process exits, when it is removed if
    empty; RuntimeDirError when no candidate is private."""
    for _ in range(100):
        found = _find()
        if _hold(found):
            return found
    raise RuntimeDirError(f"the runtime folder {found} keeps being removed while it is opened; try again")


def _hold(folder: Path) -> bool:
    """A shared flock on `folder` (kept until exit); False when it was removed (or replaced) before we held it."""
    if folder in _held and _held[folder][1] == os.getpid():
        return True
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    fcntl.flock(fd, fcntl.LOCK_SH)          # waits out a removal in progress
    held, now = os.fstat(fd), _lstat(folder)
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return False
    if not _held:
        atexit.register(_release_all)
    _held[folder] = (fd, os.getpid())
    return True


def _lstat(folder: Path):
    try:
        return os.lstat(folder)
    except OSError:
        return None


def remove_if_empty(folder: Path, fd: int | None = None) -> bool:
    """Remove the runtime folder when it is empty and no process holds it (an exclusive flock, not waited for).
    `fd`: our own open fd on it (its shared flock is given up first). True when it was removed."""
    if fd is None:
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if why_not(Path(folder)) is not None or os.listdir(fd):
            return False
        os.rmdir(folder)
        return True
    except OSError:                  # held by another process, or not empty after all
        return False
    finally:
        os.close(fd)


def _release_all() -> None:
    for folder, (fd, pid) in list(_held.items()):
        del _held[folder]
        if pid == os.getpid():       # a forked child shares the flock: only the process that took it removes
            remove_if_empty(folder, fd)


def _find() -> Path:
    _skipped.clear()
    for cand in candidates():
        if why_not(cand) == "missing":
            try:
                cand.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.mkdir(cand, 0o700)
            except FileExistsError:
                pass          # someone made it between the check and now: judged below like any other
            except OSError as exc:
                _skipped.append(f"{cand} cannot be created ({exc.strerror})")
                continue
        reason = why_not(cand)
        if reason is None:
            return cand
        _skipped.append(f"{cand} {reason}: not used")
    raise RuntimeDirError("no private runtime folder for storagebrief's registries and locks: "
                          + "; ".join(_skipped))


def usable() -> list[Path]:
    """Every candidate that exists and is private (the sweep reads them all)."""
    return [c for c in candidates() if why_not(c) is None]


def open_own(file: Path, flags: int = os.O_RDONLY) -> int | None:
    """An fd on `file` when it is a regular file of this user, opened without following a symlink; else None."""
    try:
        fd = os.open(file, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        return None
    return fd
