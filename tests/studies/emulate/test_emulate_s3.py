"""emulate on an S3 target beside a directory on the same device, with the real local gateway (versitygw, not a
mock): the samples are objects, the loaders GET exactly the bytes the directory loaders read, the rows compare
like for like, and nothing is left afterwards (objects, gateway process, cgroup, registry entry); a gateway
killed mid-run is a failed row with one line, and the rest of the study goes on."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroups, config, s3gateway, s3store
from storagebrief.studies.emulate import objects
from storagebrief.studies.emulate.loader import batch_plan, steps_per_epoch
from storagebrief.studies.emulate.params import EmulateParams
from conftest import REPO, needs_gateway


SMALL = {"workloads": ["unet3d"], "accelerator_type": "v100",
         "workload_overrides": {"unet3d": {"record_bytes": 131072, "record_bytes_stdev": 30000,
                                           "batch_size_by_accelerator": {"v100": 2}, "compute_s": {"v100": 0.02}}},
         "num_files": 48, "dataset_sizing": "fixed", "epochs": 2, "repeats": 1, "accelerators": [1, 2],
         "read_threads": 2, "prefetch": 1, "read_block_kib": 64, "client_check": False}


def _params(tmp: Path, **emulate) -> Path:
    data = {"targets": [{"name": "dir", "path": str(tmp / "dir")},
                        {"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": {}}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "emulate": {**SMALL, **emulate}}
    f = tmp / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _cli(params: Path, out: Path, **kw):
    argv = [sys.executable, "-m", "storagebrief.cli", "emulate", "--params", str(params), "--out", str(out),
            "--progress", "off"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib"), **kw.get("env", {})}
    if kw.get("popen"):
        return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def _expected_loader_bytes(manifest: dict, n: int) -> int:
    """Bytes N accelerators' loaders read in SMALL's run: every planned sample's span, over all ranks."""
    spans = manifest["spans"]
    steps = steps_per_epoch(len(spans), 1, n, 2)
    return sum(length for r in range(n) for b in batch_plan(spans, len(spans), n, r, SMALL["epochs"], SMALL.get(
        "seed", 0), 2, steps) for _, _, length in b)


def _nothing_left(tmp: Path, pid: int | None = None) -> None:
    gw_root = tmp / "obj" / "storagebrief" / "s3gw"
    assert not [p for p in gw_root.iterdir() if p.name.startswith("sb-")]          # no bucket, no object
    assert not (tmp / "obj" / "storagebrief" / "emulate" / "unet3d" / "staging").exists()
    assert not subprocess.run(["pgrep", "-f", str(gw_root)], capture_output=True, text=True).stdout.split()
    if pid is not None:
        assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{pid}-*.json"))
    if pid is not None:   # the gateway's cgroup (and every run's) removed
        assert not cgroups.leftover_dirs(pid)


@pytest.mark.slow
@needs_gateway
def test_emulate_on_local_s3_reads_the_dataset_as_objects_and_leaves_nothing(tmp_path):
    """... and every GET of the accelerators is the compiled client's: boto3 (whose every request the trace hook
    records with its process) is the study process's alone, for buckets, the dataset's upload and cleanup."""
    trace = tmp_path / "boto3-requests"
    proc = _cli(_params(tmp_path), tmp_path / "out", popen=True, env={s3store.TRACE_ENV: str(trace)})
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    requests = [line.split() for line in trace.read_text().splitlines()]
    assert {"CreateBucket", "PutObject"} <= {op for _, op in requests}        # the hook sees the study's own
    assert {int(pid) for pid, _ in requests} == {proc.pid}, requests          # and no accelerator's
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert sorted(runs.groupby("target").size().items()) == [("dir", 2), ("obj", 2)]
    assert set(runs.status) == {"ok"}
    obj, d = runs[runs.target == "obj"].set_index("accelerators"), runs[runs.target == "dir"].set_index("accelerators")
    assert set(obj.access) == {"S3 local gateway"} and set(d.access) == {"files"}
    manifest = json.loads((tmp_path / "dir" / "storagebrief" / "emulate" / "unet3d" / "data" / "manifest.json")
                          .read_text())
    for n in (1, 2):   # the same samples, the same bytes: the GETs cover exactly what the files' reads do
        assert obj.loader_bytes[n] == d.loader_bytes[n] == _expected_loader_bytes(manifest, n)
        assert obj.dataset_bytes[n] == d.dataset_bytes[n] == manifest["bytes"]
        assert obj.samples[n] == d.samples[n] == n * 2 * obj.steps[n]
    # like-for-like columns on both kinds; the gateway's CPU on the S3 rows only
    for col in ("au_percent", "samples_per_s", "loader_read_mb_per_s", "read_latency_us_p50", "read_latency_us_p99",
                "client_cpu_s_per_gb", "limited_by"):
        assert obj[col].notna().all() and d[col].notna().all(), col
    assert (obj.gateway_cpu_s > 0).all() and obj.client_gateway_cpu_percent_of_machine.gt(0).all()
    assert d.gateway_cpu_s.isna().all()
    assert set(obj.cache_method) == set(d.cache_method)
    if obj.cgroup_read_bytes.notna().all():   # the gateway's cgroup counted the device reads the GETs caused
        assert (obj.cgroup_read_bytes > 0).all()
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert study["object_targets"]["obj"]["gateway"] == "versitygw posix"
    assert "secret" not in json.dumps(study).lower()
    assert (tmp_path / "out" / "logs" / "obj-versitygw.log").exists()
    _nothing_left(tmp_path, proc.pid)


@pytest.mark.slow
@needs_gateway
def test_gateway_killed_mid_run_is_a_failed_row_the_rest_goes_on_and_nothing_is_left(tmp_path):
    proc = _cli(_params(tmp_path, epochs=6, repeats=2), tmp_path / "out", popen=True)
    for line in proc.stdout:
        if line.startswith("[emulate-unet3d-obj-n1-r1]"):
            break
    time.sleep(0.5)
    entries = list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{proc.pid}-*.json"))
    assert len(entries) == 1
    os.kill(json.loads(entries[0].read_text())["pid"], signal.SIGKILL)
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    obj, d = runs[runs.target == "obj"], runs[runs.target == "dir"]
    assert set(d.status) == {"ok"} and len(d) == 4                      # the directory's points all ran
    assert len(obj) == 4 and set(obj.status) == {"failed"}
    first = obj.failure_reason.iloc[0]
    assert "\n" not in first and "exited (killed by SIGKILL) while in use" in first
    assert obj.failure_reason.iloc[1:].str.startswith("not run: the S3 gateway").all()
    notes = json.loads((tmp_path / "out" / "notes.json").read_text())["warnings"]
    assert any("target 'obj': the S3 gateway" in n for n in notes)
    _nothing_left(tmp_path, proc.pid)


def test_mpi_launcher_with_an_s3_target_is_refused_before_work(tmp_path):
    data = yaml.safe_load(_params(tmp_path, launcher="mpi").read_text())
    with pytest.raises(ValueError, match="emulate.launcher = mpi: S3 targets \\(obj\\) run with launcher: fork"):
        config.validate(data, root=REPO)           # validate refuses it (issue 44), as the run's prepare does
    assert not (tmp_path / "obj" / "storagebrief" / "s3gw").exists()


def test_emulate_on_s3_without_the_compiled_client_is_refused_before_work(tmp_path, monkeypatch):
    from storagebrief.core import s3mover
    monkeypatch.setenv(s3mover.BINARY_ENV, str(tmp_path / "none"))
    with pytest.raises(config.ParamsError, match=r"^emulate on S3 targets \(obj\): .* is not built: run `make s3worker`"):
        EmulateParams.model_validate({}).check_s3_targets(["obj"])
    EmulateParams.model_validate({}).check_s3_targets([])          # no S3 target: nothing to refuse


def test_s3_targets_search_on_their_own_budget():
    from types import SimpleNamespace
    p = EmulateParams.model_validate({"search_budget_s": 60, "s3_search_budget_s": 20})
    assert p.budget_s(SimpleNamespace(s3=object())) == 20 and p.budget_s(SimpleNamespace(s3=None)) == 60
    assert p.budget_s("a-name") == 60
    assert EmulateParams.model_validate({"s3_search_budget_s": None}).budget_s(SimpleNamespace(s3=object())) == 60


def test_the_gateway_counts_with_the_client_when_cpu_limits():
    from storagebrief.studies.emulate.limits import limited_by
    row = {"au_percent": 60.0, "measured_time_s": 10.0, "emulator_overhead_s": 0.5, "cpu_busy_percent": 70.0,
           "client_cpu_percent_of_cores": 50.0, "client_gateway_cpu_percent_of_machine": 95.0, "gateway_cpu_s": 9.0}
    cause, why = limited_by(row)
    assert cause == "client" and "client + S3 gateway CPU 95 %" in why
    assert limited_by({**row, "client_gateway_cpu_percent_of_machine": 40.0})[0] == "unexplained"


def test_gateway_columns_per_gb_and_share_of_the_machine():
    from types import SimpleNamespace
    store = SimpleNamespace(gateway=object(), access="S3 local gateway")
    cols = objects.gateway_columns(store, 1.0, 3.0, {"loader_bytes": 2e9, "total_time_s": 10.0, "client_cpu_s": 4.0})
    assert cols["access"] == "S3 local gateway" and cols["gateway_cpu_s"] == 2.0 and cols["gateway_cpu_s_per_gb"] == 1.0
    assert cols["client_gateway_cpu_percent_of_machine"] == pytest.approx(100 * 6.0 / (10.0 * (os.cpu_count() or 1)))
    from storagebrief.core.store import DirStore
    assert objects.gateway_columns(DirStore("/nonexistent"), None, None, {})["access"] == "files"
