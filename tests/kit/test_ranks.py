"""kit.ranks, the one launcher: forked workers (start line, results by rank, a peers' barrier, a failure's own
message, a killed worker as the environment's failure, nothing left behind) and the MPI side's watched pause."""
from __future__ import annotations

import errno
import multiprocessing as mp
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
    if msg == "hold":                    # the last rank keeps its peers waiting at the sync until asked to stop
        while rank == state["n"] - 1 and not line.stopping():
            time.sleep(0.01)
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


def _waiting(pids, timeout_s: float = 60) -> None:
    """Until every pid's main thread sleeps on a futex (a barrier's, a semaphore's) three looks in a row."""
    deadline, seen = time.monotonic() + timeout_s, 0
    while seen < 3:
        if time.monotonic() > deadline:
            pytest.fail(f"workers {pids} never waited on a futex")
        asleep = []
        for pid in pids:
            try:
                asleep.append("futex" in open(f"/proc/{pid}/wchan").read())
            except OSError:
                asleep.append(False)
        seen = seen + 1 if all(asleep) else 0
        time.sleep(0.02)


def _outcome_in_a_child(scenario, timeout_s: float = 120):
    """scenario()'s outcome, run in a forked child so that a launcher that hangs fails the test instead of the
    suite: ("ok", its result) or (the exception's type name, its message)."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        try:
            send.send(("ok", scenario()))
        except BaseException as exc:
            send.send((type(exc).__name__, str(exc)))
    pr = ctx.Process(target=child)           # not daemonic: it forks the workers
    pr.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            pytest.fail(f"the launcher hung: no outcome after {timeout_s:.0f} s")
        return recv.recv()
    finally:
        if pr.is_alive():
            pr.kill()                        # its workers die with it (die_with_parent)
        pr.join()


def _ends_without_a_hang(ranks_: list[int], peers: bool, kill_rank_1) -> None:
    """A launch whose worker 1 is SIGKILLed by kill_rank_1(launch) ends with that worker's death, in a child
    with a deadline, and leaves no worker behind."""
    def scenario():
        with pytest.raises(EnvironmentFailure, match=r"^test worker 1 died: killed by signal 9") as exc:
            with Forked(W, ranks_, {}, peers=peers) as launch:
                kill_rank_1(launch)
        return str(exc.value), sorted(_children())
    kind, got = _outcome_in_a_child(scenario)
    assert kind == "ok", got
    assert got[0].startswith("test worker 1 died") and got[1] == []


def test_a_worker_killed_at_the_start_line_ends_the_run_with_its_reason_and_no_hang():
    """The OOM killer took an accelerator waiting at the start line: the launcher hung in the barrier's abort."""
    def kill_at_the_line(launch):
        def kill_one():
            _waiting([pr.pid for pr in launch.procs])
            os.kill(launch.procs[1].pid, signal.SIGKILL)
        launch.operate("plain", on_start=kill_one)
    _ends_without_a_hang([0, 1], False, kill_at_the_line)


def test_a_worker_killed_while_its_peers_wait_at_a_sync_ends_the_run_and_nothing_hangs():
    def kill_at_the_sync(launch):
        launch.begin("hold")
        _waiting([launch.procs[0].pid, launch.procs[1].pid])
        os.kill(launch.procs[1].pid, signal.SIGKILL)
        launch.end()
    _ends_without_a_hang([0, 1, 2], True, kill_at_the_sync)


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


def _session(state, rank, msg, line):
    return os.getsid(0), os.getpid()


def test_workers_with_their_own_session_each_lead_one_and_still_end_with_the_launch():
    """own_session (the checkpoint ranks, issue 59): with autogroup scheduling the CPU is shared between sessions
    first, and fio's jobs each lead a session of their own; the workers still die with the launch."""
    mine = os.getsid(0)
    with Forked(Worker("test worker", _setup, _session, own_session=True), [0, 1], {}) as launch:
        _, done = launch.operate(None)
        got = [d.result for d in done]
    assert all(sid == pid != mine for sid, pid in got) and len({sid for sid, _ in got}) == 2
    assert not any(os.path.exists(f"/proc/{pid}") for _, pid in got)
    with Forked(Worker("test worker", _setup, _session), [0], {}) as launch:       # the default: the launcher's
        assert launch.operate(None)[1][0].result[0] == mine
