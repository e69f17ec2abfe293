"""kit.launch: the launcher a study's knobs name, and the refusal before any work when mpirun is missing."""
from __future__ import annotations

import pytest

from storagebrief.core.config import ParamsError
from storagebrief.kit.launch import LaunchParams, check_launch, open_launch
from storagebrief.kit.ranks import Forked, Worker
from storagebrief.kit.ranks_mpi import Mpi

W = Worker("w", lambda rank, n, cfg: None, lambda state, rank, msg, line: rank, ref="x:W")


def test_the_knobs_name_the_launcher(tmp_path):
    assert isinstance(open_launch(W, [0]), Forked)
    assert isinstance(open_launch(W, [0], params=LaunchParams()), Forked)
    mpi = open_launch(W, [0, 1], params=LaunchParams(launcher="mpi"), work_dir=tmp_path, section="emulate")
    assert isinstance(mpi, Mpi) and mpi.section == "emulate" and mpi.ranks == [0, 1]


def test_launch_params_are_checked_and_mpirun_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="launcher"):
        LaunchParams(launcher="ssh")
    with pytest.raises(ValueError, match="client_check_repeats"):
        LaunchParams(client_check_repeats=0)
    check_launch(LaunchParams(), 4, tmp_path, "kv_cache", "kv_cache.clients")        # fork: nothing to check
    said = []
    with pytest.raises(ParamsError, match="kv_cache.mpi.mpirun = 'no-such-mpirun' is not on PATH"):
        check_launch(LaunchParams(launcher="mpi", mpi={"mpirun": "no-such-mpirun"}), 4, tmp_path, "kv_cache",
                     "kv_cache.clients", said.append)
    assert said == [] and not list(tmp_path.iterdir())
