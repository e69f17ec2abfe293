"""The ratio's page-cache cap: dataset pages only, least recently read first, open files' unread part kept."""
from __future__ import annotations

import mmap
import os
import time

import pytest

from storagebrief.core import cache
from storagebrief.studies.train_resnet50.cachecap import DatasetCacheCap

MIB = 1 << 20

# every test here reads what the page cache holds of its files: no study run in the suite drops the machine's page
# cache (conftest: each evicts its own files), so they run beside the others


def _files(tmp_path, n: int, size: int) -> list[str]:
    out = []
    for i in range(n):
        f = tmp_path / f"shard-{i}.tfrecord"
        f.write_bytes(os.urandom(size))
        out.append(str(f))
    os.sync()
    cache.fadvise_dontneed(out)
    return out


def _read(f: str, n: int | None = None) -> None:
    with open(f, "rb") as fh:
        fh.read(n if n is not None else -1)


def _cached(f: str) -> int:
    return int(cache.resident_pages(f).sum()) * mmap.PAGESIZE


def test_resident_pages_sees_reads_and_evictions(tmp_path):
    (f,) = _files(tmp_path, 1, 4 * MIB)
    assert _cached(f) == 0
    _read(f, 2 * MIB)
    assert 2 * MIB <= _cached(f) <= 4 * MIB        # what was read, and what readahead brought
    cache.evict_head(f, MIB)
    assert not cache.resident_pages(f)[: MIB // mmap.PAGESIZE].any()


def test_cap_evicts_the_oldest_read_files_first_and_holds_the_cap(tmp_path):
    files = _files(tmp_path, 4, 2 * MIB)
    cap = DatasetCacheCap(files, 3 * MIB, 8 * MIB)
    for f in files:          # read one after the other: files[0] is the least recently read
        _read(f)
        cap.poll([])
        time.sleep(0.01)
    assert cap.cached_bytes() <= 3 * MIB + cap.slack
    assert sum(_cached(f) for f in files) <= 3 * MIB + cap.slack      # the kernel agrees
    assert _cached(files[0]) == 0 and _cached(files[-1]) == 2 * MIB   # oldest out, newest kept
    assert cap.evictions >= 1 and cap.evicted_bytes >= 4 * MIB


def test_an_open_file_keeps_what_its_reader_has_not_passed(tmp_path):
    files = _files(tmp_path, 2, 4 * MIB)
    _read(files[0])
    cap = DatasetCacheCap(files, MIB, 8 * MIB)
    with open(files[1], "rb") as fh:
        fh.read(2 * MIB)
        os.posix_fadvise(fh.fileno(), 2 * MIB, 2 * MIB, os.POSIX_FADV_WILLNEED)   # readahead ahead of it
        deadline = time.monotonic() + 10         # a slow disk: wait until the readahead has landed
        while not cache.resident_pages(files[1])[2 * MIB // mmap.PAGESIZE:].all() and time.monotonic() < deadline:
            time.sleep(0.05)
        cap.poll([os.getpid()])
        ahead = cache.resident_pages(files[1])[2 * MIB // mmap.PAGESIZE:]
        assert ahead.all()                  # pages ahead of the reader stay
        assert _cached(files[0]) == 0       # the closed file went first
        assert not cache.resident_pages(files[1])[: 2 * MIB // mmap.PAGESIZE].any()   # then what it passed


def test_nothing_but_dataset_files_is_evicted(tmp_path):
    files = _files(tmp_path, 2, 2 * MIB)
    other = tmp_path / "code.so"
    other.write_bytes(os.urandom(2 * MIB))
    _read(str(other))
    for f in files:
        _read(f)
    DatasetCacheCap(files, 0, 4 * MIB).poll([])
    assert sum(_cached(f) for f in files) == 0 and _cached(str(other)) == 2 * MIB


def test_cached_pages_by_cachestat_and_by_mincore_agree(tmp_path, monkeypatch):
    # The whole file is read and its head dropped, so no readahead is still in flight: cachestat counts
    # a page being read, mincore only an up-to-date one (CI once saw 1024 against 770 mid-readahead).
    (f,) = _files(tmp_path, 1, 4 * MIB)
    _read(f)
    cache.evict_head(f, MIB)
    by_syscall = cache.cached_pages(f)
    monkeypatch.setattr(cache, "_cachestat_works", False)       # a kernel before 6.5
    assert cache.cached_pages(f) == by_syscall == int(cache.resident_pages(f).sum()) == 3 * MIB // mmap.PAGESIZE
