"""core/results.py: atomic rows, the schema of runs.csv; a result file that cannot be written (the filesystem
fills mid-run, a read-only mount) is one line naming the file and what to do, exit 2, with nothing left running
(issue 20)."""
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief.core import cache, monitor, results, targets, config
from conftest import base_params, needs_drop_caches, cli_run as _cli, one_line as _one_line
from mounts import mount, needs_root  # noqa: F401  (mount: a fixture)


def test_run_table_atomic_and_schema(tmp_path):
    table = results.RunTable(tmp_path / "runs.csv")
    row = {"study": "s", "run_id": "r1", "target": "t", "repeat": 1, "started_at": results.utc_now(),
           "cache_method": "drop_caches", "x_s": 1.5}
    table.append(row)
    table.append({**row, "run_id": "r2", "x_s": 2.5})
    frame = results.read_runs(tmp_path / "runs.csv", required=("x_s",))
    assert list(frame.run_id) == ["r1", "r2"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left
    with pytest.raises(results.SchemaError):
        table.append({"study": "s"})
    with pytest.raises(results.SchemaError):
        results.read_runs(tmp_path / "runs.csv", required=("missing_col",))


def test_a_run_table_from_a_newer_storagebrief_is_refused(tmp_path):
    from storagebrief.core import columns
    runs = tmp_path / "runs.csv"
    runs.write_text("study,run_id,target,repeat,started_at,cache_method\ns,r,t,0,now,none\n")
    assert results.check_schema_version(runs) == 1            # no sidecar: written before it existed
    (tmp_path / columns.SCHEMA_FILE).write_text('{"schema_version": %d}' % (columns.RUNS_SCHEMA_VERSION + 1))
    with pytest.raises(results.SchemaError, match="update storagebrief"):
        results.read_runs(runs)
    (tmp_path / columns.SCHEMA_FILE).write_text('{"schema_version": "two"}')
    with pytest.raises(results.SchemaError, match="not a positive whole number"):
        results.read_runs(runs)


# --------------------------------------------------------------------------- the output filesystem fails (issue 20)
def _params(tmp_path: Path, **pp) -> Path:
    data = base_params(tmp_path, **pp)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


@pytest.mark.slow
@pytest.mark.e2e
@needs_root
def test_output_filesystem_filling_mid_run_is_one_line_naming_the_file(tmp_path, mount):
    out_fs = mount("small", "-t", "tmpfs", "-o", "size=96k", "tmpfs")
    f = _params(tmp_path, repeats=4)
    res = _cli("preprocess", "--params", str(f), "--out", str(out_fs / "out"), "--progress", "off",
               "-S", "run.monitor_interval_s=0.02")
    line = _one_line(res)
    assert res.returncode == 2 and "No space left on device writing" in line and str(out_fs) in line
    assert "free space there or choose another" in line
    assert not [p for p in subprocess.run(["pgrep", "-f", str(out_fs)], capture_output=True, text=True).stdout.split()]


@needs_root
def test_output_folder_on_a_read_only_mount_is_refused_before_any_dataset(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    ro = mount("ro", "--bind", str(src))
    subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
    f = _params(tmp_path)
    res = _cli("preprocess", "--params", str(f), "--out", str(ro / "out"))
    line = _one_line(res)
    assert res.returncode == 2 and "Read-only file system" in line and "choose a writable folder" in line
    assert not list(Path(tmp_path / "fast").rglob("*.tif"))          # refused before the dataset
