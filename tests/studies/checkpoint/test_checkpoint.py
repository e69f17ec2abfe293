"""checkpoint: the MLPerf Storage v3.0 protocol through the engine, MLPerf-style vs honest on a late rank,
fsync really issued, the rank shift, retain, bad params before any work, kill -9 mid-checkpoint."""
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

from storagebrief import studies
from storagebrief.core import columns, config
from storagebrief.core.checkpoint_workloads import GIB, files_of_rank, layout, layout_bytes, workload
from storagebrief.studies.checkpoint import dataset, metrics
from storagebrief.studies.checkpoint.framework import COLUMNS as FRAMEWORK_COLUMNS
from storagebrief.studies.checkpoint import run as ck_run
from conftest import descendants, REPO, process_alive

STUDY = studies.get("checkpoint")
W = workload("llama3-8b")
SMALL = {"models": ["llama3-8b"], "scale": 65536, "saves": 2, "restores": 1, "pause_s": 0.0, "retain": 2,
         "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 2, "repeats": 1,
         "cost": {"modes": []}}      # the cost sweep: test_checkpoint_cost_sweep.py
MLPERF_KEYS = [f"{op}_checkpoint_{what}" for op in ("save", "load")
               for what in ("io_mean_GB_per_second", "io_stdev_GB_per_second", "duration_mean_seconds",
                            "duration_stdev_seconds")] + ["checkpoint_size_GB"]


def _data(tmp_path: Path, targets=("fast",), **ck) -> dict:
    ts = [{"name": n, "path": str(tmp_path / n), **({"profile": "hdd_7200"} if n == "slow" else {})}
          for n in targets]
    return {"targets": ts, "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "checkpoint": {**SMALL, **ck}}


def _run(tmp_path: Path, targets=("fast",), out_name: str = "out", **ck):
    params = config.validate(_data(tmp_path, targets, **ck), root=REPO)
    out = tmp_path / out_name
    frame = STUDY.run(params, out, log=lambda *_: None, progress="off")
    return frame, out


@pytest.mark.slow
@pytest.mark.e2e
def test_tiny_run_through_the_engine_on_two_targets(tmp_path):
    # without the framework's TensorFlow job (a start-up per target here): its rows and columns are test_framework.py's
    frame, out = _run(tmp_path, ("fast", "slow"), **{**STUDY.tiny, "framework": {"scenarios": []}})
    runs = pd.read_csv(out / "runs.csv")
    assert (runs.status == "ok").all()
    assert not columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS)
    assert {c.name for c in metrics.COLUMNS if c not in FRAMEWORK_COLUMNS} <= set(runs.columns)
    runs = runs[runs.sweep == "protocol"]       # the cost sweep's rows: test_checkpoint_cost_sweep.py
    assert len(runs) == 2 * STUDY.tiny["repeats"]
    nbytes = layout_bytes(layout(W, STUDY.tiny["scale"]))
    assert not (out / "mlperf_summary.json").exists()          # MLPerf's keys are in MLPerf's tree, per run
    for t in ("fast", "slow"):
        folders = sorted((out / "mlperf" / "results" / t / "checkpointing" / "llama3-8b").iterdir())
        assert len(folders) == STUDY.tiny["repeats"]
        for d in folders:
            s = json.loads((d / "summary.json").read_text())["metric"]
            assert set(s) == set(MLPERF_KEYS) | {"checkpoint_size_GB"} and s["checkpoint_size_GB"] == nbytes / GIB
            assert json.loads((d / "storagebrief.json").read_text())["figures"][
                "honest_save_checkpoint_io_mean_GB_per_second"] > 0
    ck = pd.read_csv(out / "checkpoints.csv")
    rk = pd.read_csv(out / "ranks.csv")
    assert (runs.checkpoint_bytes == nbytes).all() and (ck.bytes == nbytes).all()
    assert len(ck) == len(runs) * (STUDY.tiny["saves"] + STUDY.tiny["restores"])
    per_op = rk.groupby(["run_id", "op", "index"]).bytes.sum()
    assert (per_op == nbytes).all() and len(per_op) == len(ck)
    assert (rk.groupby(["run_id", "op", "index"]).size() == W.ranks).all()
    assert (ck.max_rank_s >= ck.min_rank_s).all() and (ck.max_rank_s >= ck.rank0_s - 1e-3).all()
    # the honest rate is the bytes over the last rank's end; MLPerf's over rank 0's own duration
    assert ck.honest_gib_per_s.tolist() == pytest.approx((ck.bytes / GIB / ck.max_rank_s).tolist())
    assert (runs.honest_save_gib_per_s <= runs.mlperf_save_gib_per_s * (1 + 1e-9)).all()
    for name in ("study.json", "notes.json", "inventory.json", "metrics.json"):
        json.loads((out / name).read_text())


@pytest.mark.slow
@pytest.mark.e2e
def test_a_late_rank_makes_mlperfs_figure_overstate(tmp_path, monkeypatch):
    monkeypatch.setattr(ck_run, "FAULT", {"slow_rank": 5, "delay_s": 0.4})
    frame, out = _run(tmp_path, saves=2, restores=2)
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.honest_save_gib_per_s < row.mlperf_save_gib_per_s and row.save_overstatement_ratio > 1.5
    assert row.honest_load_gib_per_s < row.mlperf_load_gib_per_s and row.load_overstatement_ratio > 1.5
    assert row.save_rank_skew_s_mean >= 0.3 and row.save_duration_s_mean >= 0.4
    rk = pd.read_csv(out / "ranks.csv")
    assert (rk[rk["rank"] == 5].end_s >= 0.4).all() and (rk[rk["rank"] == 0].end_s < 0.4).all()


def _logging(monkeypatch, log: Path):
    """os.fsync and os.open wrapped (the forked ranks inherit the wrappers): each call appends
    'process<TAB>what<TAB>path' to `log`."""
    import multiprocessing as mp
    real_fsync, real_open = os.fsync, os.open

    def note(what: str, path: str) -> None:
        fd = real_open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{mp.current_process().name}\t{what}\t{path}\n".encode())
        finally:
            os.close(fd)

    def fsync(fd):
        real_fsync(fd)
        note("fsync", os.readlink(f"/proc/self/fd/{fd}"))

    def open_(path, flags, *a, **k):
        fd = real_open(path, flags, *a, **k)
        if "global_epoch" in str(path) and flags & (os.O_WRONLY | os.O_RDWR) == 0 and not flags & os.O_DIRECTORY:
            note("read", str(path))
        return fd

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "open", open_)


@pytest.mark.slow
@pytest.mark.e2e
def test_fsync_is_issued_for_every_file_and_folder_and_restores_read_the_shifted_ranks_files(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    _logging(monkeypatch, log)
    frame, out = _run(tmp_path, saves=2, restores=2, retain=2, rank_shift=3)
    monkeypatch.undo()
    calls = [line.split("\t") for line in log.read_text().splitlines()]
    synced = {(p, c) for c, w, p in calls if w == "fsync" and "global_epoch" in p}
    root = tmp_path / "fast" / "storagebrief" / "checkpoint" / "llama3-8b"
    for step in (1, 2):
        folder = root / f"global_epoch1_step{step}"
        for r in range(W.ranks):
            for f in files_of_rank(W, r, SMALL["scale"]):
                assert (str(folder / f.name), f"checkpoint-rank-{r}") in synced, (step, r, f.name)
            assert (str(folder), f"checkpoint-rank-{r}") in synced    # each rank fsyncs the folder
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.fsync_calls == 2 * (2 * W.ranks + W.ranks)          # per save: 2 files and the folder per rank
    reads = {}
    for c, w, p in calls:
        if w == "read" and c.startswith("checkpoint-rank-"):
            reads.setdefault(int(c.rsplit("-", 1)[1]), set()).add(Path(p).name)
    for r in range(W.ranks):
        assert reads[r] == {f.name for f in files_of_rank(W, (r + 3) % W.ranks, SMALL["scale"])}, r
    rk = pd.read_csv(out / "ranks.csv")
    loads = rk[rk.op == "load"]
    assert (loads.source_rank == (loads["rank"] + 3) % W.ranks).all()


@pytest.mark.slow
@pytest.mark.e2e
def test_retain_keeps_the_last_k_complete_checkpoints(tmp_path):
    frame, out = _run(tmp_path, saves=5, restores=1, retain=2)
    root = tmp_path / "fast" / "storagebrief" / "checkpoint" / "llama3-8b"
    left = sorted(d.name for d in root.iterdir())
    assert left == ["global_epoch1_step4", "global_epoch1_step5"]
    assert all(dataset.complete(root / d) for d in left)
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.deletes == 3 and row.delete_s_mean > 0


@pytest.mark.parametrize("change, key, words", [
    ({"models": ["llama3-9b"]}, "checkpoint.models", "llama3-8b, llama3-70b"),
    ({"mode": "subset"}, "checkpoint", "subset mode is for models with more than 8 ranks"),
    ({"mode": "all"}, "checkpoint.mode", "default"),
    ({"ranks": 4}, "checkpoint", "ranks=4 is not allowed"),
    ({"scale": 0.5}, "checkpoint.scale", "greater than or equal to 1"),
    ({"retain": 0}, "checkpoint.retain", "greater than or equal to 1"),
    ({"readers_per_rank": 0}, "checkpoint.readers_per_rank", "greater than or equal to 1"),
    ({"write_block_mib": 0}, "checkpoint.write_block_mib", "greater than or equal to 1"),
    ({"colour": 1}, "checkpoint.colour", "unknown key"),
    ({"save_io": "odirect"}, "checkpoint.save_io", "'buffered' or 'direct'"),
    *(({"cost": c}, f"checkpoint.cost.{k}", w) for c, k, w in (
        ({"modes": ["sometimes"]}, "modes", "'none', 'sync' or 'async'"),
        ({"modes": ["sync", "sync"]}, "modes", "listed twice"),
        ({"intervals_steps": [0]}, "intervals_steps", "at least 1"),
        ({"steps": 0}, "steps", "greater than or equal to 1"),
        ({"compute_s": -1}, "compute_s", "greater than or equal to 0"),
        ({"model": "llama3-9b"}, "model", "llama3-8b, llama3-70b"),
        ({"staging": "pinned"}, "staging", "'reused' or 'fresh'"),
        ({"overhead_limit_percent": 0}, "overhead_limit_percent", "greater than 0"),
        ({"colour": 1}, "colour", "unknown key"))),
])
def test_bad_params_name_the_key(tmp_path, change, key, words):
    with pytest.raises(config.ParamsError) as exc:
        config.validate(_data(tmp_path, **change), root=REPO)
    assert key in str(exc.value) and words in str(exc.value), str(exc.value)


def _cli(tmp_path: Path, data: dict, *extra, env=None, **kw):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "checkpoint", "--params", str(f), "--out",
                           str(tmp_path / "out"), "--progress", "off", *extra], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib"), **(env or {})},
                          timeout=300, **kw)


@pytest.mark.e2e
def test_bad_params_and_no_space_are_refused_before_any_work(tmp_path):
    res = _cli(tmp_path, _data(tmp_path, ranks=2))
    assert res.returncode != 0 and "ranks=2 is not allowed" in res.stderr
    assert not (tmp_path / "fast" / "storagebrief").exists() and not (tmp_path / "out").exists()
    res = _cli(tmp_path, _data(tmp_path, scale=1, retain=1000))      # 1001 x 105 GiB
    assert res.returncode != 0 and "checkpoint.retain" in res.stderr, res.stderr
    assert not (tmp_path / "fast" / "storagebrief").exists()


KILL_SCRIPT = """
import sys
from storagebrief import studies
from storagebrief.core import config
from storagebrief.studies.checkpoint import run
run.FAULT = {"slow_rank": 2, "delay_s": 30}
studies.get("checkpoint").run(config.load(sys.argv[1]), sys.argv[2], log=lambda *_: None, progress="off")
"""




@pytest.mark.slow
@pytest.mark.e2e
def test_kill_9_mid_checkpoint_leaves_no_incomplete_manifest_and_no_process(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(_data(tmp_path, saves=3, restores=1)))
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(f), str(tmp_path / "out")], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    root = tmp_path / "fast" / "storagebrief" / "checkpoint" / "llama3-8b"
    first = root / "global_epoch1_step1"
    deadline = time.monotonic() + 120
    # mid-checkpoint: the other ranks' files are written, rank 2 is still "writing"
    while time.monotonic() < deadline and len(list(first.glob("*.pt"))) < 2 * (W.ranks - 1):
        time.sleep(0.05)
    assert len(list(first.glob("*.pt"))) >= 2 * (W.ranks - 1), "the save never started"
    family = descendants(proc.pid)
    assert len(family) >= W.ranks
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while any(process_alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in family if process_alive(p)], "ranks outlived a kill -9 of their run"
    folders = [d for d in root.iterdir() if d.is_dir()]
    assert folders and all(dataset.complete(d) for d in folders if dataset.read_manifest(d) is not None)
    assert dataset.read_manifest(first) is None              # cut short: no manifest
    # the next run removes the manifest-less folder and says so
    frame, out = _run(tmp_path, out_name="again", saves=1, restores=1)
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    assert any("without its manifest" in n for n in notes)
    assert all(dataset.complete(d) for d in root.iterdir())
