"""The brief's S3 ÷ directory sentences say when the S3 side's client, not the object path, set the ratio (issue 45:
"0.07–0.26 at 64K" read as the object path's cost was mostly boto3's CPU)."""
from __future__ import annotations

import pandas as pd

from storagebrief.studies.object_sweep import brief


def _write(tmp_path, s3_limited: str) -> None:
    keys = {"load": "idle", "object_bytes": 65536, "concurrency": 8}
    pts = pd.DataFrame([{"target": "obj", "kind": "s3", "access": "S3 local gateway", "op": op, **keys,
                         "throughput_mb_per_s": 20.0, "limited_by": s3_limited} for op in ("get", "put")])
    pairs = pd.DataFrame([{"directory_target": "dir", "s3_target": "obj", "op": op, **keys, "directory_mb_per_s": 200.0,
                           "s3_mb_per_s": 20.0, "s3_vs_directory": 0.1,
                           "limited_by": f"S3: {s3_limited}" if s3_limited else ""} for op in ("get", "put")])
    pts.to_csv(tmp_path / "points.csv", index=False)
    pairs.to_csv(tmp_path / "pairs.csv", index=False)


def test_a_ratio_set_by_the_s3_client_says_so(tmp_path):
    _write(tmp_path, "client CPU")
    (answer,) = brief.answers(tmp_path, None, ["dir", "obj"])
    assert "0.10–0.10 × the directory 'dir'" in answer["basis"]
    assert "in 2 of 2 of them the S3 client's CPU was the limit" in answer["basis"]


def test_a_ratio_the_client_did_not_limit_carries_no_such_note(tmp_path):
    _write(tmp_path, "")
    (answer,) = brief.answers(tmp_path, None, ["dir", "obj"])
    assert "0.10–0.10 × the directory 'dir'" in answer["basis"] and "client's CPU" not in answer["basis"]


def test_the_reference_clients_mb_per_s_stands_beside_the_point_when_it_ran(tmp_path):
    _write(tmp_path, "client CPU")
    pts = pd.read_csv(tmp_path / "points.csv")
    pts["reference_mb_per_s"] = [150.0, 60.0]
    pts["study_to_reference"] = pts.throughput_mb_per_s / pts.reference_mb_per_s
    pts.to_csv(tmp_path / "points.csv", index=False)
    (answer,) = brief.answers(tmp_path, None, ["dir", "obj"])
    assert "a compiled S3 client at the same points: GET 150 MB/s, PUT 60 MB/s" in answer["basis"]
    _write(tmp_path, "client CPU")                   # the knob off: no reference column, no such words
    (answer,) = brief.answers(tmp_path, None, ["dir", "obj"])
    assert "compiled" not in answer["basis"]
