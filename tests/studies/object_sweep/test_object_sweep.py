"""The object sweep through the CLI on a directory and a local-gateway S3 target on one device (the real
versitygw, not a mock): rows for both, the directory-vs-S3 pairs, nothing left running or stored, no
credential in any output; a port in use is one line; other studies run without S3 targets, noted."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.core import config, s3gateway, sweep
from conftest import REPO, needs_gateway

TINY = studies.get("object_sweep").tiny


def _params(tmp: Path, **s3) -> Path:
    data = {"targets": [{"name": "dir", "path": str(tmp / "dir")},
                        {"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": s3}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "object_sweep": {**TINY, "loads": ["idle"]}}
    f = tmp / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _cli(params: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "object-sweep", "--params", str(params),
                           "--out", str(out), "--progress", "off"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})


@pytest.mark.slow
@needs_gateway
def test_directory_and_s3_on_one_device_measured_paired_and_cleaned_up(tmp_path):
    out = _cli(_params(tmp_path), tmp_path / "out")
    assert out.returncode == 0, out.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    points = len(TINY["object_sizes"]) * len(TINY["concurrency"]) * 2        # x ops (get, put), idle only
    assert sorted(runs.groupby("target").size().items()) == [("dir", points), ("obj", points)]
    assert set(runs.status) == {"ok"} and (runs.throughput_mb_per_s > 0).all() and (runs.errors == 0).all()
    assert set(runs[runs.target == "obj"].access) == {"S3 local gateway"}
    assert runs[runs.target == "obj"].gateway_cpu_seconds.notna().all()
    # limited_by judged per client process (the compiled worker: its requests in flight, capped by the CPUs it may
    # run on, are the cores it can use), with its evidence
    usable = runs.concurrency.clip(upper=len(os.sched_getaffinity(0)))
    assert (runs.client_processes == 1).all() and (runs.client_usable_cores == usable).all()
    assert runs.limited_by_reason.str.contains(r"\(Go\) .* usable core", regex=True).all()
    assert runs[runs.target == "obj"].limited_by_reason.str.contains("gateway .* CPU-s", regex=True).all()
    pairs = pd.read_csv(tmp_path / "out" / "pairs.csv")
    assert len(pairs) == points and set(pairs.s3_target) == {"obj"} and (pairs.s3_vs_directory > 0).all()
    # nothing left: no gateway, no bucket, no registry entry; its log kept
    gw_root = tmp_path / "obj" / "storagebrief" / "s3gw"
    assert not [p for p in gw_root.iterdir() if p.name.startswith("sb-")]
    assert (tmp_path / "out" / "logs" / "obj-versitygw.log").exists()
    left = subprocess.run(["pgrep", "-f", str(gw_root)], capture_output=True, text=True).stdout.split()
    assert not left
    # the gateway's random secret is in no file the run wrote
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["targets"]["obj"]["gateway"] == "versitygw posix" and "secret" not in json.dumps(study).lower()


@needs_gateway
def test_port_in_use_is_one_line_exit_2_and_nothing_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _cli(_params(tmp_path, port=port), tmp_path / "out")
    assert out.returncode == 2
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and f"s3.port = {port}: port already in use" in err[0], out.stderr


def test_a_directory_only_study_runs_without_s3_targets_and_says_so(tmp_path):
    data = {"targets": [{"name": "dir", "path": str(tmp_path / "dir")},
                        {"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}}],
            "transfer_sweep": studies.get("transfer_sweep").tiny}
    p = config.validate(data, root=REPO)
    sw = sweep.Sweep(studies.get("transfer_sweep"), p, tmp_path / "out")
    assert sw.target_names == ["dir"]
    assert any("'obj' is an S3 target; transfer_sweep measures directories only" in n for n in sw.notes)
    only = config.validate({**data, "targets": data["targets"][1:]}, root=REPO)
    with pytest.raises(ValueError, match="every target \\(obj\\) is an S3 target"):
        sweep.Sweep(studies.get("transfer_sweep"), only, tmp_path / "out2")


@pytest.mark.slow
@needs_gateway
def test_gateway_killed_mid_run_is_one_line_exit_2_and_nothing_left(tmp_path):
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "object-sweep", "--params",
                             str(_params(tmp_path)), "--out", str(tmp_path / "out"), "--progress", "off"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    for line in proc.stdout:
        if line.startswith("[object_sweep-dir-"):
            break
    entries = list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{proc.pid}-*.json"))
    assert len(entries) == 1
    gw_pid = json.loads(entries[0].read_text())["pid"]
    os.kill(gw_pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-2000:]
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "S3 gateway (versitygw" in lines[0] and "killed by SIGKILL" in lines[0], err
    gw_root = tmp_path / "obj" / "storagebrief" / "s3gw"
    assert not [p for p in gw_root.iterdir() if p.name.startswith("sb-")]        # the run's bucket removed
    assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{proc.pid}-*"))
    time.sleep(0.5)
    assert not subprocess.run(["pgrep", "-f", str(gw_root)], capture_output=True, text=True).stdout.split()
