"""Cold cache before a measured run; the method used is recorded with the run.

As root: sync + `echo 3 > /proc/sys/vm/drop_caches` (whole system). Otherwise:
sync + posix_fadvise(POSIX_FADV_DONTNEED) on every file the run will read,
which evicts their clean pages without privileges.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def _files(paths) -> list[Path]:
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out += [f for f in p.rglob("*") if f.is_file()]
        elif p.is_file():
            out.append(p)
    return out


def fadvise_dontneed(paths) -> int:
    """Evict the page cache of these files/directories; returns files advised."""
    count = 0
    for f in _files(paths):
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.syscall.restype = ctypes.c_long
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path) -> np.ndarray:
    """Which pages of a file are in the page cache now (mincore; reads nothing, needs no privilege)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return np.zeros(0, dtype=bool)
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vec = np.zeros((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE, dtype=np.uint8)
            if _libc.mincore(addr, size, vec.ctypes.data) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return (vec & 1).astype(bool)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted",
                                                "nr_recently_evicted")]


# cachestat(2), Linux >= 6.5: one syscall per file instead of mmap + mincore + munmap (1.4 ms for four
# 17 MB files here vs 0.1 ms); its number is the generic table's on both architectures we know.
_CACHESTAT_NR = {"x86_64": 451, "aarch64": 451}.get(os.uname().machine)
_cachestat_works = _CACHESTAT_NR is not None


def cached_pages(path) -> int:
    """How many pages of a file are in the page cache now (cachestat where the kernel has it, else mincore)."""
    global _cachestat_works
    if _cachestat_works:
        fd = os.open(path, os.O_RDONLY)
        try:
            rng, st = _Range(0, 0), _Stat()
            if _libc.syscall(_CACHESTAT_NR, fd, ctypes.byref(rng), ctypes.byref(st), 0) == 0:
                return int(st.nr_cache)
        finally:
            os.close(fd)
        _cachestat_works = False          # ENOSYS (older kernel): mincore from now on
    return int(resident_pages(path).sum())


def evict_head(path, length: int) -> None:
    """Evict a file's clean cached pages in [0, length) (0: the whole file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_caches_possible() -> tuple[bool, str]:
    if not DROP_CACHES.exists():
        return False, f"{DROP_CACHES} does not exist"
    if not os.access(DROP_CACHES, os.W_OK):
        return False, "writing /proc/sys/vm/drop_caches needs root"
    return True, "root: drop_caches"


# run.cold_cache: files, or this variable set to `files` where params say true: evict only the run's own files
# (fio's invalidate=1), never the whole machine's page cache. For a machine others use while a study runs (a CI
# runner, a test suite on a shared host): a drop_caches empties their caches too and slows their next reads.
FILES_ENV = "STORAGEBRIEF_COLD_CACHE"
BY_FILES_PARAM = "fadvise_dontneed (run.cold_cache: files)"
BY_FILES_ENV = f"fadvise_dontneed ({FILES_ENV}=files)"


def files_env_error() -> str | None:
    """One line when the variable holds anything but `files` (or is empty or unset)."""
    value = os.environ.get(FILES_ENV, "")
    if value in ("", "files"):
        return None
    return f"{FILES_ENV}={value[:40]!r}: allowed: files (evict only each run's own files), or unset"


def cold_cache(paths, enabled: bool | str = True) -> str:
    """Make the next reads of `paths` come from the device; return the method used. `enabled`: run.cold_cache
    (true: drop_caches as root, else fadvise of `paths`; "files": fadvise of `paths` only; false: nothing)."""
    if not enabled:
        return "none (run.cold_cache is false)"
    os.sync()
    if enabled == "files" or os.environ.get(FILES_ENV) == "files":
        fadvise_dontneed(paths)
        return BY_FILES_PARAM if enabled == "files" else BY_FILES_ENV
    ok, _ = drop_caches_possible()
    if ok:
        try:
            DROP_CACHES.write_text("3")
            return "drop_caches"
        except OSError:
            pass
    fadvise_dontneed(paths)
    return "fadvise_dontneed"
