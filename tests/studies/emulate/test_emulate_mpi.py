"""Emulated accelerators as MPI ranks (`emulate.launcher: mpi`): the same figures as the forked
mode on one host, per-host rows, clear errors, and no rank outliving the study (issue 11)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroups, config
from storagebrief.studies.emulate import STUDY, run as emulate_run
from storagebrief.studies.emulate.plan import measured
from conftest import mpi_missing
from test_emulate import SMALL, _descendants_alive, _root_blkio_memory, params_dict


pytestmark = [pytest.mark.skipif(mpi_missing() is not None, reason=f"MPI unavailable: {mpi_missing()}"),
              pytest.mark.e2e]

THROTTLED = {**SMALL, "dataset_sizing": "memory_cap", "memory_limit_mib": 16, "num_files": 360,
             "epochs": 2, "accelerators": [2, 4],
             "workload_overrides": {"unet3d": {"record_bytes": 262144, "record_bytes_stdev": 0,
                                               "batch_size_by_accelerator": {"v100": 2},
                                               "compute_s": {"v100": 0.02}}}}


def _params(tmp_path, launcher: str, **extra):
    section = {**THROTTLED, "launcher": launcher, **extra}
    if _root_blkio_memory() is None:   # storage-bound runs: AU well below 100 %, a real comparison
        return config.validate(params_dict(
            tmp_path, section, targets=[{"name": "slow", "path": str(tmp_path / "slow"), "profile": "cap40"}],
            profiles={"cap40": {"read_mb_per_s": 40}}))
    return config.validate(params_dict(tmp_path, {**section, "dataset_sizing": "fixed"}))


@pytest.mark.slow
def test_mpi_ranks_give_the_forked_figures_on_one_host(tmp_path):
    fork = measured(STUDY.run(_params(tmp_path, "fork"), tmp_path / "fork", log=lambda *_: None))   # no client check rows
    ranks = STUDY.run(_params(tmp_path, "mpi"), tmp_path / "mpi", log=lambda *_: None)
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == []
    assert list(fork.columns) == list(ranks.columns)                    # one schema
    assert set(fork.launcher) == {"fork"} and set(ranks.launcher) == {"mpi"}
    assert set(ranks.hosts) == {1} and set(fork.hosts) == {1}
    f, m = fork.set_index("accelerators"), ranks.set_index("accelerators")
    for n in (2, 4):                                                    # mpirun -np 2 and -np 4
        assert m.loc[n].au_percent == pytest.approx(f.loc[n].au_percent, abs=5), n
        assert m.loc[n].samples_per_s == pytest.approx(f.loc[n].samples_per_s, rel=0.08), n
        assert m.loc[n].loader_bytes == f.loc[n].loader_bytes          # the same batches were read
        if n == 4 and _root_blkio_memory() is None:                   # both at the throttle's bound: the storage
            assert m.loc[n].limited_by == f.loc[n].limited_by == "storage"
    if _root_blkio_memory() is None:                                    # the ranks ran inside the throttle
        assert m.loc[4].cgroup_read_mb_per_s <= 40 * 1.15
        bound = m.loc[4].throttle_au_bound_percent
        assert bound - 8 <= m.loc[4].au_percent <= bound + 8
    hosts = pd.read_csv(tmp_path / "mpi" / "hosts.csv")                 # per-host rows
    by_run = hosts.groupby("run_id")[["accelerators", "loader_bytes"]].sum().sort_index()
    assert by_run.equals(ranks.set_index("run_id")[["accelerators", "loader_bytes"]].sort_index())
    assert set(pd.read_csv(tmp_path / "mpi" / "accelerators.csv").host) == set(hosts.host)


def test_missing_mpirun_is_a_clear_error_before_any_work(tmp_path):
    p = _params(tmp_path, "mpi", mpi={"mpirun": "no-such-mpirun"})
    with pytest.raises(config.ParamsError, match="emulate.mpi.mpirun = 'no-such-mpirun' is not on PATH"):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None)
    assert not list((tmp_path).rglob("*.npz"))                         # no dataset was written
    with pytest.raises(config.ParamsError, match=r"emulate.mpi = .*give mpi.hostfile or mpi.hosts, not both"):
        _params(tmp_path, "mpi", mpi={"hostfile": "h", "hosts": ["a:2"]})


@pytest.mark.parametrize("fault, message", [
    ({"fail_rank": 1, "fail_at_step": 3}, "MPI ranks failed during the run"),
    ({"fail_rank": 0, "fail_at_step": None}, "injected failure before the first step"),
])
def test_failed_rank_fails_the_run_and_leaves_nothing(tmp_path, monkeypatch, fault, message):
    p = _params(tmp_path, "mpi", accelerators=[2])
    monkeypatch.setattr(emulate_run, "FAULT", fault)
    with pytest.raises(RuntimeError, match=message):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None)
    assert not (tmp_path / "out" / "runs.csv").exists()
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == []
    assert _descendants_alive(str(tmp_path)) == []



MPI_RUNNING = {**THROTTLED, "launcher": "mpi", "accelerators": [2], "epochs": 50, "dataset_sizing": "fixed"}


def _mpi_study_running(tmp_path, env=None):
    """An emulate study with 2 MPI ranks on a throttled target, caught running (mpirun + 2 ranks up)."""
    section = MPI_RUNNING
    pf = tmp_path / "params.yaml"
    pf.write_text(yaml.safe_dump(params_dict(tmp_path, section, cold_cache=False)))
    code = "import sys; from storagebrief.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "emulate", "--params", str(pf), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    marker = str(tmp_path / "fast")                                     # the ranks' config file lives there
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if len([p for p in _descendants_alive(marker) if p != proc.pid]) >= 3:   # mpirun + 2 ranks
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read()
    time.sleep(1.0)
    return proc, marker

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_rank_outlives_the_study(tmp_path, sig):
    proc, marker = _mpi_study_running(tmp_path)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _descendants_alive(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _descendants_alive(marker) == []
    assert not (tmp_path / "o" / "runs.csv").exists()
    if sig == signal.SIGTERM:   # Open MPI's session and shared-memory folders went with the run (kill -9: next test)
        assert not list(tmp_path.rglob(".storagebrief-tmp-*"))
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(f".storagebrief-tmp-mpi-{proc.pid}-")]


@pytest.mark.slow
@pytest.mark.serial("compares the whole of /dev/shm before and after: another MPI run beside it adds segments")
def test_kill_9_of_an_mpi_run_leaves_no_open_mpi_files_after_the_next_run(tmp_path):
    """kill -9 of the study and of mpirun together (the OOM killer, a process-group kill): Open MPI
    cannot clean up. Its session directory (default /tmp/ompi.<host>.<uid>/pid.<mpirun>, ~8 MB) and
    shared-memory segments (default /dev/shm/vader_segment.*) were in the run's own folders, which
    the next run removes."""
    systmp = tmp_path / "systmp"                    # the study's system temp folder (TMPDIR), watched alone
    systmp.mkdir()
    shm_before = set(os.listdir("/dev/shm"))
    proc, marker = _mpi_study_running(tmp_path, env={**os.environ, "TMPDIR": str(systmp)})
    mpirun = [p for p in _descendants_alive(marker) if open(f"/proc/{p}/comm").read().strip() in ("mpirun", "orterun")]
    assert len(mpirun) == 1
    os.kill(proc.pid, signal.SIGKILL)
    os.kill(mpirun[0], signal.SIGKILL)
    proc.wait(timeout=30)
    # the next run (same target, a short one) removes what the killed one left
    again = {**MPI_RUNNING, "epochs": 1}
    STUDY.run(config.validate(params_dict(tmp_path, again, cold_cache=False)), tmp_path / "o2", log=lambda *_: None)
    assert _descendants_alive(marker) == []
    assert not [p.name for p in systmp.iterdir()], "Open MPI wrote into the system temp folder"
    assert not list(Path("/tmp").glob(f"ompi.*/pid.{mpirun[0]}")), "Open MPI's session directory is left in /tmp"
    new_shm = sorted(set(os.listdir("/dev/shm")) - shm_before)
    assert not [n for n in new_shm if n.startswith(("vader_segment.", "sm_segment.", ".storagebrief-tmp-"))], new_shm
    assert not list(tmp_path.rglob(".storagebrief-tmp-*")), "a scratch folder outlived the runs"
