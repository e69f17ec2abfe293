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


