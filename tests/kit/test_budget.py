"""The one budget (kit.budget): what a run may start and use, read from the machine (cgroups v1/v2, rlimits,
MemAvailable) and checked in one line with the numbers; the launcher's share every forking study inherits; a
fork that fails anyway names the limit with its numbers; the OOM killer told apart from a kill -9."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from storagebrief.kit import budget
from storagebrief.kit.launch import check_fork
from child_cgroup import child_cgroup, run_in

ROOM = budget.Room(pids=(40, "pids.max 40 in /x (0 in use)"), nproc=None, files=(100, "RLIMIT_NOFILE 128 (28 open)"),
                   memory=(1 << 30, "the memory cgroup /x (limit 1.00 GiB, 0.00 GiB used)"))


def test_check_refuses_each_kind_with_the_numbers_and_what_to_lower():
    with pytest.raises(ValueError, match=r"^s\.n = 64: 128 tasks \(64 × 2\), more than the 40 this run may start "
                                         r"\(pids\.max 40 in /x \(0 in use\)\): lower s\.n$"):
        budget.check("s.n = 64:", tasks=128, how="64 × 2", lower="lower s.n", room=ROOM)
    with pytest.raises(ValueError, match=r"about 320 open files, more than the 100 left \(RLIMIT_NOFILE 128"):
        budget.check("s.n = 64:", files=320, lower="lower s.n", room=ROOM)
    with pytest.raises(ValueError, match=r"need 0\.90 GiB \(a × b\), more than 80% of the 1\.00 GiB this run may "
                                         r"use \(the memory cgroup /x"):
        budget.check("s:", memory=int(0.9 * (1 << 30)), how="a × b", lower="x", room=ROOM)
    budget.check("s:", tasks=40, files=100, memory=int(0.8 * (1 << 30)), room=ROOM)    # exactly what is left fits


def test_the_launchers_share_is_checked_for_every_forking_study(monkeypatch):
    monkeypatch.setattr(budget, "pids_left", lambda: (40, "pids.max 40 in /x (0 in use)"))
    with pytest.raises(ValueError, match=r"emulate: 64 forked workers \(emulate.accelerators\), 128 tasks .*pids.max 40"):
        check_fork(64, "emulate", "emulate.accelerators")
    check_fork(20, "emulate", "emulate.accelerators")


_ROOM = "import json; from storagebrief.kit import budget; r = budget.Room.now(); print(json.dumps([r.pids, r.memory]))"


def test_the_room_reads_a_memory_cgroups_limit():
    with child_cgroup("memory", {"memory.limit_in_bytes": 600 << 20}) as d:
        res = run_in(d, [sys.executable, "-c", _ROOM])
    assert res.returncode == 0, res.stderr
    _, memory = json.loads(res.stdout)
    assert str(d) in memory[1] and "limit 0.59 GiB" in memory[1] and 0 < memory[0] < 600 << 20


def test_the_room_reads_a_pids_limit():
    with child_cgroup("pids", {"pids.max": 50}) as d:
        res = run_in(d, [sys.executable, "-c", _ROOM])
    assert res.returncode == 0, res.stderr
    pids, _ = json.loads(res.stdout)
    assert pids[1].startswith(f"pids.max 50 in {d}") and 0 < pids[0] < 50


_FORK = textwrap.dedent("""
    import sys
    from storagebrief.errors import error_line, expected
    from storagebrief.kit.ranks import Forked, Worker
    W = Worker("test worker", lambda r, n, c: None, lambda s, r, m, l: None)
    try:
        with Forked(W, range(64)):
            pass
    except Exception as exc:
        print(error_line(exc) if expected(exc) else f"BUG {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2 if expected(exc) else 1)
""")


def test_a_fork_that_fails_anyway_names_the_limit_with_its_numbers():
    """The launcher's check bypassed (a limit lowered after it): the fork's EAGAIN names pids.max with its value."""
    with child_cgroup("pids", {"pids.max": 30}) as d:
        res = run_in(d, [sys.executable, "-c", _FORK], timeout=120)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "fork failed" in res.stderr
    assert f"pids.max 30 in {d}" in res.stderr, res.stderr


_OOM = textwrap.dedent("""
    import sys
    from storagebrief.errors import error_line, expected
    from storagebrief.kit.ranks import Forked, Worker
    def hog(state, rank, msg, line):
        return bytearray(64 << 20) * 16 if rank == 1 else None      # 1 GiB in a 300 MiB cgroup
    W = Worker("test worker", lambda r, n, c: None, hog)
    try:
        with Forked(W, range(2)) as launch:
            launch.operate(None, timeout_s=120)
    except Exception as exc:
        print(error_line(exc) if expected(exc) else f"BUG {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2 if expected(exc) else 1)
""")


def test_a_worker_killed_by_the_oom_killer_names_the_cgroup_and_its_limit():
    with child_cgroup("memory", {"memory.limit_in_bytes": 300 << 20}) as d:
        res = run_in(d, [sys.executable, "-c", _OOM], timeout=120)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "test worker 1 died: killed by signal 9 (SIGKILL) by the OOM killer: the memory cgroup" in res.stderr
    assert str(d) in res.stderr and "limit 0.29 GiB" in res.stderr

