"""kit.mpi_session: the request/reply session over mpirun's stdin and stdout, both ends, without MPI: the
ranks' end (serve) runs in a child process with a one-rank stand-in for the communicator, and the
launcher's end (RankSession) talks to it as it talks to mpirun. (With mpirun: test_checkpoint_mpi.py.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO
from storagebrief.core.causes import EnvironmentFailure
from storagebrief.kit.mpi_session import RankSession

RANKS = """
import sys
from storagebrief.kit.mpi_session import serve

class OneRank:                 # what serve() uses of an mpi4py communicator, for a job of one rank
    def Get_rank(self):
        return 0
    def bcast(self, obj, root=0):
        return obj
    def gather(self, obj, root=0):
        return [obj]

def handle(payload):
    if payload.get("fail"):
        raise ValueError("asked to fail")
    return {"doubled": payload["x"] * 2}

try:
    serve(OneRank(), lambda: None, handle)
except Exception:              # as a rank's main says it (kit.mpi reads "rank N on HOST failed:" first)
    import traceback
    print("rank 0 on this-host failed:", file=sys.stderr)
    traceback.print_exc()
    sys.exit(1)
"""


def _session(tmp_path):
    err = tmp_path / "mpi-stderr.txt"
    cmd = [sys.executable, "-c", RANKS]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err.open("w"), text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    return RankSession(proc, err, "this-host", cmd), proc


def test_requests_get_every_ranks_reply_and_stop_ends_the_ranks(tmp_path):
    session, proc = _session(tmp_path)
    session.wait_ready(timeout_s=120)
    assert session.request({"x": 21}, timeout_s=120) == [{"doubled": 42}]
    assert session.request({"x": 1.5}, timeout_s=120) == [{"doubled": 3.0}]    # any picklable payload
    session.stop(timeout_s=120)
    assert proc.returncode == 0


def test_a_rank_that_fails_is_one_error_naming_its_cause(tmp_path):
    session, proc = _session(tmp_path)
    session.wait_ready(timeout_s=120)
    with pytest.raises(EnvironmentFailure) as exc:
        session.request({"fail": True}, timeout_s=120)
    assert "MPI ranks failed during a request" in str(exc.value)
    assert "rank 0 on this-host failed: ValueError: asked to fail" in str(exc.value)
    assert str(tmp_path / "mpi-stderr.txt") in str(exc.value)
    proc.wait(30)
