"""Calibrating an emulated accelerator from a real one: the measured store, its hook into the catalogue
(emulate and the forecast accept the new accelerator_type), bad input, and a real measurement on this CPU."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from storagebrief.cli import main
from storagebrief.core import measured_accelerators as store
from storagebrief.core.workloads import merged_spec
from storagebrief.kit import calibrate
from storagebrief.studies.transfer_sweep.params import ForecastParams
from conftest import REPO

ENTRY = {"compute_s": 256 / 4700, "batch_size": 256, "source": "measured: test", "measured_at": "2026-11-26",
         "machine": "test"}


def test_store_adds_a_measured_accelerator_to_the_catalogue(tmp_path, monkeypatch):
    path = tmp_path / "accelerators.yaml"
    store.save(ENTRY, "h200-measured", "resnet50", path)
    store.save({**ENTRY, "compute_s": 2.0, "batch_size": 8}, "cpu-measured", "resnet50", path)
    monkeypatch.setenv(store.ENV, str(path))
    spec = merged_spec("resnet50", {})
    assert spec.compute_s["h200-measured"] == pytest.approx(0.05447, rel=1e-3)
    assert spec.batch_for("h200-measured") == 256 and spec.batch_for("cpu-measured") == 8
    assert spec.compute_s["h100"] == 0.224                                 # the catalogue's own stay
    # 256 images x 114,660 B per 0.0545 s: the demand one measured H200 puts on storage
    assert spec.demand_bytes_per_s("h200-measured") == pytest.approx(4700 * 114_660, rel=1e-9)
    ForecastParams(workloads=["resnet50"], accelerator_type="h200-measured")          # the forecast accepts it
    with pytest.raises(ValueError, match="no compute time for accelerator_type 'h200-measured'"):
        ForecastParams(workloads=["unet3d"], accelerator_type="h200-measured")      # not measured for unet3d
    assert "h200-measured" not in merged_spec("unet3d", {}).compute_s


def test_store_never_replaces_a_catalogue_accelerator_and_refuses_bad_entries(tmp_path):
    assert store.with_measured("resnet50", {"compute_s": {"h100": 0.224}},
                               {"h100": {"resnet50": ENTRY}})["compute_s"] == {"h100": 0.224}
    bad = tmp_path / "a.yaml"
    bad.write_text(yaml.safe_dump({"accelerators": {"x": {"resnet50": {"compute_s": -1, "batch_size": 4}}}}))
    with pytest.raises(Exception, match="accelerators.x.resnet50"):
        store.load(bad)


def test_calibrate_bad_input_is_one_line_before_work(capsys, tmp_path):
    assert main(["calibrate-accelerator", "--workload", "bert", "--store", str(tmp_path / "a.yaml")]) == 2
    assert "--workload 'bert'" in capsys.readouterr().err and not (tmp_path / "a.yaml").exists()
    assert main(["calibrate-accelerator", "--steps", "1", "--store", str(tmp_path / "a.yaml")]) == 2
    assert "--steps = 1" in capsys.readouterr().err


def test_default_names():
    assert calibrate.default_name("gpu", "NVIDIA H200") == "h200-measured"
    assert calibrate.default_name("gpu", "NVIDIA A100-SXM4-80GB") == "a100-measured"
    assert calibrate.default_name("cpu", "AMD EPYC") == "cpu-measured"


@pytest.mark.slow
def test_calibrate_measures_on_this_cpu_and_the_emulate_study_accepts_it(tmp_path):
    """A real (tiny) ResNet-50 training step timed here, labelled cpu and reduced input, written to the store."""
    path = tmp_path / "accelerators.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, "-m", "storagebrief.cli", "calibrate-accelerator", "--batch-size", "2",
                          "--steps", "2", "--warmup", "1", "--image-size", "32", "--store", str(path)],
                         capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    e = store.load(path)["cpu-measured"]["resnet50"]
    assert e["device"] == "cpu" and e["reduced_input"] is True and e["batch_size"] == 2
    assert e["step_s_min"] <= e["compute_s"] <= e["step_s_max"] and e["compute_s"] > 0
    assert "cpu" in e["source"] and e["measured_at"] and e["machine"]
    from storagebrief.studies.emulate.params import EmulateParams
    os.environ[store.ENV] = str(path)
    try:
        p = EmulateParams.model_validate({"workloads": ["resnet50"], "accelerator_type": "cpu-measured"})
        assert p.spec("resnet50").compute_s["cpu-measured"] == e["compute_s"]
    finally:
        del os.environ[store.ENV]


def test_auto_uses_pytorch_where_tensorflow_is_missing(monkeypatch):
    """A GPU machine may carry PyTorch only (the H200 lent here has no TensorFlow): auto measures with PyTorch, and a
    machine with neither framework gets one line, not an import traceback."""
    class FakeTorch:
        class cuda:
            @staticmethod
            def is_available():
                return True
    monkeypatch.setattr(calibrate, "_tensorflow", lambda: None)
    monkeypatch.setattr(calibrate, "_torch", lambda: FakeTorch)
    assert calibrate.choose("auto") == ("pytorch", "gpu")
    with pytest.raises(ValueError, match="--framework tensorflow: tensorflow is not installed"):
        calibrate.choose("tensorflow")
    monkeypatch.setattr(calibrate, "_torch", lambda: None)
    with pytest.raises(ValueError, match="neither TensorFlow nor PyTorch"):
        calibrate.choose("auto")
