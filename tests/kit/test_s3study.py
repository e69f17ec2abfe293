"""The object path's cost rule shared by every study on S3 targets (kit/s3study.py)."""
from __future__ import annotations

import os

import pytest

from storagebrief.core import config, targets
from storagebrief.kit import s3study


def test_limited_by_names_the_cpu_that_limited_and_nothing_else():
    ncpu = os.cpu_count() or 1
    wall = 2.0
    full = wall * ncpu                                   # CPU seconds of every CPU for the whole batch
    assert s3study.limited_by({"wall_seconds": wall, "client_cpu_seconds": 0.85 * full}) == "client CPU"
    assert s3study.limited_by({"wall_seconds": wall, "client_cpu_seconds": 0.5 * full,
                                  "gateway_cpu_seconds": 0.4 * full}) == "client + gateway CPU"
    quiet = {"wall_seconds": wall, "client_cpu_seconds": 0.1 * full, "gateway_cpu_seconds": 0.1 * full}
    assert s3study.limited_by(quiet) == ""
    assert s3study.limited_by(quiet, machine_busy_percent=95) == "machine CPU (95 % busy)"
    assert s3study.limited_by(quiet, machine_busy_percent=60) == ""
    assert s3study.limited_by({"wall_seconds": 0, "client_cpu_seconds": 1.0}) == ""


def test_no_gateway_no_gateway_cpu(tmp_path):
    from storagebrief.core.store import DirStore
    assert DirStore(tmp_path).server_cpu_seconds() is None


def test_pairs_match_only_a_local_gateway_on_the_same_device_and_profile(tmp_path):
    data = {"targets": [{"name": "dir", "path": str(tmp_path / "dir")},
                        {"name": "hdd", "path": str(tmp_path / "hdd"), "profile": "hdd_7200"},
                        {"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}},
                        {"name": "ext", "path": str(tmp_path / "ext"), "kind": "s3",
                         "s3": {"endpoint": "http://127.0.0.1:9", "bucket": "abc"}}]}
    ts = targets.resolve_all(config.validate(data, root=tmp_path), create=True)
    if ts[0].device.major is None:
        pytest.skip(f"no block device under {tmp_path}: {ts[0].device.reason}")
    assert targets.same_device_pairs(ts) == [("dir", "obj")]
