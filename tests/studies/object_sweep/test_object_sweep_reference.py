"""object_sweep.reference_client: the compiled reference client (benchmarks/s3ref, kit/s3ref) at every idle point
on a local-gateway target, on the same keys, its MB/s and the ratio ours ÷ its beside each row; refused before any
work when it is not built."""
from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core.config import ParamsError
from storagebrief.kit import s3ref
from storagebrief.studies.object_sweep import run as osweep
from storagebrief.studies.object_sweep.params import ObjectSweepParams
from conftest import needs_gateway, run_study


def test_not_built_is_refused_before_any_work_naming_the_knob(tmp_path, monkeypatch):
    monkeypatch.setattr(s3ref, "BINARY", tmp_path / "no-s3ref")
    touched = []
    sweep = SimpleNamespace(p=ObjectSweepParams(reference_client=True, loads=["idle"]), targets=[],
                            status=lambda *a: touched.append(a))
    with pytest.raises(ParamsError, match=r"object_sweep.reference_client is true but the reference S3 client .* is "
                                          r"not built: run `make s3ref`"):
        osweep.prepare(sweep)
    assert not touched and not hasattr(sweep, "state")


@pytest.mark.slow
@pytest.mark.serial("asserts that no s3ref process runs anywhere afterwards")
@needs_gateway
@pytest.mark.skipif(s3ref.missing() is not None, reason=str(s3ref.missing()))
def test_each_idle_point_on_the_gateway_carries_the_reference_clients_figures(tmp_path: Path):
    tiny = {**studies.get("object_sweep").tiny, "loads": ["idle"], "object_sizes": ["64k"], "concurrency": [4],
            "repeats": 2, "reference_client": True}
    data = {"targets": [{"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}},
                        {"name": "dir", "path": str(tmp_path / "dir")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "object_sweep": tiny}
    out = run_study("object-sweep", tmp_path, data)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    s3, d = runs[runs.target == "obj"], runs[runs.target == "dir"]
    assert (s3.reference_mb_per_s > 0).all() and (s3.reference_client_cpu_s_per_gb > 0).all()
    assert (s3.study_to_reference - s3.throughput_mb_per_s / s3.reference_mb_per_s).abs().max() < 1e-6
    assert sorted(s3.reference_order) == ["after", "after", "before", "before"]     # alternating by repeat
    assert d.reference_mb_per_s.isna().all()                                      # no gateway: no reference
    pts = pd.read_csv(tmp_path / "out" / "points.csv")
    assert (pts[pts.target == "obj"].reference_mb_per_s > 0).all()
    left = subprocess.run(["pgrep", "-f", "s3ref"], capture_output=True, text=True).stdout.split()
    assert not left                                                                # nothing of it left running
