"""One run per target: a second holder waits or refuses, naming the first.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from storagebrief.core import config, lock, targets
from conftest import write_params as _write_params, cli_process as _cli, wait_for as _wait_for


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


