"""Issue 60: the driver MLPerf's interpreter runs does what `mlpstorage reports reportgen` does after its argument
parser (the generator's printed report, results.json in the results directory) and hands back its decisions as
JSON: directory validation, a category and MLPerf's issues per run and per workload."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from storagebrief.kit import mlpstorage_tree as tree
from storagebrief.kit import mlpstorage_verdict as verdict


def test_driver_reports_what_the_generator_decided(tmp_path):
    if verdict.missing():
        pytest.skip(verdict.missing())
    rd = tmp_path / "results"
    d = tree.run_folder(rd, "vector_database", "cfg", "2026-12-07T06:12:08Z")
    tree.write_run(d, "vector_database", model="cfg", command="run", num_processes=1, accelerator=None,
                   parameters={"runtime": 5}, overrides={}, inv={"memory_total_bytes": 2**30}, tool_files={},
                   ours={})
    h = verdict.home()
    p = subprocess.run([str(h / "venv" / "bin" / "python"), str(verdict.DRIVER), str(rd), str(tmp_path / "v.json")],
                       env={**os.environ, "PYTHONPATH": str(h)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-1500:]
    got = json.loads((tmp_path / "v.json").read_text())
    assert got["directory"]["valid"] and got["directory"]["found_runs"] == 1
    (run,) = got["runs"]
    assert run["category"] == "INVALID" and run["folder"] == f"vector_database/run/{d.name}"
    assert any("Runtime must be at least 30 seconds" in i["text"] for i in run["issues"])
    assert got["workloads"][0]["category"] == "INVALID" and not got["processing_errors"]
    assert "vector_database_run_cfg_" in p.stdout and (rd / "results.json").is_file()
