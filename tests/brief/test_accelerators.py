"""Page 1's one accelerators answer per target: the measured count, its range, what limited it beyond,
and the fio forecast reconciled with it or the gap said (brief/accelerators.py)."""
import json
from types import SimpleNamespace

import pandas as pd

from storagebrief.brief import accelerators


def _emulate(tmp_path, recs, runs):
    d = tmp_path / "emulate"
    d.mkdir()
    (d / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": recs}))
    return SimpleNamespace(dir=d, frame=pd.DataFrame(runs))


def _sweep(tmp_path, rows):
    d = tmp_path / "transfer_sweep"
    d.mkdir()
    base = {"load": "idle", "workload": "unet3d", "au_threshold_percent": 90.0, "queue_depth_used": 8,
            "demand_mb_per_s_per_accelerator": 50.0, "curve_statistic": "worse repeat", "capped_by_profile": False,
            "forecast_limited_by": "storage throughput at the workload's concurrency"}
    pd.DataFrame([{**base, **r} for r in rows]).to_csv(d / "forecast.csv", index=False)
    return SimpleNamespace(dir=d, frame=None)


def _rec(target, at_least, first_fail, by):
    return {"workload": "unet3d", "target": target, "au_threshold_percent": 90.0, "accelerators_supported": None,
            "accelerators_supported_text": f"client-limited at {first_fail}", "supported_limited_by": by,
            "accelerators_supported_at_least": at_least, "first_failing_accelerators": first_fail}


def _runs(target, au_by_n, mb_by_n):
    return [{"workload": "unet3d", "target": target, "accelerators": n, "au_percent": au,
             "loader_read_mb_per_s": mb_by_n[n]} for n, au in au_by_n.items()]


def test_one_answer_per_target_with_range_cause_and_the_forecast_reconciled(tmp_path):
    emu = _emulate(tmp_path, [_rec("local", 8, 16, "client"), _rec("hdd-emulated", 1, 2, "storage")],
                   _runs("local", {4: 98.0, 8: 93.9, 16: 76.5}, {4: 200.0, 8: 380.0, 16: 600.0})
                   + _runs("hdd-emulated", {1: 95.0, 2: 70.0}, {1: 47.0, 2: 70.0}))
    sweep = _sweep(tmp_path, [{"target": "local", "accelerators_forecast": 20, "throughput_used_mb_per_s": 950.0},
                              {"target": "hdd-emulated", "accelerators_forecast": 3, "throughput_used_mb_per_s": 150.0}])
    own = [{"question": "Accelerators supported, emulated (unet3d, AU ≥ 90 %)", "target": "local",
            "answer": "client-limited at 16", "basis": "search of N (probed 1,2,4,8,16), limited by client"}]
    rows = {r["target"]: r for r in accelerators.answers(emu, sweep, own)}
    assert set(rows) == {"local", "hdd-emulated"}
    local = rows["local"]
    # 16 failed: it is never the answer; 8 passed, counts 9-15 were not run
    assert local["answer"] == "8 (range 8–15; client-limited beyond)"
    assert "16 failed (AU 76.5 %), limited by client" in local["basis"]
    assert "fio forecast 20" in local["basis"] and "assumes the client can run every loader" in local["basis"]
    assert "probed 1,2,4,8,16" in local["basis"]            # the emulate study's own basis is kept
    hdd = rows["hdd-emulated"]
    assert hdd["answer"] == "1 (storage-limited beyond)"
    assert "is higher: fio's 150 MB/s" in hdd["basis"] and "drew at 2 (70 MB/s)" in hdd["basis"]
    assert all(r["question"].startswith(accelerators.QUESTION) for r in rows.values())


def test_agreement_floors_a_lower_forecast_and_a_forecast_alone(tmp_path):
    emu = _emulate(tmp_path, [_rec("a", 4, None, "budget"), _rec("b", 4, 5, "storage")],
                   _runs("a", {4: 97.0}, {4: 190.0}) + _runs("b", {4: 92.0, 5: 80.0}, {4: 190.0, 5: 200.0}))
    sweep = _sweep(tmp_path, [{"target": "a", "accelerators_forecast": 6, "throughput_used_mb_per_s": 300.0},
                              {"target": "b", "accelerators_forecast": 2, "throughput_used_mb_per_s": 95.0},
                              {"target": "c", "accelerators_forecast": 1, "throughput_used_mb_per_s": 60.0}])
    rows = {r["target"]: r for r in accelerators.answers(emu, sweep)}
    assert rows["a"]["answer"] == "≥ 4 (search budget reached)" and "agrees" in rows["a"]["basis"]
    assert rows["b"]["answer"] == "4 (storage-limited beyond)"
    assert "is lower: the emulated loaders drew 190 MB/s at 4" in rows["b"]["basis"]
    assert rows["c"]["answer"] == "1 (fio forecast; not emulated)"
    # without the transfer-size study the measured answer stands alone
    only = accelerators.answers(emu, None)
    assert [r["answer"] for r in only] == ["≥ 4 (search budget reached)", "4 (storage-limited beyond)"]


def test_a_client_checks_rerun_and_a_failed_run_are_not_averaged_into_the_answers_au(tmp_path):
    runs = _runs("local", {8: 97.4, 16: 60.0}, {8: 380.0, 16: 500.0})
    runs += [{**runs[0], "au_percent": 41.3, "client_check": "half CPUs"},      # the confined re-run of N = 8
             {**runs[0], "au_percent": 0.0, "status": "failed"}]
    emu = _emulate(tmp_path, [_rec("local", 8, 16, "storage")], runs)
    row = accelerators.answers(emu, None)[0]
    assert "8 passed (AU 97.4 %)" in row["basis"], row["basis"]
