"""Wording slips in the emulated-training section a notebook shows (issue 48): "With 1 accelerators", "AU 95.8 % at
1 accelerator(s) and 95.8 % at 1", and "Cause uncertain … at N = 1" for a point whose AU passed."""
from __future__ import annotations

import pandas as pd

from storagebrief.studies.emulate import brief


def _capture(monkeypatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(brief, "show_md", lambda text, **k: said.append(text))
    monkeypatch.setattr(brief, "show_table", lambda *a, **k: None)
    monkeypatch.setattr(brief, "analysis", lambda lines, tail="": said.extend(lines))
    return said


def _runs(aus: list[float], n: int = 1, causes=("none", "client")) -> pd.DataFrame:
    return pd.DataFrame([{"workload": "unet3d", "target": "local", "accelerators": n, "au_percent": au,
                          "au_threshold_percent": 90.0, "limited_by": cause, "loader_read_mb_per_s": 100.0,
                          "throttle_au_bound_percent": float("nan"), "read_latency_us_mean": 50.0,
                          "emulator_overhead_s": 0.1, "measured_time_s": 10.0, "au_percent_overhead_removed": au,
                          "demand_mb_per_s_per_accelerator": 100.0} for au, cause in zip(aus, causes)])


def test_one_accelerator_reads_in_the_singular_and_once(monkeypatch):
    said = _capture(monkeypatch)
    sup = pd.DataFrame([{"workload": "unet3d", "target": "local", "au_threshold_percent": 90.0, "searched": False,
                         "accelerators_supported_text": "≥ 1", "supported_limited_by": "client"}])
    brief._analysis(_runs([95.8, 95.8]), sup)
    assert said[0].startswith("- **local** (unet3d): AU 95.8 % at 1 accelerator; loaders read"), said[0]
    said.clear()
    brief._analysis(pd.concat([_runs([99.0, 99.0]), _runs([80.0, 80.0], n=2)]), sup)
    assert said[0].startswith("- **local** (unet3d): AU 99.0 % at 1 and 80.0 % at 2 accelerators;"), said[0]


def test_an_uncertain_cause_is_called_out_only_where_au_failed(monkeypatch):
    said = _capture(monkeypatch)
    brief._limits_table(_runs([96.8, 96.8]))                  # passing: its cause does not matter
    assert not any("Cause uncertain" in s for s in said), said
    brief._limits_table(_runs([60.0, 62.0]))
    assert any(s.startswith("**Cause uncertain** at unet3d on local at N = 1") for s in said), said


def test_days_saved_with_one_accelerator_is_singular(monkeypatch):
    said = _capture(monkeypatch)
    table = pd.DataFrame([{"Accelerators": 1, "local faster %": 12.0, "local: s": 10.0, "hdd: s": 11.4,
                           "Days saved / year": 40.0}])
    monkeypatch.setattr(brief, "days_saved_table", lambda *a: table)
    monkeypatch.setattr(brief, "extrapolation_refused", lambda *a: "")
    runs = _runs([95.0]).assign(epochs=2)
    brief._days_saved(runs, "unet3d", runs, ["local", "hdd"], {})
    assert said[0].startswith("**Analysis (unet3d).** With 1 accelerator local finished 12.0 % faster"), said[0]
