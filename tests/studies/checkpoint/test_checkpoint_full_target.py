"""checkpoint: a filesystem that fills up mid-write is a failed row with its reason, the target left as
it was (no checkpoint file of the run), and the study goes on to its next run."""
from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config
from storagebrief.studies.checkpoint import run as ck_run
from conftest import needs_root, REPO

STUDY = studies.get("checkpoint")
SMALL = {"models": ["llama3-8b"], "scale": 65536, "saves": 2, "restores": 1, "pause_s": 0.0, "retain": 1,
         "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2, "repeats": 1}


@needs_root("mounts a small tmpfs to fill")
@pytest.mark.privileged
def test_a_target_that_fills_mid_write_is_a_failed_row_and_left_clean(tmp_path, small_fs, monkeypatch):
    target = small_fs / "fast"
    prepare = ck_run.prepare

    def prepare_then_fill(sweep):
        """After the free-space check passed, something else fills the filesystem (as another job
        would), leaving less than one checkpoint (1.6 MiB at this scale)."""
        prepare(sweep)
        st = os.statvfs(small_fs)
        with open(small_fs / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (512 << 10)))
    monkeypatch.setattr(ck_run, "prepare", prepare_then_fill)
    data = {"targets": [{"name": "fast", "path": str(target)}], "run": {"cold_cache": True},
            "checkpoint": {**SMALL, "cost": {"modes": ["none", "sync"], "intervals_steps": [2], "steps": 4,
                                             "compute_s": 0.0, "files": 2}}}
    params = config.validate(data, root=REPO)
    out = tmp_path / "out"
    STUDY.run(params, out, log=lambda *_: None, progress="off")
    runs = pd.read_csv(out / "runs.csv")
    protocol = runs[runs.sweep == "protocol"].iloc[0]
    assert protocol.status == "failed"
    assert protocol.failure_reason.startswith("target full mid-write: No space left on device")
    assert "(errno 28)" in protocol.failure_reason and f"target 'fast' ({target})" in protocol.failure_reason
    assert f"writing {target}/storagebrief/checkpoint/llama3-8b/global_epoch1_step" in protocol.failure_reason  # the file
    synced = runs[(runs.sweep == "cost") & (runs.save_mode == "sync")].iloc[0]
    assert synced.status == "failed" and "No space left on device" in synced.failure_reason
    assert (runs[(runs.sweep == "cost") & (runs.save_mode == "none")].status == "ok").all()   # it goes on
    left = [p for p in target.rglob("*") if p.is_file() and p.name != ".storagebrief.lock"]   # the target lock stays
    assert left == [], f"files the failed runs left on the target: {left}"
    notes = json.loads((out / "notes.json").read_text())
    assert any("filled up during" in n for n in notes["warnings"])
