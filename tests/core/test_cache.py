"""core/cache.py: cold cache without root."""
import os
import time

import pandas as pd
import pytest

from storagebrief.core import cache, monitor, results, targets, config
from conftest import needs_drop_caches


def test_fadvise_evicts_without_root(tmp_path):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(8 << 20))
    os.sync()
    assert cache.fadvise_dontneed([tmp_path]) == 1
    assert cache.cold_cache([f], enabled=False).startswith("none")




def _drops() -> int:
    """The kernel's count of drop_caches writes (page cache) since boot."""
    for line in open("/proc/vmstat"):
        if line.startswith("drop_pagecache "):
            return int(line.split()[1])
    pytest.skip("this kernel's /proc/vmstat has no drop_pagecache count")


@pytest.mark.parametrize("how", ["param", "env"])
def test_files_mode_evicts_the_runs_files_and_never_drops_the_machines_cache(tmp_path, monkeypatch, how):
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(4 << 20))
    f.read_bytes()
    assert cache.cached_pages(f) > 0
    if how == "env":
        monkeypatch.setenv(cache.FILES_ENV, "files")
        method, expected = cache.cold_cache([f], True), cache.BY_FILES_ENV
    else:
        monkeypatch.delenv(cache.FILES_ENV, raising=False)
        before = _drops()
        method, expected = cache.cold_cache([f], "files"), cache.BY_FILES_PARAM
        assert _drops() == before
    assert method == expected and cache.cached_pages(f) == 0


def test_a_bad_files_variable_is_one_line_before_any_work(monkeypatch):
    monkeypatch.setenv(cache.FILES_ENV, "yes")
    with pytest.raises(config.ParamsError) as err:
        config.validate({"targets": [{"name": "a", "path": "/nonexistent-sb"}]}, check_targets=False)
    assert str(err.value) == f"{cache.FILES_ENV}='yes': allowed: files (evict only each run's own files), or unset"


def test_run_cold_cache_allows_true_false_files_and_names_them_otherwise():
    data = {"targets": [{"name": "a", "path": "/nonexistent-sb"}]}
    for v in (True, False, "files"):
        assert config.validate({**data, "run": {"cold_cache": v}}, check_targets=False).run.cold_cache == v
    with pytest.raises(config.ParamsError) as err:
        config.validate({**data, "run": {"cold_cache": "file"}}, check_targets=False)
    assert 'run.cold_cache = "file": allowed: true' in str(err.value) and "\n" not in str(err.value)
