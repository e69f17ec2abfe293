"""kit.ranks, the one launcher: forked workers (start line, results by rank, a peers' barrier, a failure's own
message, a killed worker as the environment's failure, nothing left behind) and the MPI side's watched pause."""
from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from storagebrief.core.causes import EnvironmentFailure
from storagebrief.kit import ranks
from storagebrief.kit.ranks import Forked, Worker


def _setup(rank, n, config):
    if config.get("fail_setup") == rank:
        raise RuntimeError(f"setup of {rank} refused (test)")
    return {"rank": rank, "n": n}


def _work(state, rank, msg, line):
    if msg == "enospc" and rank == 1:
        raise OSError(errno.ENOSPC, "No space left on device")
    if msg == "raise" and rank == 0:
        raise ValueError("asked to fail")
    if msg == "die" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if msg == "sync":
        line.sync()
    if msg == "tasks":
        got = list(line.tasks())
        line.emit(len(got))
        return (rank, state["n"], sorted(got), os.getpid(), time.monotonic())
    return (rank, state["n"], msg, os.getpid(), time.monotonic())


W = Worker("test worker", _setup, _work)


def _children() -> set[int]:
    out = set()
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                out.add(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return out


def test_workers_meet_at_the_start_line_and_answer_in_rank_order():
    before = _children()
    with Forked(W, [3, 1, 2], {}, peers=True) as launch:
        release, done = launch.operate(None)               # None is a message like any other
        assert [d.rank for d in done] == [3, 1, 2] and all(d.result[2] is None for d in done)
        assert all(d.result[1] == 3 for d in done) and len({d.result[3] for d in done}) == 3
        assert all(d.release >= release - 0.5 and d.result[4] >= d.release for d in done)
        assert all(launch.offset(d, release) == 0 for d in done)          # one host: one clock
        _, done = launch.operate({3: "sync", 1: "sync", 2: "sync"})      # each its own message; peers meet
        assert [d.result[2] for d in done] == ["sync"] * 3
        pids = {d.result[3] for d in done}
    assert not (_children() - before) and not any(os.path.exists(f"/proc/{p}") for p in pids)


def test_a_workers_oserror_keeps_its_errno_and_other_errors_their_traceback():
    with pytest.raises(OSError) as exc:
        with Forked(W, [0, 1], {}) as launch:
            launch.operate("enospc")
    assert exc.value.errno == errno.ENOSPC and "test worker 1" in str(exc.value)
    with pytest.raises(RuntimeError, match=r"test worker 0 failed:\n(.|\n)*ValueError: asked to fail"):
        with Forked(W, [0, 1], {}) as launch:
            launch.operate("raise")
    with pytest.raises(RuntimeError, match="setup of 1 refused"):
        with Forked(W, [0, 1], {"fail_setup": 1}):
            pass


def test_a_killed_worker_is_the_environments_failure_in_one_line():
    t0 = time.monotonic()
    with pytest.raises(EnvironmentFailure, match=r"^test worker 1 died: killed by signal 9 \(from outside"):
        with Forked(W, [0, 1], {}, peers=True) as launch:
            launch.operate("die")
    assert time.monotonic() - t0 < 30


def test_a_pause_ends_when_a_worker_dies():
    with Forked(W, [0, 1], {}) as launch:
        os.kill(launch.procs[1].pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EnvironmentFailure, match="test worker 1 died"):
            launch.pause(60)
        assert time.monotonic() - t0 < 10


def test_workers_share_a_task_queue_and_emit_while_they_work():
    """preprocess's shape: every item taken by exactly one worker, messages streamed to the launcher."""
    seen = []
    with Forked(W, [0, 1], {}, tasks=True) as launch:
        launch.put_tasks(range(50))
        _, done = launch.operate("tasks", on_emit=lambda rank, x: seen.append((rank, x)))
    taken = [i for d in done for i in d.result[2]]
    assert sorted(taken) == list(range(50)) and sorted(r for r, _ in seen) == [0, 1]
    assert sum(x for _, x in seen) == 50
    with pytest.raises(RuntimeError, match="emitted where nobody listens"):
        with Forked(W, [0], {}, tasks=True) as launch:
            launch.put_tasks([1])
            launch.operate("tasks")


def test_other_hosts_are_offset_onto_the_launchers_clock():
    launch = Forked(W, [0, 1])
    assert launch.offset(ranks.Done(1, "elsewhere", 5000.0, None), 100.0) == 100.0 - 5000.0
    assert launch.offset(ranks.Done(0, launch.launch_host, 99.0, None), 100.0) == 0.0
    assert not launch.joined_cgroup(0) and Forked(W, [0], procs_files=["/x/cgroup.procs"]).joined_cgroup(0)
