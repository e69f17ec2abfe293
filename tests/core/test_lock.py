"""One run per target: a second holder waits or refuses, naming the first.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest
import yaml

from storagebrief.cli import main as cli_main
from storagebrief.core import cgroups, config, leftovers, lock, results, targets
from storagebrief.report import brief as brief_mod
from storagebrief.studies.preprocess import STUDY, dataset, pipeline
from conftest import wait_for as _wait_for, process_alive, REPO, base_params, needs_blkio

ROOT = os.geteuid() == 0
TF_NATIVE_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} )")
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mounts, cgroups)")


def _write_params(tmp_path: Path, **preprocess) -> Path:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(base_params(tmp_path, **preprocess)))
    return f


def _cli(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "storagebrief.cli", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}, **kw)


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


