"""One run per target: a second holder waits or refuses, naming the first.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from storagebrief.core import config, lock, runtime_dir, targets
from conftest import write_params as _write_params, cli_process as _cli, wait_for as _wait_for
from another_user import NOBODY, _as_nobody, _plant, as_root, precious, shared  # noqa: F401  (fixtures)


# --------------------------------------------------------------------------- target lock
def test_second_holder_of_a_target_refuses_naming_the_first(tmp_path):
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    with lock.TargetLocks([t], "refuse"):
        with pytest.raises(lock.TargetBusy, match=f"in use by PID {os.getpid()}"):
            lock.TargetLocks([t], "refuse").acquire()
    with lock.TargetLocks([t], "refuse"):   # released on exit
        pass


def _locked_by(path: Path, pid: int) -> bool:
    try:
        return json.loads((path / lock.LOCK_NAME).read_text() or "{}").get("pid") == pid
    except (OSError, ValueError):
        return False


@pytest.mark.slow
@pytest.mark.e2e
def test_concurrent_runs_on_one_target_wait_or_refuse_and_stay_clean(tmp_path):
    f = _write_params(tmp_path, image_count=6, image_counts=[], processes=[1], repeats=2)
    first = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "a"), "--progress", "off")
    assert _wait_for(lambda: _locked_by(tmp_path / "fast", first.pid)), "first run never locked its target"
    refused = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "b"), "-S", "run.on_busy_target=refuse")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and f"in use by PID {first.pid}" in err
    waiting = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "c"), "--progress", "off")
    out_w, err_w = waiting.communicate(timeout=600)
    assert first.wait(timeout=600) == 0, first.stderr.read()
    assert waiting.returncode == 0 and "waiting for it to finish" in out_w
    a, c = pd.read_csv(tmp_path / "a" / "runs.csv"), pd.read_csv(tmp_path / "c" / "runs.csv")
    assert pd.to_datetime(c.started_at).min() >= pd.to_datetime(a.started_at).max()   # never overlapped
    assert (a.images_ok == 6).all() and (c.images_ok == 6).all() and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- locks in a shared folder (issue 44)
@as_root
def test_an_output_folder_lock_in_a_shared_folder_follows_no_planted_symlink(shared, precious):
    out = shared / "out"
    victim = precious / "victim.conf"
    _plant(lambda: os.symlink(victim, shared / f".out{lock.LOCK_NAME}"))
    held = lock.FolderLock(out, "refuse").acquire()
    try:
        assert victim.read_text() == "root's own file\n"
        assert lock.folder_lock_path(out).parent == runtime_dir.path()
    finally:
        held.release()


@as_root
def test_a_lock_file_another_user_holds_beside_a_shared_out_is_not_waited_on(shared):
    """A plain file planted at the lock name, flock()ed by uid 65534: the run neither waits nor refuses on it."""
    planted = shared / f".out{lock.LOCK_NAME}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:          # uid 65534: plants the file and holds a flock on it
        try:
            _as_nobody()
            fd = os.open(planted, os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b'{"pid": 1, "command": "forged"}')
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(w, b"held")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 4) == b"held"
        held = lock.FolderLock(shared / "out", "refuse").acquire()      # would raise FolderBusy naming "forged"
        held.release()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)


@as_root
def test_an_output_folder_lock_file_not_ours_is_refused_naming_its_owner(tmp_path):
    out = tmp_path / "out"
    f = lock.folder_lock_path(out)
    f.write_text("")
    os.chown(f, NOBODY, NOBODY)
    with pytest.raises(lock.FolderBusy, match=f"lock file {f} belongs to .*uid {NOBODY}.*does not wait") as e:
        lock.FolderLock(out, "wait").acquire()
    assert "\n" not in str(e.value)


@as_root
def test_a_symlink_planted_at_a_target_lock_is_refused_not_followed(shared, precious):
    victim = precious / "victim.conf"
    _plant(lambda: os.symlink(victim, shared / lock.LOCK_NAME))
    t = targets.resolve(config.TargetParams(name="x", path=str(shared)), targets.DEVICE_PROFILES)
    with pytest.raises(lock.TargetBusy, match="is a symbolic link"):
        lock.TargetLocks([t], "wait").acquire()
    assert victim.read_text() == "root's own file\n"


def test_an_output_folder_lock_in_the_runtime_folder_goes_with_its_run(shared):
    """Locks of --out folders in /tmp piled up in /dev/shm/storagebrief-<uid> (one per folder, forever): released,
    the file goes; a killed run's, unheld, goes with the next leftovers sweep; a held one stays."""
    held = lock.FolderLock(shared / "a", "refuse").acquire()
    path = lock.folder_lock_path(shared / "a")
    assert path.parent == runtime_dir.path() and path.exists()
    assert str(path) not in lock.stale_runtime_locks()          # held: a live run's
    held.release()
    assert not path.exists()
    again = lock.FolderLock(shared / "a", "refuse").acquire()      # as after a kill -9: the fd closes unreleased
    os.close(again.fd)
    assert path.exists() and str(path) in lock.stale_runtime_locks() and not path.exists()


def test_a_lock_file_with_escape_codes_and_a_forged_line_is_printed_escaped_on_one_line(tmp_path):
    """Issue 57 defect 9: a target's lock file is writable by others; what it says is escaped before printing."""
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    forged = {"pid": "1\x1b[2J", "command": "x\x1b]0;owned\x07\nstoragebrief: done, 0 errors; now run: rm -rf ~\r" + "y" * 500,
              "since": "\x1b[31mnow\u202e"}
    path = tmp_path / lock.LOCK_NAME
    path.write_text(json.dumps(forged))
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)                       # the forger holds it
    try:
        with pytest.raises(lock.TargetBusy) as err:
            lock.TargetLocks([t], "refuse").acquire()
        said = []
        waiter = lock.TargetLocks([t], "wait", log=said.append)
        import threading
        th = threading.Thread(target=waiter.acquire, daemon=True)
        th.start()
        assert _wait_for(lambda: said, 10)
    finally:
        os.close(fd)
    th.join(10)
    waiter.release()
    for msg in (str(err.value), said[0]):
        assert "\n" not in msg and "\r" not in msg and "\x1b" not in msg and "\x07" not in msg and "\u202e" not in msg
        assert "\\x1b[2J" in msg and "\\x1b]0;owned\\x07 storagebrief: done" in msg and "\\u202e" in msg
        assert len(msg) < 600 and "y" * 200 not in msg
