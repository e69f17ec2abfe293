"""kit/s3ref: the reference client's protocol (keys on stdin, 'ready', 'go', one JSON line), credentials only in
its environment, and its failures in its own words; a stand-in script plays the Go client."""
from __future__ import annotations

import stat

import pytest

from storagebrief.core.procs import Scope
from storagebrief.core.store import StoreHandle
from storagebrief.kit import s3ref

CREDS = {"aws_access_key_id": "AKID", "aws_secret_access_key": "sekret"}
HANDLE = StoreHandle(s3={"endpoint": "http://127.0.0.1:1", "bucket": "b", "region": "us-east-1", "credentials": CREDS})


def _fake(tmp_path, monkeypatch, body: str):
    exe = tmp_path / "s3ref"
    exe.write_text("#!/usr/bin/env python3\nimport json, os, sys\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(s3ref, "BINARY", exe)
    return exe


def test_missing_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setattr(s3ref, "BINARY", tmp_path / "none")
    assert "run `make s3ref`" in s3ref.missing()
    with pytest.raises(s3ref.ReferenceFailed, match="make s3ref"):
        s3ref.Batch(HANDLE, "get", 1, 1, ["k"], Scope("t"))


def test_a_batch_reads_keys_waits_for_go_and_reports_rates(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, """
keys = []
for line in sys.stdin:
    if not line.strip():
        break
    keys.append(line.strip())
assert os.environ["STORAGEBRIEF_S3_SECRET"] == "sekret" and "sekret" not in " ".join(sys.argv)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
print(json.dumps({"objects": len(keys), "bytes_moved": len(keys) * 1000000, "wall_seconds": 2.0,
                  "client_cpu_seconds": 0.5}), flush=True)
""")
    b = s3ref.Batch(HANDLE, "get", 1000000, 4, ["a", "b", "c", "d"], Scope("t"))
    b.go()
    got = b.result(30)
    assert got["objects"] == 4 and got["mb_per_s"] == pytest.approx(2.0) and got["cpu_s_per_gb"] == pytest.approx(125)


def test_its_own_error_is_raised_in_its_words(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, """
sys.stdin.readline(); sys.stdin.readline()
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({"error": "GET k: The specified key does not exist."}), flush=True)
""")
    b = s3ref.Batch(HANDLE, "get", 1, 1, ["k"], Scope("t"))
    b.go()
    with pytest.raises(s3ref.ReferenceFailed, match="key does not exist"):
        b.result(30)


def test_a_client_that_dies_before_ready_is_named(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, "sys.exit(3)\n")
    with pytest.raises(s3ref.ReferenceFailed, match=r"exited \(status 3\) before its 'ready'"):
        s3ref.Batch(HANDLE, "get", 1, 1, ["k"], Scope("t"))
