"""MLPerf Storage v3.0 parity: the catalogue against v3.0's configs, the run rules, the results export."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroups, config, workloads
from storagebrief.studies.emulate import STUDY, dataset, mlperf, plan as emulate_plan
from test_emulate import SMALL, params_dict

KEYS = ("train_au_percentage", "train_au_mean_percentage", "train_throughput_mean_samples_per_second",
        "train_io_mean_MB_per_second")


# --------------------------------------------------------------------------- catalogue
def test_catalogue_matches_mlperf_storage_v3_configs():
    """Values as in mlcommons/storage configs/dlio/workload/{unet3d,retinanet}_{b200,mi355}.yaml."""
    u = workloads.merged_spec("unet3d", {})
    assert (u.format, u.record_bytes, u.record_bytes_stdev, u.batch_for("b200"), u.compute_s["b200"],
            u.au_threshold_percent, u.read_threads) == ("npz", 146_600_628, 68_341_808, 7, 0.162, 90.0, 4)
    assert (u.compute_s["a100"], u.compute_s["h100"]) == (0.636, 0.323)          # v2.0 kept
    r = workloads.merged_spec("retinanet", {})
    assert (r.format, r.samples_per_file, r.record_bytes, r.batch_for("b200"), r.compute_s["b200"],
            r.au_threshold_percent, r.read_threads) == ("jpeg", 1, 322_957, 24, 0.04755, 85.0, 8)
    assert (r.batch_for("mi355"), r.compute_s["mi355"]) == (32, 0.0634)
    for name, accels in workloads.MLPERF_V3_CLOSED.items():
        spec = workloads.WORKLOADS[name]
        for a in accels:       # every closed pair: a compute time with its source, or the stated reason there is none
            assert (a in spec["compute_s"] and a in workloads.SOURCES[name]) != bool(workloads.missing_compute_note(name, a))
    assert "unet3d_mi355" in workloads.missing_compute_note("unet3d", "mi355")


def test_no_published_time_is_said_not_invented(tmp_path):
    with pytest.raises(config.ParamsError, match="mi355.*no published MI355 compute time"):
        config.validate(params_dict(tmp_path, {**SMALL, "accelerator_type": "mi355",
                                               "workload_overrides": {}, "num_files": 64}))


# --------------------------------------------------------------------------- run rules
def test_dataset_size_by_the_rules_formula():
    # steps bind: 500 x 7 x 8 = 28,000 samples > 1 host x 64 GiB x 5 / 146.6 MB = 2,344
    assert mlperf.dataset_samples(7, 8, 1, 64 * 2**30, 146_600_628) == 28_000
    # memory binds: 2 hosts x 512 GiB x 5 x 2^30 / 322,957 B
    assert mlperf.dataset_samples(24, 1, 2, 512 * 2**30, 322_957) == -(-2 * 512 * 5 * 2**30 // 322_957)
    assert mlperf.dataset_files(400, 1, 1, 0, 114_660, 1251) == -(-500 * 400 // 1251)


@pytest.mark.parametrize("change, message", [
    ({"mlperf_rules": True, "repeats": 3, "dataset_sizing": "mlperf", "num_files": None}, "repeats = 6"),
    ({"mlperf_rules": True, "repeats": 6}, "dataset_sizing = mlperf"),
])
def test_rules_need_their_runs_and_sizing(tmp_path, change, message):
    with pytest.raises(config.ParamsError, match=message):
        config.validate(params_dict(tmp_path, {**SMALL, **change}))


def test_verdict_and_warmup_left_out():
    rows = [{"workload": "w", "target": "t", "accelerators": 2, "au_threshold_percent": 90.0, "repeat": k,
             "mlperf_run": mlperf.run_kind(k), "au_percent": au, "samples_per_s": 10.0}
            for k, au in enumerate([50.0, 95, 96, 97, 94, 93], start=1)]
    v = mlperf.verdicts(pd.DataFrame(rows))[0]
    assert v["warmup_au_percent"] == 50.0 and v["scored_au_percent"] == [95, 96, 97, 94, 93]
    assert v["verdict"] == "pass" and v["scored_au_mean_percent"] == pytest.approx(95.0)
    rows[3]["au_percent"] = 89.9                               # one scored run under the threshold fails it
    assert mlperf.verdicts(pd.DataFrame(rows))[0]["verdict"] == "fail"
    assert len(emulate_plan.measured(pd.DataFrame(rows))) == 5  # the warm-up counts in no figure


@pytest.mark.e2e
def test_rules_run_six_times_and_export_by_key(tmp_path, monkeypatch):
    """A host 'without memory' (sysconf patched) leaves the steps term: 500 steps x batch 2 x 1 accelerator."""
    real = os.sysconf
    monkeypatch.setattr(dataset.os, "sysconf", lambda k: 1 if k == "SC_PHYS_PAGES" else real(k))
    section = {**SMALL, "mlperf_rules": True, "repeats": 6, "dataset_sizing": "mlperf", "num_files": None,
               "accelerators": [1], "epochs": 1, "client_check": False,
               "workload_overrides": {"unet3d": {"record_bytes": 4096, "record_bytes_stdev": 0,
                                                 "batch_size_by_accelerator": {"v100": 2}, "compute_s": {"v100": 0.001}}}}
    p = config.validate(params_dict(tmp_path, section, cold_cache=False))
    out = tmp_path / "out"
    frame = STUDY.run(p, out, log=lambda *_: None, progress="off")
    assert int(frame.num_files.iloc[0]) == 1000 and len(frame) == 6
    assert list(frame.mlperf_run) == ["warm-up"] + ["scored"] * 5
    ml = json.loads((out / "mlperf_results.json").read_text())
    rules = ml["mlperf_rules"][0]
    assert len(rules["scored_au_percent"]) == 5 and rules["verdict"] in ("pass", "fail")
    assert ml["results"][0]["repeats"] == 5                       # the warm-up is in no figure
    runs = sorted((out / "mlperf" / "results" / "fast" / "training" / "unet3d" / "run").iterdir())
    assert len(runs) == 6
    by_id = frame.set_index("run_id")
    for d in runs:
        s = json.loads((d / "summary.json").read_text())
        m = s["metric"]
        assert all(k in m for k in KEYS)
        ours = json.loads((d / "storagebrief.json").read_text())     # our own words: never in DLIO's file
        assert "storagebrief" not in s
        r = by_id.loc[ours["run_id"]]
        assert m["train_au_mean_percentage"] == pytest.approx(r.au_percent) and m["train_au_percentage"] == [m["train_au_mean_percentage"]]
        assert m["train_throughput_mean_samples_per_second"] == pytest.approx(r.samples_per_s)
        assert m["train_io_mean_MB_per_second"] == pytest.approx(r.loader_read_mib_per_s)   # 2^20, as DLIO
        assert ours["tool"] == "storagebrief" and ours["git_commit"] and "params_hash" in ours
        meta = json.loads((d / f"training_{d.name}_metadata.json").read_text())     # as mlpstorage names it
        assert (meta["benchmark_type"], meta["model"], meta["command"], meta["run_datetime"]) == \
            ("training", "unet3d", "run", d.name)
        assert meta["combined_params"]["dataset"]["num_files_train"] == int(r.num_files)
        assert "parameters" not in meta        # so mlpstorage reads the run as DLIO's output, host memory included
        dlio = yaml.safe_load((d / "dlio_config" / "config.yaml").read_text())["workload"]
        assert dlio == meta["combined_params"] and dlio["workflow"]["train"]
        assert yaml.safe_load((d / "dlio_config" / "overrides.yaml").read_text())[0] == "workload=unet3d_v100"
        assert meta["override_parameters"]["train.computation_time"] == pytest.approx(0.001)   # not MLPerf's
