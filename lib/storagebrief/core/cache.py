"""Cold cache before a measured run; the method used is recorded with the run.

As root: sync + `echo 3 > /proc/sys/vm/drop_caches` (whole system). Otherwise:
sync + posix_fadvise(POSIX_FADV_DONTNEED) on every file the run will read,
which evicts their clean pages without privileges.
"""
from __future__ import annotations

import os
from pathlib import Path

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


def drop_caches_possible() -> tuple[bool, str]:
    if not DROP_CACHES.exists():
        return False, f"{DROP_CACHES} does not exist"
    if not os.access(DROP_CACHES, os.W_OK):
        return False, "writing /proc/sys/vm/drop_caches needs root"
    return True, "root: drop_caches"


def cold_cache(paths, enabled: bool = True) -> str:
    """Make the next reads of `paths` come from the device; return the method used."""
    if not enabled:
        return "none (run.cold_cache is false)"
    os.sync()
    ok, _ = drop_caches_possible()
    if ok:
        try:
            DROP_CACHES.write_text("3")
            return "drop_caches"
        except OSError:
            pass
    fadvise_dontneed(paths)
    return "fadvise_dontneed"
