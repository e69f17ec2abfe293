"""Issue 57 defect 8: the reference S3 client (kit/s3ref) killed mid-batch is one line naming the cause; the point
fails cleanly as a failed row and the sweep goes on; never 'internal error … (a bug)'."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from storagebrief import errors, studies
from storagebrief.core import procs
from storagebrief.core.store import StoreHandle
from storagebrief.kit import s3ref
from conftest import REPO, needs_gateway

# the reference client's protocol up to 'go', then its own death (as kill -9 from outside would leave it)
DIES_MID_BATCH = """#!/bin/sh
while read -r k; do [ -z "$k" ] && break; done
echo ready
read -r go
kill -9 $$
"""


def _fake(tmp_path: Path) -> Path:
    f = tmp_path / "s3ref-dies"
    f.write_text(DIES_MID_BATCH)
    f.chmod(0o755)
    return f


def test_a_reference_client_killed_mid_batch_is_one_line_naming_the_signal(tmp_path, monkeypatch):
    monkeypatch.setattr(s3ref, "BINARY", _fake(tmp_path))
    scope = procs.Scope("ref-death")
    try:
        handle = StoreHandle(s3={"endpoint": "http://127.0.0.1:1", "bucket": "b", "region": "us-east-1",
                                 "credentials": {"aws_access_key_id": "k", "aws_secret_access_key": "s"}})
        b = s3ref.Batch(handle, "get", 4096, 2, ["a", "b"], scope, 10)
        b.go()
        with pytest.raises(s3ref.ReferenceFailed) as err:
            b.result(10)
    finally:
        scope.close()
    msg = str(err.value)
    assert "killed by signal 9 (SIGKILL)" in msg and "mid-batch" in msg and "\n" not in msg
    assert errors.expected(err.value) and errors.error_line(err.value).startswith("storagebrief: error: ")


DRIVER = """import sys
from pathlib import Path
from storagebrief.kit import s3ref
s3ref.BINARY = Path(sys.argv[1])
from storagebrief import cli
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.slow
@needs_gateway
def test_a_point_whose_reference_client_dies_is_a_failed_row_and_the_sweep_goes_on(tmp_path):
    import yaml
    tiny = {**studies.get("object_sweep").tiny, "loads": ["idle"], "object_sizes": ["64k"], "concurrency": [2],
            "repeats": 2, "reference_client": True}
    data = {"targets": [{"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "object_sweep": tiny}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    out = subprocess.run([sys.executable, "-c", DRIVER, str(_fake(tmp_path)), "object-sweep", "--params",
                          str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out"), "--progress", "off"],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    text = out.stdout + out.stderr
    assert "a bug" not in text and "Traceback" not in text, text[-3000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert len(runs) >= 2 and (runs.status != "ok").all()
    assert runs.failure_reason.str.contains("reference client: .*killed by signal 9 \\(SIGKILL\\)").all()
