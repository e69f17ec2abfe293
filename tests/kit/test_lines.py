"""kit.lines: the peers' barrier passes n parties round after round, an abort wakes its waiters, and a dead party
(SIGKILLed asleep, or holding the barrier's lock) makes the others' waits fail instead of hang; the start line
lets its parties go once opened and wakes them broken when aborted."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from storagebrief.kit.lines import PeerBarrier, StartLine

CTX = mp.get_context("fork")
ROUNDS = 25


def _party(target, *args):
    pr = CTX.Process(target=target, args=args, daemon=True)
    pr.start()
    return pr


def _asleep(pid: int) -> bool:
    try:
        return "futex" in open(f"/proc/{pid}/wchan").read()
    except OSError:
        return False


def _until(check, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def _waits(barrier, out, timeout_s=None, rounds=1):
    try:
        for _ in range(rounds):
            barrier.wait(timeout_s)
        out.put("passed")
    except threading.BrokenBarrierError:
        out.put("broken")


def _in_step(barrier, progress, me, out):
    """Each round: say which round this party reached, wait, and check that every party reached it too."""
    behind = 0
    for k in range(1, ROUNDS + 1):
        progress[me] = k
        barrier.wait(60)
        behind += any(p < k for p in progress)
    out.put(behind)


def _returns_soon(call, timeout_s: float = 30) -> None:
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"{call} did not return"


def test_n_parties_pass_together_round_after_round():
    barrier, progress, out = PeerBarrier(CTX, 3), CTX.RawArray("i", 3), CTX.Queue()
    procs = [_party(_in_step, barrier, progress, me, out) for me in range(3)]
    got = [out.get(timeout=120) for _ in procs]
    for pr in procs:
        pr.join(30)
    assert got == [0, 0, 0] and not barrier.broken.is_set()


def test_an_abort_wakes_every_waiter_broken_and_the_barrier_stays_broken():
    barrier, out = PeerBarrier(CTX, 3), CTX.Queue()
    procs = [_party(_waits, barrier, out) for _ in range(2)]
    _until(lambda: all(_asleep(pr.pid) for pr in procs))
    barrier.abort()
    assert [out.get(timeout=30) for _ in procs] == ["broken", "broken"]
    with pytest.raises(threading.BrokenBarrierError):
        barrier.wait(30)
    for pr in procs:
        pr.join(30)


def test_a_party_killed_asleep_makes_the_others_waits_fail_and_abort_returns():
    barrier, out = PeerBarrier(CTX, 3), CTX.Queue()
    dead = _party(_waits, barrier, out)
    _until(lambda: _asleep(dead.pid))
    os.kill(dead.pid, signal.SIGKILL)
    dead.join(30)
    live = [_party(_waits, barrier, out, 1.0) for _ in range(2)]      # they time out: the barrier breaks
    assert [out.get(timeout=60) for _ in live] == ["broken", "broken"]
    _returns_soon(barrier.abort)
    for pr in live:
        pr.join(30)


def _holds_the_lock_and_dies(barrier):
    barrier._mutex.acquire()
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_party_killed_holding_the_lock_leaves_no_one_stuck():
    barrier, out = PeerBarrier(CTX, 3), CTX.Queue()
    _party(_holds_the_lock_and_dies, barrier).join(30)
    live = [_party(_waits, barrier, out) for _ in range(2)]            # no timeout: only an abort frees them
    _until(lambda: all(_asleep(pr.pid) for pr in live))
    _returns_soon(barrier.abort)
    assert [out.get(timeout=30) for _ in live] == ["broken", "broken"]
    for pr in live:
        pr.join(30)


def test_the_start_line_lets_its_parties_go_once_opened_and_wakes_them_broken_when_aborted():
    line, out = StartLine(CTX, 2), CTX.Queue()
    procs = [_party(_waits, line, out, 60, 3) for _ in range(2)]
    for _ in range(3):                   # one permit each per opening: three openings, three passes each
        _until(lambda: all(_asleep(pr.pid) or not pr.is_alive() for pr in procs))
        line.open()
    assert [out.get(timeout=60) for _ in procs] == ["passed", "passed"]
    procs = [_party(_waits, line, out, 60) for _ in range(2)]
    dead = _party(_waits, line, out, 60)
    _until(lambda: all(_asleep(pr.pid) for pr in procs + [dead]))
    os.kill(dead.pid, signal.SIGKILL)
    _returns_soon(line.abort)
    assert [out.get(timeout=30) for _ in procs] == ["broken", "broken"]
    for pr in procs + [dead]:
        pr.join(30)
