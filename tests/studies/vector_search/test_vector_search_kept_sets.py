"""Issue 57 defect 7: a kept data set is checked against its manifest (every file's size, a checksum where cheap)
before use; a damaged one is built again, saying so in one line, never measured."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.studies.vector_search import dataset
from conftest import REPO

TINY = studies.get("vector_search").tiny


def _cli(tmp: Path) -> subprocess.CompletedProcess:
    data = {"targets": [{"name": "dir", "path": str(tmp / "dir")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2},
            "vector_search": {**TINY, "search_list": [20], "uniform_control": False}}
    (tmp / "params.yaml").write_text(yaml.safe_dump(data))
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "vector-search", "--params",
                           str(tmp / "params.yaml"), "--out", str(tmp / "out"), "--progress", "off"], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")})


def _kept(tmp: Path) -> Path:
    [man] = (tmp / "dir").rglob(dataset.MANIFEST)
    return man.parent


@pytest.mark.slow
def test_a_truncated_kept_index_is_built_again_never_measured(tmp_path):
    first = _cli(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    before = pd.read_csv(tmp_path / "out" / "runs.csv")
    kept = _kept(tmp_path)
    made = json.loads((kept / dataset.MANIFEST).read_text())
    index = dataset.disk_index(kept)
    os.truncate(index, index.stat().st_size // 2)
    again = _cli(tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    said = [ln for ln in (again.stdout + again.stderr).splitlines() if "damaged" in ln]
    assert len(said) == 1 and str(kept) in said[0] and "ann_disk.index" in said[0] and "building it again" in said[0]
    assert "a bug" not in again.stderr and "Traceback" not in again.stderr
    after = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(after.status) == {"ok"} and (after.recall_at_k > 0.3).all()
    manifest = json.loads((kept / dataset.MANIFEST).read_text())
    # issue 61: the build is repeatable bit for bit (one build thread, a seeded quantizer): the index made again is
    # the same bytes, so the same L gives the same recall over the same queries
    assert manifest["files"] == made["files"] and manifest["repeatable"] and manifest["pq"] == "seeded"
    same = before.merge(after, on=["search_list", "beam_width", "threads", "queries"], suffixes=("", "_again"))
    assert len(same) and (same.recall_at_k == same.recall_at_k_again).all()
    assert manifest["files"]["index/ann_disk.index"]["bytes"] == dataset.disk_index(kept).stat().st_size
    assert "sha256" in manifest["files"]["index/ann_disk.index"] and dataset.damage(kept, manifest) is None


def test_damage_names_a_changed_missing_or_truncated_file_and_holds_old_manifests_to_their_sizes(tmp_path):
    d = tmp_path / "set"
    (d / dataset.INDEX).mkdir(parents=True)
    np.save(d / "queries.npy", np.zeros((4, 2), np.float32))
    np.save(d / "truth.npy", np.zeros((4, 2), np.int64))
    dataset.disk_index(d).write_bytes(b"x" * 8192)
    have = {"files": dataset.kept_files(d)}
    assert dataset.damage(d, have) is None
    dataset.disk_index(d).write_bytes(b"y" * 8192)                     # same size, other bytes
    assert "checksum" in dataset.damage(d, have)
    old = {"index_files": {"ann_disk.index": 8192}}                    # a manifest of before the checksums
    assert dataset.damage(d, old) is None
    os.truncate(dataset.disk_index(d), 100)
    assert "ann_disk.index is 100 bytes, its manifest says 8,192" in dataset.damage(d, old)
    (d / "truth.npy").unlink()
    assert "truth.npy is missing" in dataset.damage(d, have)
