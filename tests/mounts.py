"""A filesystem mounted for a test (root): a tmpfs of a given size, a ramfs or a read-only bind, the environment's
faults injected for real (issue 20). Root-only cases skip with the reason elsewhere. Shared by the tests of
result files (core/results.py) and of targets (core/targets.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounting a small or read-only filesystem needs root")


@pytest.fixture
def mount(tmp_path):
    """mount(kind, options) -> a folder: tmpfs of a given size, or a read-only bind of a folder."""
    made = []

    def make(name: str, *args: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", *args, str(where)], check=True)
        made.append(where)
        return where
    yield make
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], check=False)
