"""The forked workers' start line and peers' barrier, made so that nothing waits on a dead process.

A multiprocessing Barrier (or Event) wakes its sleepers through a Condition whose notify then waits for every
woken sleeper to acknowledge; a sleeper SIGKILLed meanwhile (the OOM killer, kill -9) never does, and the
notifier (an abort, the last arrival, a wait that timed out) blocks forever. Here every wait is a semaphore
acquire in short slices that also reads a shared "broken" word and its own deadline, and breaking a line sets
that word and posts the semaphores: no call waits for another process to answer. The context (`ctx`) is the
launcher's fork context; a line is made before the workers are forked and shared with them by the fork.
"""
from __future__ import annotations

import threading
import time

POLL_S = 0.05      # how often a waiter reads the broken word (an abort also posts its semaphore: it wakes at once)


class Flag:
    """A yes/no shared by forked processes, set, cleared and read without a lock (a byte in shared memory)."""

    def __init__(self, ctx):
        self._word = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._word.value = 1

    def clear(self) -> None:
        self._word.value = 0

    def is_set(self) -> bool:
        return bool(self._word.value)


def _take(sem, deadline: float, broken: Flag) -> bool:
    """Acquire `sem` before `deadline` unless the line is broken; False (nothing held) when it broke or time
    ran out."""
    while not broken.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if sem.acquire(timeout=min(POLL_S, left)):
            if not broken.is_set():
                return True
            sem.release()                 # broken meanwhile: the permit goes back (a lock stays free)
            return False
    return False


class StartLine:
    """The start line as the launcher holds it: each worker tells the launcher it arrived (the launcher's
    watched queue, where a dead worker is seen) and waits here; the launcher opens the line once all have
    arrived. A worker's wait raises BrokenBarrierError when the line was aborted or its timeout passed."""

    def __init__(self, ctx, parties: int):
        self.parties = parties
        self._go = ctx.Semaphore(0)
        self.broken = Flag(ctx)

    def wait(self, timeout: float) -> None:
        if not _take(self._go, time.monotonic() + timeout, self.broken):
            raise threading.BrokenBarrierError

    def open(self) -> None:
        """Let every party go: one permit each (a party takes one per operation)."""
        for _ in range(self.parties):
            self._go.release()

    def abort(self) -> None:
        self.broken.set()
        self.open()


class PeerBarrier:
    """A reusable barrier for `parties` processes: a lock-held count and two turnstiles (the second keeps a fast
    party from entering the next round before all have left this one). A wait that times out breaks it for all,
    as threading.Barrier's does; once broken it stays broken and every wait raises BrokenBarrierError."""

    def __init__(self, ctx, parties: int):
        self.parties = parties
        self._mutex = ctx.Lock()
        self._count = ctx.RawValue("i", 0)          # parties in the current phase, under _mutex
        self._turnstiles = (ctx.Semaphore(0), ctx.Semaphore(0))
        self.broken = Flag(ctx)

    def wait(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        for step, full, turnstile in ((1, self.parties, self._turnstiles[0]), (-1, 0, self._turnstiles[1])):
            if not _take(self._mutex, deadline, self.broken):
                self._break()
            try:
                self._count.value += step
                if self._count.value == full:   # the last one in (or out) lets the whole round through
                    for _ in range(self.parties):
                        turnstile.release()
            finally:
                self._mutex.release()
            if not _take(turnstile, deadline, self.broken):
                self._break()

    def _break(self) -> None:
        self.abort()
        raise threading.BrokenBarrierError

    def abort(self) -> None:
        """Break the barrier: every waiter raises BrokenBarrierError within POLL_S, now and at later waits."""
        self.broken.set()
        for turnstile in self._turnstiles:
            for _ in range(self.parties):
                turnstile.release()
