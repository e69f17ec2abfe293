"""Another local user plants files where a run looks (issue 44, defect 1: nothing another user wrote steers a
run). Shared by the tests of the gateway registry, the runtime folder, the locks, the leftovers sweep and the
output folder.

Every forged file is planted by another uid (65534, "nobody": a child that setuid()s to it, or a file
chown()ed to it), as the probe did; those tests need root and are skipped otherwise. The folders
stand in for /tmp and /dev/shm: world-writable and sticky, made for the test.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest


NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a file as another uid (65534) needs root")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _plant(fn) -> None:
    """Run fn() in a child that is uid 65534 (another local user)."""
    pid = os.fork()
    if pid == 0:
        try:
            _as_nobody()
            fn()
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0, "the planting child failed"


@pytest.fixture
def shared():
    """A folder like /tmp: mode 1777, every user may create names in it."""
    d = Path(tempfile.mkdtemp(prefix="sb-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def precious(tmp_path):
    """A user's folder inside a mode-700 directory, and a root-owned file: what a forged entry points at."""
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    (vault / "precious").mkdir()
    (vault / "precious" / "keep.txt").write_text("mine")
    victim = vault / "victim.conf"
    victim.write_text("root's own file\n")
    return vault


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait()


@contextmanager
def nobodys_runtime_folder():
    """Around a test that runs storagebrief as uid 65534: /dev/shm/storagebrief-65534 (its runtime folder), when the
    test made it, is removed afterwards if empty (core.runtime_dir.remove_if_empty: never one another run holds)."""
    from storagebrief.core import runtime_dir
    folder = runtime_dir.SHM / f"{runtime_dir.NAME}-{NOBODY}"
    existed = os.path.lexists(folder)
    try:
        yield folder
    finally:
        if not existed:
            runtime_dir.remove_if_empty(folder)
