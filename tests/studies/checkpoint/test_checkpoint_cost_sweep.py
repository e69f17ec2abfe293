"""checkpoint's cost sweep: what a checkpoint costs an emulated training loop, sync vs async, through the
engine on two targets; overhead against the same target's baseline; cost_checkpoints.csv; the intervals
table recomputed by hand from the rows; bad cost params refused naming checkpoint.cost.<key>."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import columns, config
from storagebrief.core.checkpoint_workloads import GIB, checkpoint_bytes, workload
from storagebrief.studies.checkpoint import metrics
from storagebrief.studies.checkpoint import run as ck_run
from conftest import REPO

STUDY = studies.get("checkpoint")
PROTOCOL = {"models": ["llama3-8b"], "scale": 65536, "saves": 2, "restores": 1, "pause_s": 0.0, "retain": 2,
            "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2, "repeats": 1}
COST = {"modes": ["none", "sync", "async"], "intervals_steps": [2, 4], "steps": 8, "compute_s": 0.03, "files": 2,
        "overhead_limit_percent": 5}
COST_ONLY = ["interval_steps", "steps", "compute_s", "checkpoints", "training_time_s", "baseline_training_time_s",
             "overhead_percent", "stall_s_total", "stall_s_per_checkpoint", "persist_s_mean", "write_gib_per_s",
             "snapshot_s_mean", "overlap_wait_s_total", "final_wait_s", "staging"]
PROTOCOL_ONLY = ["mlperf_save_gib_per_s", "honest_save_gib_per_s", "honest_load_gib_per_s", "saves", "restores",
                 "fsync_calls", "writers"]


def _data(tmp_path: Path, targets=("fast",), **cost) -> dict:
    ts = [{"name": n, "path": str(tmp_path / n), **({"profile": "hdd_7200"} if n == "slow" else {})}
          for n in targets]
    return {"targets": ts, "run": {"cold_cache": True, "monitor_interval_s": 0.2},
            "checkpoint": {**PROTOCOL, "cost": {**COST, **cost}}}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cost")
    params = config.validate(_data(tmp, ("fast", "slow")), root=REPO)
    out = tmp / "out"
    STUDY.run(params, out, log=lambda *_: None, progress="off")
    return out


def _empty(frame, cols) -> bool:
    return all(frame[c].isna().all() or (frame[c].astype(str) == "").all() for c in cols if c in frame)


@pytest.mark.slow
@pytest.mark.e2e
def test_cost_rows_for_none_sync_async_against_the_same_targets_baseline(swept):
    runs = pd.read_csv(swept / "runs.csv")
    assert (runs.status == "ok").all()
    assert not columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS)
    cost, prot = runs[runs.sweep == "cost"], runs[runs.sweep == "protocol"]
    assert len(prot) == 2 and _empty(prot, COST_ONLY) and _empty(cost, PROTOCOL_ONLY)
    for t in ("fast", "slow"):
        c = cost[cost.target == t]
        assert c["save_mode"].tolist() == ["none", "sync", "sync", "async", "async"]      # the baseline first
        base = c[c["save_mode"] == "none"].iloc[0]
        assert base.checkpoints == 0 and base.overhead_percent == 0
        assert (c.baseline_training_time_s == base.training_time_s).all()
        on = c[c["save_mode"] != "none"]
        assert on.overhead_percent.tolist() == pytest.approx(
            ((on.training_time_s - base.training_time_s) / base.training_time_s * 100).tolist())
        assert (on.checkpoints == COST["steps"] // on.interval_steps).all()
        assert (on.training_time_s >= COST["steps"] * COST["compute_s"]).all()
        for k in COST["intervals_steps"]:
            at = on[on.interval_steps == k].set_index("save_mode")
            a, sync = at.loc["async"], at.loc["sync"]
            # async stops training only for its snapshot and for a writer still busy with the last one
            assert a.stall_s_total == pytest.approx(a.overlap_wait_s_total + a.checkpoints * a.snapshot_s_mean,
                                                    abs=0.02 * a.checkpoints), (t, k)
            if a.overlap_wait_s_total == 0:        # the writer kept up: the snapshot is the whole stall
                assert a.stall_s_per_checkpoint < sync.stall_s_per_checkpoint, (t, k)
            assert at.snapshot_s_mean["async"] > 0 and at.write_gib_per_s["sync"] > 0
    assert (cost.checkpoint_bytes == runs[runs.sweep == "protocol"].checkpoint_bytes.iloc[0]).all()


@pytest.mark.slow
@pytest.mark.e2e
def test_cost_checkpoints_csv_matches_the_rows(swept):
    runs = pd.read_csv(swept / "runs.csv")
    cost = runs[(runs.sweep == "cost") & (runs["save_mode"] != "none")].set_index("run_id")
    ck = pd.read_csv(swept / "cost_checkpoints.csv")
    assert set(ck.run_id) == set(cost.index)
    for rid, g in ck.groupby("run_id"):
        row = cost.loc[rid]
        assert len(g) == row.checkpoints and (g.bytes == row.checkpoint_bytes).all()
        assert (g.step % row.interval_steps == 0).all() and (g["save_mode"] == row["save_mode"]).all()
        assert g.stall_s.mean() == pytest.approx(row.stall_s_per_checkpoint)
        assert g.stall_s.sum() == pytest.approx(row.stall_s_total)
        assert g.persist_s.mean() == pytest.approx(row.persist_s_mean)
        assert row.write_gib_per_s == pytest.approx(g.bytes.sum() / GIB / g.persist_s.sum())
    headlines = json.loads((swept / "metrics.json").read_text())["headlines"]
    assert "overhead_percent:fast_vs_slow" in headlines


@pytest.mark.slow
@pytest.mark.e2e
def test_the_intervals_by_hand_from_the_rows(swept):
    runs = pd.read_csv(swept / "runs.csv")
    got = {(r["target"], r["model"]): r for r in json.loads((swept / "study.json").read_text())["intervals"]}
    w = workload("llama3-70b")
    nbytes = checkpoint_bytes(w)
    limit = COST["overhead_limit_percent"] / 100
    for t in ("fast", "slow"):
        prot = runs[(runs.sweep == "protocol") & (runs.target == t)]
        asy = runs[(runs.sweep == "cost") & (runs.target == t) & (runs["save_mode"] == "async")]
        save, load = prot.honest_save_gib_per_s.mean(), prot.honest_load_gib_per_s.mean()
        snap = (asy.checkpoint_bytes / GIB / asy.snapshot_s_mean).mean()
        persist_s = nbytes / GIB / save                        # every rank's share to this one target
        snapshot_s = nbytes / w.ranks / GIB / snap             # every rank copies its own share at once
        r = got[(t, "llama3-70b")]
        assert r["ranks"] == 64 and r["checkpoint_bytes"] == nbytes
        assert r["sync_interval_s"] == math.ceil(persist_s / limit)
        assert r["async_interval_s"] == max(math.ceil(snapshot_s / limit), math.ceil(persist_s))
        assert r["restore_s"] == pytest.approx(nbytes / GIB / load)
    assert {m for _, m in got} == {"llama3-8b", "llama3-70b", "llama3-405b", "llama3-1t"}


def _plan(tmp_path, **cost):
    params = config.validate(_data(tmp_path, **cost), root=REPO)
    return ck_run.plan(SimpleNamespace(p=params.section("checkpoint")))


def test_the_plan_runs_the_baseline_first_and_an_empty_list_turns_the_sweep_off(tmp_path):
    cfgs = [pt.config for pt in _plan(tmp_path, modes=["async"], intervals_steps=[3])]
    assert [(c.sweep, c.mode, c.interval_steps) for c in cfgs] == [("protocol", "", 0), ("cost", "none", 0),
                                                                    ("cost", "async", 3)]
    assert [pt.config.sweep for pt in _plan(tmp_path, modes=[])] == ["protocol"]
    assert [pt.config.sweep for pt in _plan(tmp_path, intervals_steps=[])] == ["protocol"]


def test_page_ones_protocol_runs_protocol_runs_times_and_the_sweeps_repeats_times(tmp_path):
    """Issue 61: answer points repeated, exploratory points once: the headline model's protocol (page 1) runs
    protocol_runs times in all, the cost sweep `repeats` times."""
    data = _data(tmp_path, modes=["async"], intervals_steps=[3])
    data["checkpoint"].update({"protocol_runs": 3, "client_check": False})
    cfgs = [(pt.config.sweep, pt.repeat) for pt in
            ck_run.plan(SimpleNamespace(p=config.validate(data, root=REPO).section("checkpoint")))]
    assert cfgs == [("protocol", 1), ("protocol", 2), ("protocol", 3), ("cost", 1), ("cost", 1)]
