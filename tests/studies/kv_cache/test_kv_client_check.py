"""kv_cache's client check (kv_cache.client_check, kit/client_check.py): the first workload re-run on the first
target with the clients on half the CPUs, beside an unconfined re-run when the point ran once; the verdict, the
re-runs out of every scored figure, the verdict beside the headline and on page 1's break-even row."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import cgroups, config
from storagebrief.kit import client_check
from storagebrief.studies.kv_cache import brief, metrics
from storagebrief.studies.kv_cache import params as kv_params, run as kv_run
from conftest import REPO, pin_without_cgroup

STUDY = studies.get("kv_cache")
SMALL = {"run": ["w"], "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 2, "concurrency": 2}},
         "clients": 2, "contexts": [{"tokens": 16, "weight": 1}], "turns": [{"tokens": 3, "weight": 1}],
         "turn_tokens": 8, "duration_s": 0.4, "repeats": 1, "write_block_mib": 1, "prefill": {"measure": False},
         "client_check": True}
FIGS = metrics.CHECK_FIGURES


def _frame(base: list[float], confined: list[float]) -> pd.DataFrame:
    """The point 'w' on 'fast': a scored run, an unconfined re-run, the confined ones (every figure = the value);
    and one scored run on 'slow'."""
    rows = [{"run_id": f"s{i}", "target": "fast", "workload": "w", "model": "llama3.1-8b", "status": "ok",
             "client_check": None if i == 0 else client_check.REFERENCE, **{f: v for f in FIGS}}
            for i, v in enumerate(base)]
    rows += [{"run_id": f"c{i}", "target": "fast", "workload": "w", "model": "llama3.1-8b", "status": "ok",
              "client_check": client_check.CHECK, "cpus_confined": 1, "cpus_available": 2,
              "cpu_confinement": "sched_setaffinity 0 (no cgroup: test)", **{f: v for f in FIGS}}
             for i, v in enumerate(confined)]
    rows.append({"run_id": "x", "target": "slow", "workload": "w", "model": "llama3.1-8b", "status": "ok",
                 "client_check": None, **{f: 1.0 for f in FIGS}})
    return pd.DataFrame(rows).assign(mlperf_read_gib_per_s=1.0, mlperf_write_gib_per_s=1.0, read_host_ms_p95=1.0)


def test_verdict_client_bound_only_beyond_the_repeats_spread():
    c, = metrics.client_checks(_frame([2.0, 2.2], [1.0]))
    assert c["client_bound"] and c["repeats"] == 2 and c["confined_runs"] == 1 and set(c["figures"]) == set(FIGS.values())
    f = c["figures"]["measured read GiB/s"]
    assert f["moved"] == pytest.approx(-1.1) and f["repeat_spread"] == pytest.approx(0.2)
    c, = metrics.client_checks(_frame([2.0, 2.2], [2.15]))
    assert not c["client_bound"] and "not client-sensitive" in c["text"]


def test_re_runs_count_in_no_scored_figure():
    frame = _frame([2.0, 50.0], [99.0])
    h = next(h for h in metrics.headlines(frame, ["fast", "slow"]) if h["metric"] == "honest_read_gib_per_s")
    assert h["delta_percent"] == pytest.approx(100.0)                  # 2.0 vs 1.0: the re-runs left out
    m = metrics.metrics(frame, ["fast", "slow"])
    assert m["runs"] == 2 and m["fast"]["w"]["honest_read_gib_per_s"] == pytest.approx(2.0)
    assert "client_check" in m["fast"]["w"]
    assert set(metrics.mlperf_summary(frame.assign(duration_s=1, users_per_client=1, clients=1, requests=1,
                                                   mlperf_device_read_p95_ms=1, mlperf_device_write_p95_ms=1,
                                                   storage_tokens_per_elapsed_s=1, io_busy_s=1, wall_s=1,
                                                   elapsed_time_s=1, mlperf_read_bytes=1, mlperf_write_bytes=1,
                                                   overstatement_ratio=1))["runs"]) == {"s0", "x"}
    rows = kv_run.breakeven_rows(frame.assign(reload_latency_ms=1.0), ["fast"],
                                 kv_params.KvCacheParams.model_validate(SMALL), None)
    assert {r["reload_read_gib_per_s"] for r in rows} == {2.0}


def test_verdict_beside_the_headline_and_page_1(tmp_path):
    frame = _frame([2.0, 2.2], [1.0])
    pd.DataFrame([{"target": "fast", "model": "llama3.1-8b", "accelerator": "h200", "answer": "reloading beats "
                   "recomputing beyond 1,000 tokens", "read_gib_per_s_needed": 1.0, "need_at_tokens": 8192,
                   "reload_read_gib_per_s": 2.0, "reload_latency_s": 0.001}]).to_csv(tmp_path / "breakeven.csv")
    row, = brief.answers(tmp_path, frame, ["fast"])
    assert "client check (w), rerun on 1 of 2 CPUs: client-bound (measured read GiB/s fell by 1.1, more than its " \
           "repeats' spread of 0.2" in row["basis"]
    assert brief.check_note(metrics.client_checks(frame), "slow", {"w"}) == ""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the check needs 2 CPUs to halve")
def test_a_small_run_with_the_check_on(tmp_path):
    """Real clients, confined: the first workload on the first target re-run unconfined and confined, tagged,
    left out of the scored figures; the verdict in study.json; the cgroup it made gone."""
    params = config.validate({"targets": [{"name": "t", "path": str(tmp_path / "t")},
                                          {"name": "u", "path": str(tmp_path / "u")}],
                              "run": {"cold_cache": True, "trace": False}, "kv_cache": SMALL}, root=REPO)
    out = tmp_path / "out"
    STUDY.run(params, out, log=lambda *_: None, progress="off")
    runs = pd.read_csv(out / "runs.csv")
    assert (runs.status == "ok").all()
    assert list(runs.client_check.fillna("")) == ["", "", client_check.REFERENCE, client_check.CHECK]
    check = runs[runs.client_check == client_check.CHECK].iloc[0]
    assert check.target == "t" and check.run_id.startswith("kv_cache-w-halfcpus-")
    assert check.cpus_confined == len(os.sched_getaffinity(0)) // 2
    assert str(check.cpu_confinement).startswith(("cgroup", "sched_setaffinity"))
    c, = json.loads((out / "study.json").read_text())["client_checks"]
    assert c["target"] == "t" and c["workload"] == "w" and c["repeats"] == 2 and c["confined_runs"] == 1
    in_tree = [json.loads(f.read_text())["run_id"] for f in (out / "mlperf" / "results").glob("*/kv_cache/run/*/"
                                                                                              "storagebrief.json")]
    assert len(in_tree) == 2 and not any("cpus" in k for k in in_tree)      # the check's runs are not in MLPerf's tree
    lat = pd.read_csv(out / "latency.csv")
    assert set(lat.client_check.dropna()) == {client_check.REFERENCE, client_check.CHECK}
    assert not [d for d in cgroups.leftover_dirs(os.getpid()) if "halfcpus" in d.name]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the check needs 2 CPUs to halve")
def test_without_a_cgroup_the_clients_pin_themselves(tmp_path, monkeypatch):
    """Not root / no cpuset: the confined run's clients pin every thread to the half (sched_setaffinity); the row
    and the notes say why no cgroup was used."""
    half = client_check.half_cpus()
    seen = tmp_path / "affinity"
    pin_without_cgroup(monkeypatch, seen)
    params = config.validate({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                              "run": {"cold_cache": True, "trace": False}, "kv_cache": SMALL}, root=REPO)
    STUDY.run(params, tmp_path / "out", log=lambda *_: None, progress="off")
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    check = runs[runs.client_check == client_check.CHECK]
    assert check.cpu_confinement.iloc[0] == f"sched_setaffinity {','.join(map(str, half))} (no cgroup: test)"
    got = [p.read_text() for p in seen.iterdir()]
    assert got.count(",".join(map(str, half))) == SMALL["clients"] and len(got) == 3 * SMALL["clients"]
    notes = json.loads((tmp_path / "out" / "notes.json").read_text())["warnings"]
    assert any(n.startswith("client check: client processes confined by sched_setaffinity") for n in notes)
