"""Guarantees every registered study keeps (issue 10), tested through the CLI on tiny settings:
kill -9 mid-run leaves nothing a rerun does not remove, and a run without root completes with
its reasons. Every registered study gets these tests with the `tiny` settings of its Study record."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.core import config, leftovers
from another_user import nobodys_runtime_folder
from conftest import descendants, REPO, needs_root, process_alive

NOBODY = 65534
STUDIES = list(studies.REGISTRY.values())


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_every_registered_study_has_tiny_settings_that_validate(study, tmp_path):
    assert study.tiny, f"{study.name}: its Study record needs tiny={{...}} settings"
    config.validate({"targets": [{"name": "t", "path": str(tmp_path / "t")}], study.name: study.tiny}, root=REPO)


def _params(base: Path, name: str, unthrottled: bool = True) -> Path:
    # the throttled target first: its cgroup is made at the first run, so a kill -9 lands there without waiting
    # out the unthrottled target's runs (stream_inference: a whole Kafka cluster's runs, 18.7 s of the test)
    slow = [{"name": "slow", "path": str(base / "slow"), "profile": "hdd_7200"}]
    data = {"targets": slow + ([{"name": "fast", "path": str(base / "fast")}] if unthrottled else []),
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, name: studies.get(name).tiny}
    f = base / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f




def _ours(pid: int) -> list[Path]:
    return [d for parent in leftovers._all_controller_dirs() for d in parent.glob(f"storagebrief-*-{pid}-*")]


@pytest.fixture(scope="module")
def killed_mid_run(tmp_path_factory):
    """Every study started from the CLI at once, each killed -9 as soon as it has made a cgroup (what a kill leaves
    behind), then one `doctor --clean`: per study (its pid, its children then, those alive 30 s after the kill,
    what it left), and the sweep's run. All at once rather than one after another: nine start-ups on both cores
    (48 s of the serial phase, one core idle, became ~15 s) and one machine-wide sweep instead of nine."""
    base = tmp_path_factory.mktemp("kill9")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    runs = {}
    for study in STUDIES:
        (base / study.name).mkdir()
        f = _params(base / study.name, study.name)
        runs[study.name] = subprocess.Popen(
            [sys.executable, "-m", "storagebrief.cli", study.command, "--params", str(f), "--progress", "off",
             "--out", str(base / study.name / "a")], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    got: dict[str, SimpleNamespace] = {}
    deadline = time.monotonic() + 600
    while len(got) < len(runs) and time.monotonic() < deadline:
        for name, run in runs.items():
            if name not in got and (_ours(run.pid) or run.poll() is not None):
                made, family = bool(_ours(run.pid)), descendants(run.pid)
                if run.poll() is None:
                    os.kill(run.pid, signal.SIGKILL)
                run.wait()
                got[name] = SimpleNamespace(pid=run.pid, made=made, family=family)
        time.sleep(0.05)
    for name, run in runs.items():        # never made a cgroup in 600 s: stopped, and its test fails
        if name not in got:
            run.kill()
            run.wait()
            got[name] = SimpleNamespace(pid=run.pid, made=False, family=[])
    deadline = time.monotonic() + 30
    while any(process_alive(p) for g in got.values() for p in g.family) and time.monotonic() < deadline:
        time.sleep(0.1)
    for g in got.values():
        g.orphans = [p for p in g.family if process_alive(p)]
        g.left = _ours(g.pid)     # any storagebrief run on this machine sweeps them: one may have done it already
    clean = subprocess.run([sys.executable, "-m", "storagebrief.cli", "doctor", "--clean"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    return got, clean


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.serial("its doctor --clean sweeps the whole machine: beside other tests it acted on what they plant or "
                    "hold on purpose (a gateway registry test's entries, a test host being made)")
@needs_root("kill -9 leftovers are cgroups, which need root here")
@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_kill_9_mid_run_then_rerun_leaves_no_cgroup_and_no_orphan(study, killed_mid_run):
    got, clean = killed_mid_run
    run = got[study.name]
    assert run.made, "the run never created a cgroup to leave behind"
    assert not run.orphans, "children outlived a kill -9 of their run"
    # what it left is found and removed by the leftovers sweep every run starts with; `doctor --clean` runs
    # that sweep alone (a second whole run of each study cost minutes; that the next run of a study sweeps
    # is tested once, in tests/core/test_leftovers.py)
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert not run.left or f"dead process {run.pid}" in clean.stdout, clean.stdout
    assert not _ours(run.pid)


def _unprivileged_python() -> list[str]:
    """An interpreter the unprivileged user can execute, and re-execute from inside (the training
    study starts its jobs with sys.executable), with this environment's packages on PYTHONPATH."""
    probe = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    cands = [sys.executable, shutil.which(f"python3.{sys.version_info.minor}", path="/usr/bin:/usr/local/bin")]
    for cand in filter(None, cands):
        if subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", cand, "-c", probe],
                          capture_output=True, cwd="/").returncode == 0:
            return [cand]
    pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} the unprivileged user can run "
                f"({sys.executable} lies in a folder it cannot enter)")


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_runs_without_root_and_says_what_it_could_not_do(study):
    """As root: the study runs as uid 65534 (nobody); without root: as the user it is. On the throttled target
    alone: what a run without root cannot do (the profile's cgroup, drop_caches, memory limits) is asked for by
    that target; an unthrottled one beside it added a minute of runs and nothing refused."""
    base = Path(tempfile.mkdtemp(prefix="sb-nonroot-"))
    try:
        with nobodys_runtime_folder():      # made by the run (its output folder's lock): removed if left
            _run_as_nobody(study, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_as_nobody(study, base: Path) -> None:
    os.chmod(base, 0o777)
    f = _params(base, study.name, unthrottled=False)
    os.chmod(f, 0o644)
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "HOME": str(base), "MPLCONFIGDIR": str(base / "mpl"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), *site])}
    cmd = [study.command, "--params", str(f), "--out", str(base / "out"), "--progress", "off",
           "-S", f"{study.name}.repeats=1"]
    if os.geteuid() == 0:
        py = _unprivileged_python()
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *py]
    else:
        argv = [sys.executable]
    res = subprocess.run([*argv, "-m", "storagebrief.cli", *cmd], cwd=base, env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = pd.read_csv(base / "out" / "runs.csv")
    notes = " ".join(json.loads((base / "out" / "notes.json").read_text())["warnings"])
    assert len(runs) and not runs.emulated.any()
    assert "profile not applied" in notes and "slow" in notes
    methods = set(runs.cache_method.fillna("").astype(str))
    assert methods and all(m.startswith("fadvise_dontneed") for m in methods), methods   # not drop_caches
    if study.name == "train_resnet50":
        _trains_without_cgroups(base / "out", runs, notes)
    assert (base / "out" / "runs.csv").stat().st_mode & 0o044 == 0o044   # others may read the results


def _trains_without_cgroups(out: Path, runs: pd.DataFrame, notes: str) -> None:
    """Training with no cgroup at all (no memory limit, no job cgroup): the run completes, the memory-limited runs
    are skipped with a note, and what a cgroup would have counted is missing, not zero. (It once crashed: 'NoneType'
    object has no attribute 'memory_usage'; the run as nobody is that case, so no test of its own runs it again.)"""
    from storagebrief.core import columns
    from storagebrief.studies.train_resnet50 import metrics as trmet
    tiny = studies.get("train_resnet50").tiny
    assert list(runs.memory_setting) == ["none"] and (runs.status == "ok").all(), runs.get("failure_reason")
    r = runs.iloc[0]
    assert r.images == tiny["epochs"] * (tiny["dataset_images"] // tiny["batch_size"]) * tiny["batch_size"]
    assert r.memory_need_bytes > 0
    assert pd.isna(r.memory_peak_bytes) and pd.isna(r.oom_kills) and pd.isna(r.memory_failcnt)
    assert r.page_cache_mean_bytes > 0     # the dataset's cached pages are read without a cgroup (mincore)
    assert "memory-limited runs skipped (1 per target and repeat: 2.5:1)" in notes
    assert (out / "jobs.csv").exists() and not (out / "jobs").exists()
    assert columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, trmet.COLUMNS) == []
