"""checkpoint's client check (checkpoint.client_check, kit/client_check.py): the headline model's protocol re-run
per directory target with the ranks on half the CPUs; the verdict from every checkpoint of the point, the
confined rows out of every scored figure, the verdict beside the headline and on page 1."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config
from storagebrief.kit import client_check
from storagebrief.studies.checkpoint import brief, metrics
from conftest import REPO, pin_without_cgroup

STUDY = studies.get("checkpoint")
SMALL = {"models": ["llama3-8b"], "scale": 65536, "saves": 3, "restores": 2, "pause_s": 0.0, "retain": 2,
         "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2, "repeats": 1,
         "cost": {"modes": []}, "client_check": True}
two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the check needs 2 CPUs to halve")


def _frames(save_base, save_conf, load_base=(1.0, 1.1), load_conf=(1.05,)):
    """A runs.csv and checkpoints.csv of one point on 'fast': one run on all CPUs, one confined."""
    runs = pd.DataFrame([
        {"run_id": "a", "target": "fast", "model": "m", "sweep": "protocol", "status": "ok", "client_check": None,
         "honest_save_gib_per_s": sum(save_base) / len(save_base), "honest_load_gib_per_s": 1.0},
        {"run_id": "b", "target": "fast", "model": "m", "sweep": "protocol", "status": "ok",
         "client_check": client_check.CHECK, "cpus_confined": 1, "cpus_available": 2,
         "cpu_confinement": "cgroup cpuset (v1) 0", "honest_save_gib_per_s": 99.0, "honest_load_gib_per_s": 99.0}])
    runs = runs.assign(mode="default", scale=1.0, mlperf_save_gib_per_s=runs.honest_save_gib_per_s,
                       mlperf_load_gib_per_s=runs.honest_load_gib_per_s)
    ck = [{"run_id": rid, "target": "fast", "model": "m", "op": op, "honest_gib_per_s": v}
          for rid, op, vals in (("a", "save", save_base), ("b", "save", save_conf), ("a", "load", load_base),
                                ("b", "load", load_conf)) for v in vals]
    ckpts = pd.DataFrame(ck)
    ckpts["client_check"] = [client_check.CHECK if r == "b" else None for r in ckpts.run_id]
    return runs, ckpts


def test_verdict_client_bound_only_beyond_the_checkpoints_spread():
    runs, ckpts = _frames([2.0, 2.2, 2.1], [1.0, 1.1, 1.2])      # saves halved: far beyond 0.2
    c, = metrics.client_checks(runs, ckpts)
    assert c["client_bound"] and c["target"] == "fast" and c["model"] == "m" and c["repeats"] == 1
    fig = c["figures"]["measured save GiB/s"]
    assert fig["moved_beyond_spread"] and fig["moved"] == pytest.approx(-1.0) and fig["repeat_spread"] == pytest.approx(0.2)
    assert not c["figures"]["measured restore GiB/s"]["moved_beyond_spread"]
    assert "client-bound" in c["text"] and "1 of 2 CPUs" in c["text"]
    runs, ckpts = _frames([2.0, 2.2, 2.1], [2.05, 2.15, 2.1])
    c, = metrics.client_checks(runs, ckpts)
    assert not c["client_bound"] and "not client-sensitive" in c["text"]


def test_confined_rows_count_in_no_scored_figure():
    runs, ckpts = _frames([2.0, 2.2, 2.1], [1.0, 1.1, 1.2])
    both = pd.concat([runs, runs.assign(target="slow", run_id=["c", "d"], honest_save_gib_per_s=[1.05, 50.0])])
    h = next(h for h in metrics.headlines(both, ["fast", "slow"]) if h["metric"] == "honest_save_gib_per_s")
    assert h["delta_percent"] == pytest.approx(100.0)           # 2.1 vs 1.05: the confined 99 and 50 left out
    m = metrics.metrics(runs, ["fast"])
    assert m["runs"] == 1 and m["fast"]["m"]["honest_save_gib_per_s"] == pytest.approx(2.1)
    assert metrics.target_rates(runs, "fast")["save_gib_per_s"] == pytest.approx(2.1)
    ck = ckpts.assign(bytes=1 << 30, rank0_s=1.0, max_rank_s=1.0, rank_skew_s=0.0, step=1, index=0)
    summary = metrics.mlperf_summary(ck)["fast"]["m"]
    assert summary["runs"] == 1 and summary["checkpoints"] == 3


def test_verdict_sits_beside_the_headline_and_on_page_1(tmp_path):
    runs, ckpts = _frames([2.0, 2.2, 2.1], [1.0, 1.1, 1.2])
    study = {"client_checks": metrics.client_checks(runs, ckpts)}
    note = brief.check_note(study, "fast")
    assert note.startswith("client check (m), rerun on 1 of 2 CPUs: client-bound (measured save GiB/s fell by 1")
    assert "repeats' spread of 0.2" in note and brief.check_note(study, "other") == ""
    ckpts.to_csv(tmp_path / "checkpoints.csv", index=False)        # the brief's verdict: from the study's files
    (tmp_path / "study.json").write_text(json.dumps({"intervals": [
        {"target": "fast", "model": "llama3-8b", "ranks": 8, "checkpoint_bytes": 1 << 30, "checkpoint_gib": 1.0,
         "overhead_limit_percent": 5, "sync_interval_s": 20.0, "async_interval_s": 2.0, "restore_s": 1.0}]}))
    page1, = brief.answers(tmp_path, runs, ["fast"])
    assert "client check (m), rerun on 1 of 2 CPUs: client-bound" in page1["basis"]


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
@two_cpus
def test_a_small_run_with_the_check_on(tmp_path):
    """Real ranks, confined: one more protocol run per target, tagged and left out of every scored figure; its
    verdict in study.json; the cgroup it made gone."""
    params = config.validate({"targets": [{"name": "fast", "path": str(tmp_path / "fast")}],
                              "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "checkpoint": SMALL}, root=REPO)
    out = tmp_path / "out"
    STUDY.run(params, out, log=lambda *_: None, progress="off")
    runs = pd.read_csv(out / "runs.csv")
    assert (runs.status == "ok").all() and len(runs) == 2
    check = runs[runs.client_check == client_check.CHECK]
    assert len(check) == 1 and "-halfcpus-" in check.run_id.iloc[0]
    assert check.cpus_confined.iloc[0] == len(os.sched_getaffinity(0)) // 2
    assert str(check.cpu_confinement.iloc[0]).startswith(("cgroup", "sched_setaffinity"))
    ck = pd.read_csv(out / "checkpoints.csv")
    assert (ck[ck.run_id == check.run_id.iloc[0]].client_check == client_check.CHECK).all()
    study = json.loads((out / "study.json").read_text())
    c, = study["client_checks"]
    assert c["target"] == "fast" and c["model"] == "llama3-8b" and c["confined_runs"] == 1
    assert set(c["figures"]) == {"measured save GiB/s", "measured restore GiB/s"}
    tree = out / "mlperf" / "results" / "fast" / "checkpointing" / "llama3-8b"
    in_tree = [json.loads((d / "storagebrief.json").read_text())["run_id"] for d in tree.iterdir()]
    assert in_tree == [r for r in runs.run_id if "halfcpus" not in r]       # the confined run is not in MLPerf's tree
    scored = runs[runs.client_check.isna()]
    row = next(r for r in study["intervals"] if r["model"] == "llama3-8b")
    assert row["save_gib_per_s"] == pytest.approx(scored.honest_save_gib_per_s.mean())
    from storagebrief.core import cgroups
    assert not [d for d in cgroups.leftover_dirs(os.getpid()) if "halfcpus" in d.name]


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
@two_cpus
def test_without_a_cgroup_the_ranks_pin_themselves(tmp_path, monkeypatch):
    """Not root / no cpuset: the confined run's ranks pin every thread to the half (sched_setaffinity), and the
    row and the notes say why no cgroup was used."""
    half = client_check.half_cpus()
    seen = tmp_path / "affinity"
    pin_without_cgroup(monkeypatch, seen)
    params = config.validate({"targets": [{"name": "fast", "path": str(tmp_path / "fast")}],
                              "run": {"cold_cache": True}, "checkpoint": SMALL}, root=REPO)
    STUDY.run(params, tmp_path / "out", log=lambda *_: None, progress="off")
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    check = runs[runs.client_check == client_check.CHECK]
    assert check.cpu_confinement.iloc[0] == f"sched_setaffinity {','.join(map(str, half))} (no cgroup: test)"
    got = {p.read_text() for p in seen.iterdir()}
    assert ",".join(map(str, half)) in got and len(got) == 2     # the confined run's ranks; the others kept all
    notes = json.loads((tmp_path / "out" / "notes.json").read_text())["warnings"]
    assert any(n.startswith("client check: client processes confined by sched_setaffinity") for n in notes)
