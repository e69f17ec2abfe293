"""kit.mpi: the `mpi:` params section, mpirun's command line and environment, hostfile checks, and one
line saying why mpirun failed. (Real mpirun runs: tests/studies/*/test_*_mpi.py and test_*_hosts.py.)"""
from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from storagebrief.kit import mpi as kit_mpi


def test_params_take_a_hostfile_or_hosts_never_both():
    assert kit_mpi.MpiParams(hosts=["n1:8", "n2:8"]).hosts == ["n1:8", "n2:8"]
    with pytest.raises(ValidationError, match="not both"):
        kit_mpi.MpiParams(hostfile="/etc/hosts", hosts=["n1:8"])


def test_launcher_args_carry_the_hosts_oversubscription_and_the_environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/x/lib")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    cmd = kit_mpi.launcher_args("mpirun", 4, kit_mpi.MpiParams(hosts=["n1:2", "n2:2"], extra_args=["--mca", "a", "b"]))
    assert cmd[:3] == ["mpirun", "-np", "4"] and ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert "--oversubscribe" in cmd and cmd[cmd.index("--host") + 1] == "n1:2,n2:2"
    assert cmd[cmd.index("-x") + 1] == "PYTHONPATH" and "TF_CPP_MIN_LOG_LEVEL" not in cmd
    assert cmd[-3:] == ["--mca", "a", "b"]
    plain = kit_mpi.launcher_args("mpirun", 2, kit_mpi.MpiParams(oversubscribe=False))
    assert "--oversubscribe" not in plain and "--host" not in plain and "--hostfile" not in plain


def test_open_mpis_files_go_to_the_runs_folders(tmp_path):
    env = kit_mpi.mpi_env(tmp_path / "session", tmp_path / "shm")
    assert env["OMPI_MCA_orte_tmpdir_base"] == env["PRTE_MCA_prte_tmpdir_base"] == str(tmp_path / "session")
    assert all(env[f"OMPI_MCA_{k}"] == str(tmp_path / "shm") for k in kit_mpi.SHM_PARAMS)
    assert not any(k.endswith("backing_directory") for k in kit_mpi.mpi_env(tmp_path, None))


@pytest.mark.parametrize("text, words", [
    (None, "does not exist"),
    ("n1 slots=2\nn2 slots=two\n", "line 2: 'slots=two' is not key=number"),
    ("# only a comment\n\n", "lists no host"),
])
def test_a_bad_hostfile_is_one_line_naming_it(tmp_path, text, words):
    path = tmp_path / "hosts"
    if text is not None:
        path.write_text(text)
    with pytest.raises(kit_mpi.MpiStartupError, match=words) as exc:
        kit_mpi.check_hostfile(str(path), "emulate")
    assert str(exc.value).startswith(f"emulate.mpi.hostfile '{path}'") and "\n" not in str(exc.value)


def test_a_good_hostfile_passes(tmp_path):
    (tmp_path / "hosts").write_text("# clients\nn1 slots=8\n10.0.0.2 slots=4 max_slots=8  # second\nn3\n")
    assert kit_mpi.check_hostfile(str(tmp_path / "hosts"), "emulate") is None


def test_missing_mpirun_says_what_to_install():
    with pytest.raises(kit_mpi.MpiUnavailable, match="is not on PATH: install Open MPI"):
        kit_mpi.check_available("/nonexistent/mpirun", "checkpoint")


def test_the_cause_is_the_ranks_own_exception_before_open_mpis_boilerplate():
    text = ("rank 1 on hostB failed:\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
            "ValueError: block size 0 is not allowed\n"
            "--------------------------------------------------------------------------\n"
            "Primary job  terminated normally, but 1 process returned\n")
    assert kit_mpi.mpi_cause(text) == "rank 1 on hostB failed: ValueError: block size 0 is not allowed"
    silent = ("Primary job  terminated normally, but 1 process returned\n\n"
              "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
              "the job to be terminated. The first process to do so was:\n\n"
              "  Process name: [[1234,1],3]\n  Exit code:    7\n")
    assert "(rank 3 exited with code 7 without a message)" in kit_mpi.mpi_cause(silent)
