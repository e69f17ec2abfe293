"""kit.ranks_mpi: a launch's workers as MPI ranks (end to end under mpirun: the emulate, checkpoint and KV-cache
studies' MPI tests); here what needs no mpirun: the watched pause and the Worker's importable name."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from storagebrief.core.causes import EnvironmentFailure
from storagebrief.kit.ranks import Worker
from storagebrief.kit.ranks_mpi import Mpi


def _setup(rank, n, config):
    return None


def _work(state, rank, msg, line):
    return rank


def test_mpirun_ending_in_a_pause_ends_it_at_once(tmp_path):
    """Under MPI a dead rank ends mpirun: a 60 s pause then fails with mpirun's cause at once."""
    err = tmp_path / "mpirun.err"
    err.write_text("mpirun noticed that process rank 3 with PID 123 on node h exited on signal 9 (Killed).\n")
    launch = Mpi(Worker("w", _setup, _work, ref="x:W"), [0, 1], mpi=None, work_dir=tmp_path, section="t")
    launch.session = SimpleNamespace(proc=subprocess.Popen([sys.executable, "-c", "raise SystemExit(137)"]),
                                     err_file=err)
    with pytest.raises(EnvironmentFailure, match=r"between operations \(mpirun exited with status 137\)"):
        launch.pause(60)


def test_an_mpi_worker_needs_an_importable_name():
    with pytest.raises(ValueError, match="needs ref='module:NAME'"):
        Mpi(Worker("w", _setup, _work), [0], mpi=None, work_dir=None, section="t")
