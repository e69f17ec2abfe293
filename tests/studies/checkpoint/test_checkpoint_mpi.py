"""checkpoint (issue 22): user-defined transformer shapes, per-call latency histograms, and the ranks as MPI
ranks (`checkpoint.launcher: mpi`, mpirun -np 2 and -np 4 on this host) giving the forked ranks' figures."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroups, columns, config
from storagebrief.studies.checkpoint import dataset, metrics
from storagebrief.studies.checkpoint import run as ck_run
from conftest import REPO, descendants, mpi_missing, process_alive, wait_for
from test_checkpoint import KILL_SCRIPT, STUDY, _data   # KILL_SCRIPT: rank 2 sleeps 30 s after every barrier
from test_checkpoint_ranks import _params
from conftest import cli_run as _cli

NEEDS_MPI = pytest.mark.skipif(mpi_missing() is not None, reason=f"MPI unavailable: {mpi_missing()}")
BASE = {"layers": 4, "hidden": 512, "ffn": 1024, "heads": 8, "kv_heads": 2, "vocab": 32000}
SHAPES = {"two": {**BASE, "tp": 1, "pp": 1, "dp": 2, "zero_stage": 3},     # 2 ranks, ZeRO-3
          "four": {**BASE, "tp": 2, "pp": 2, "dp": 1, "zero_stage": 1}}    # 4 ranks, ZeRO-1 with a pipeline
RUN = {"models": ["two", "four"], "shapes": SHAPES, "scale": 64, "saves": 2, "restores": 2, "rank_shift": 1,
       "write_block_mib": 1, "read_block_mib": 1}


def _validate(tmp_path, **ck):
    return config.validate(_data(tmp_path, **ck), root=REPO)


def _run(tmp_path, name: str, **ck):
    out = tmp_path / name
    frame = STUDY.run(_validate(tmp_path, **ck), out, log=lambda *_: None, progress="off")
    return frame, out


# --------------------------------------------------------------------------- shapes
def test_user_shapes_are_workloads_with_the_catalogues_refusals(tmp_path):
    p = _validate(tmp_path, **RUN, cost={"model": "four", "files": 2})
    assert p.section("checkpoint").writers("two") == [0, 1] and p.section("checkpoint").writers("four") == [0, 1, 2, 3]
    assert p.section("checkpoint").workload("four").zero_stage == 1 and p.section("checkpoint").workload("four").ranks == 4
    assert p.section("checkpoint").cost_bytes == p.section("checkpoint").checkpoint_bytes("four") > 0


@pytest.mark.parametrize("shapes, models, words", [
    ({"x": {**SHAPES["two"], "ranks": 3}}, ["x"], "ranks=3 is not allowed: must equal tp·pp·dp"),
    ({"x": {**SHAPES["four"], "zero_stage": 3}}, ["x"], "pp=2 is not allowed: must be 1 with zero_stage=3"),
    ({"llama3-8b": SHAPES["two"]}, ["llama3-8b"], "'llama3-8b' is not allowed: it is a llama3 model"),
    ({"x": {**SHAPES["two"], "depth": 3}}, ["x"], "depth=3 is not allowed: not a key"),
    ({"x": {k: v for k, v in SHAPES["two"].items() if k != "tp"}}, ["x"], "tp=None is not allowed: required"),
    ({"x": {**SHAPES["two"], "heads": 0}}, ["x"], "heads=0 is not allowed"),
    ({"x": SHAPES["two"]}, ["y"], "checkpoint.models: 'y' is not allowed: one of llama3-8b"),
])
def test_bad_shapes_are_refused_naming_the_key(tmp_path, shapes, models, words):
    with pytest.raises(config.ParamsError) as exc:
        _validate(tmp_path, models=models, shapes=shapes)
    assert "checkpoint" in str(exc.value) and words in str(exc.value), str(exc.value)


def test_cost_model_may_name_a_shape_and_nothing_unknown(tmp_path):
    with pytest.raises(config.ParamsError, match="checkpoint.cost.model: 'z' is not allowed"):
        _validate(tmp_path, **RUN, cost={"model": "z"})


# --------------------------------------------------------------------------- MPI
def _expected_calls(p, model: str, shift: int) -> dict:
    """write() and pread calls the protocol makes (every call moves a whole block here: files are page-sized
    multiples, buffered I/O on a local filesystem), fsyncs from the layout."""
    ck = p.section("checkpoint")
    files = ck_run._files(ck, model)
    per_file = lambda block: sum(math.ceil(f.bytes / block) for fs in files.values() for f in fs)   # noqa: E731
    return {"write": ck.saves * per_file(ck.write_block), "read": ck.restores * per_file(ck.read_block),
            "fsync": ck.saves * (sum(len(fs) for fs in files.values()) + len(files))}


@NEEDS_MPI
@pytest.mark.slow
@pytest.mark.e2e
def test_mpi_ranks_give_the_forked_figures_with_a_late_rank_and_the_rank_shift(tmp_path, monkeypatch):
    monkeypatch.setattr(ck_run, "FAULT", {"slow_rank": 1, "delay_s": 0.4})
    fork, fork_out = _run(tmp_path, "fork", **RUN)
    mpi, mpi_out = _run(tmp_path, "mpi", **RUN, launcher="mpi")         # mpirun -np 2, then -np 4
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == [] and descendants(os.getpid()) == []
    assert list(fork.columns) == list(mpi.columns)
    runs = pd.read_csv(mpi_out / "runs.csv")
    assert not columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS)
    assert set(fork.launcher) == {"fork"} and set(mpi.launcher) == {"mpi"} and set(mpi.hosts) == {1}
    f, m = fork.set_index("model"), mpi.set_index("model")
    p = _validate(tmp_path, **RUN)
    for model, n in (("two", 2), ("four", 4)):
        assert m.loc[model].writers == f.loc[model].writers == n
        for col in ("checkpoint_bytes", "files", "fsync_calls", "saves", "restores"):
            assert m.loc[model][col] == f.loc[model][col], (model, col)
        for row in (f.loc[model], m.loc[model]):                       # MLPerf's figure overstates, both ways
            assert row.save_overstatement_ratio > 1.3 and row.load_overstatement_ratio > 1.3, row
            assert row.save_rank_skew_s_mean >= 0.3
    for out in (fork_out, mpi_out):
        rk = pd.read_csv(out / "ranks.csv")
        loads = rk[rk.op == "load"]
        n = loads.groupby("model")["rank"].transform("nunique")
        assert (loads.source_rank == (loads["rank"] + 1) % n).all()   # rank r restored rank r+1's files
        assert (rk[rk["rank"] == 1].end_s >= 0.4).all()
        lat = pd.read_csv(out / "latency.csv")
        for model in ("two", "four"):
            counts = lat[lat.model == model].groupby("call")["count"].sum().to_dict()
            assert counts == _expected_calls(p, model, 1), (out.name, model, counts)
            row = pd.read_csv(out / "runs.csv").set_index("model").loc[model]
            assert 0 < row.write_latency_us_p50 <= row.write_latency_us_p99
            assert 0 < row.fsync_latency_us_p50 <= row.fsync_latency_us_p99
            assert 0 < row.read_latency_us_p50 <= row.read_latency_us_p99


@NEEDS_MPI
@pytest.mark.e2e
def test_a_dying_mpi_rank_fails_the_run_with_its_message_and_leaves_no_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(ck_run, "FAULT", {"fail_rank": 1})
    with pytest.raises(RuntimeError, match=r"rank 1 on \S+ failed: RuntimeError: injected failure of rank 1"):
        _run(tmp_path, "mpi", **{**RUN, "models": ["two"]}, launcher="mpi")
    assert not (tmp_path / "mpi" / "runs.csv").exists()
    assert descendants(os.getpid()) == [] and cgroups.leftover_dirs(owner_pid=os.getpid()) == []
    mpi_dir = tmp_path / "fast" / "storagebrief" / "checkpoint" / "mpi"
    assert not [d for d in mpi_dir.iterdir() if d.is_dir()]            # Open MPI's session folder went too


def test_missing_mpirun_is_a_clear_error_before_any_work(tmp_path):
    p = _validate(tmp_path, **RUN, launcher="mpi", mpi={"mpirun": "no-such-mpirun"})
    with pytest.raises(config.ParamsError, match="checkpoint.mpi.mpirun = 'no-such-mpirun' is not on PATH"):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None, progress="off")
    assert not (tmp_path / "fast" / "storagebrief" / "checkpoint" / "two").exists()


@NEEDS_MPI
def test_mpirun_that_cannot_start_the_ranks_is_refused_before_any_checkpoint(tmp_path):
    p = _validate(tmp_path, **RUN, launcher="mpi", mpi={"extra_args": ["--no-such-option"]})
    with pytest.raises(ValueError, match=r"checkpoint.launcher = mpi: the start-up check .* check checkpoint.mpi.extra_args"):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None, progress="off")
    assert not (tmp_path / "fast" / "storagebrief" / "checkpoint" / "two").exists()
    assert descendants(os.getpid()) == []


@NEEDS_MPI
@pytest.mark.slow
@pytest.mark.e2e
def test_kill_9_of_the_study_mid_checkpoint_leaves_no_mpi_rank_and_no_manifest(tmp_path):
    data = _data(tmp_path, **{**RUN, "models": ["four"]}, launcher="mpi")
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    others = [x.name for r, fs in ck_run._files(_validate(tmp_path, **data["checkpoint"]).section("checkpoint"),
                                                "four").items() if r != 2 for x in fs]
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(f), str(tmp_path / "out")], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    first = tmp_path / "fast" / "storagebrief" / "checkpoint" / "four" / "global_epoch1_step1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all((first / n).exists() for n in others):
        time.sleep(0.05)
    assert all((first / n).exists() for n in others), "the save never started"
    time.sleep(0.5)                                     # the other ranks' fsyncs returned; rank 2 still sleeps
    family = descendants(proc.pid)
    assert len(family) >= 5                              # mpirun and its 4 ranks
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_for(lambda: not any(process_alive(p) for p in family), 30), "MPI ranks outlived a kill -9 of their run"
    assert dataset.read_manifest(first) is None         # cut short: not a complete checkpoint


def test_ranks_on_another_host_are_put_on_the_barriers_release_with_their_own_durations():
    from storagebrief.studies.checkpoint.ranks import ONE_CLOCK, PER_RANK_CLOCK, RankPool
    from storagebrief.studies.checkpoint.rank_io import RankResult

    pool = RankPool([0, 1, 2], 4096, store={"folder": "/nonexistent"})      # never started: no rank opens it
    here = [RankResult(0, 0, 100.0, 101.0, 8, 1, 2, "a"), RankResult(1, 1, 100.2, 100.7, 8, 1, 2, "a")]
    release, got = pool.on_one_clock(100.0, [(r, 0.0) for r in here])
    assert release == 100.0 and got == here and pool.clock == ONE_CLOCK
    far = RankResult(2, 2, 5000.0, 5002.5, 8, 1, 2, "b")         # another host's CLOCK_MONOTONIC
    release, got = pool.on_one_clock(100.0, [*((r, 0.0) for r in here), (far, 100.0 - 5000.0)])
    assert release == 100.0 and pool.clock == PER_RANK_CLOCK
    assert (got[2].start, got[2].end) == (100.0, 102.5) and got[:2] == here


# --------------------------------------------------------------------------- validate and a hostfile (issue 36)
def test_validate_refuses_a_missing_mpi_hostfile(tmp_path):
    f = _params(tmp_path, launcher="mpi", mpi={"hostfile": str(tmp_path / "no-such-hostfile")})
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "checkpoint.mpi.hostfile" in res.stderr and "does not exist" in res.stderr
