"""One launcher for a run's workers: N processes in the run's cgroup, forked on this host (`Forked`, here) or
MPI ranks on mpirun's hosts (`kit.ranks_mpi.Mpi`) — the two ways DLIO and MLPerf Storage run theirs — behind one
interface (`Launch`); kit.launch.open_launch picks the one a study's knobs name.

A study supplies a `Worker`: `setup(rank, n, config)` makes a worker's state before any clock (buffers, clients,
loaders) and `work(state, rank, msg, line)` does one operation from the start line and returns its result
(`line`: what a worker sees of the launch, a `Line`: `sync()`, a barrier across the workers (a training step's
all-reduce); `emit(x)`, a message to the launcher mid-operation; `tasks()`, a shared queue the workers take work
from, forked only). The launcher owns the rest. Every worker
dies with its parent, leaves Ctrl-C to the study (which stops it), joins the run's cgroup (the target's
throttle, a page-cache cap, a client check's cpuset; on the launching host only: a cgroup lives on one host)
or pins itself to the check's CPUs, and says ready. Per operation each worker says it arrived and waits at a start
line the launcher opens once all have, its clock reading the release; results come back in rank order. The start
line and the peers' barrier are kit.lines's: no wait or abort there waits on a dead worker. A worker that fails stops
the run with its own message (an OSError keeps its errno, so a full target is told apart); one that dies (kill
-9, the OOM killer) or could not be forked is the environment's failure (EnvironmentFailure: one line, exit 2);
nothing a launch starts outlives it.

Clocks: CLOCK_MONOTONIC is system-wide on Linux, so forked workers and ranks on the launching host share the
launcher's clock. A rank on another host reports its own reading at the release (`Done.release`);
`Launch.offset(done)` puts its instants on the launcher's axis, to within the start barrier's latency: the one
place remote clocks are rebased.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


from ..core import cgroups
from ..core.causes import EnvironmentFailure
from ..core.procs import die_with_parent, reap
from . import budget
from .client_check import apply_affinity
from .lines import Flag, PeerBarrier, StartLine

OP_TIMEOUT_S = 600.0          # one barrier wait (the start line, a step's sync)
WATCH_S = 0.2                 # how often a wait looks for a dead worker
STOPPED_S = 10.0              # a worker stopped this long (SIGSTOP, a debugger) ends the run: it cannot finish
STOP = ("storagebrief-stop",)         # a forked worker's last message (None is a message like any other)


@dataclass(frozen=True)
class Worker:
    """What a study's worker does; the launcher does everything else."""
    label: str                                # how messages name one: "accelerator", "checkpoint rank"
    setup: Callable[[int, int, Any], Any]     # (rank, n, config) -> state, before any clock
    work: Callable[[Any, int, Any, "Line"], Any]   # (state, rank, msg, line) -> result
    ref: str = ""                             # "package.module:NAME" where an MPI rank imports this Worker
    setup_in_cgroup: bool = True              # False: set up first, then join (warm-ups not throttled)
    warm_up: Callable[[Any], None] | None = None   # (config): before joining the cgroup (code pages not throttled)
    on_failure: Callable[[Any], None] | None = None   # (state): tidy up when work raises (a rank's files)
    exit_on_term: bool = False                # SIGTERM raises SystemExit, so the work's own cleanup runs
    own_session: bool = False                 # forked: each worker a session of its own (setsid), as fio's jobs
    # are: with autogroup scheduling (kernel.sched_autogroup_enabled) the CPU is shared between sessions first,
    # so N workers in the launcher's session had one session's share between them where fio's N jobs had N
    # (issue 59: the checkpoint ranks' write() phase took 1.4-2.2x fio's on a loaded machine)


class Line:
    """What a worker's work sees of its launch: the peers' barrier, messages to the launcher, the shared tasks."""

    def __init__(self, sync: Callable[[], None], emit: Callable[[Any], None] | None = None, task_q=None,
                 stop=None):
        self.sync, self._emit, self._task_q, self._stop = sync, emit, task_q, stop

    def stopping(self) -> bool:
        """True once the launcher asked an open-ended operation to end (Forked.ask_stop)."""
        return self._stop is not None and self._stop.is_set()

    def emit(self, payload: Any) -> None:
        if self._emit is None:
            raise RuntimeError("Line.emit: this launcher takes no messages mid-operation (MPI ranks)")
        self._emit(payload)

    def tasks(self):
        """The shared queue's items until the launcher's end marker (forked launches with tasks=True)."""
        if self._task_q is None:
            raise RuntimeError("Line.tasks: this launch has no shared task queue (Forked(..., tasks=True))")
        while (item := self._task_q.get()) != STOP:
            yield item


@dataclass
class Done:
    """One worker's operation."""
    rank: int
    host: str
    release: float            # the worker's CLOCK_MONOTONIC as it left the start line (its host's clock)
    result: Any


class WorkerTraceback(Exception):
    """A worker's traceback, chained under the error the launcher raises for it (`--debug` shows it)."""


def how_ended(code: int, oom: str | None = None) -> str:
    """How a worker ended; `oom`: the OOM killer that killed since the launch began (kit.budget.oom_cause)."""
    if code == -signal.SIGKILL and oom:
        return f"killed by signal 9 (SIGKILL) by {oom}"
    if code < 0:
        return (f"killed by signal {-code} (from outside the run: the OOM killer, kill -9, or a limit of the "
                "host)")
    return f"exited with status {code}"


def _state(pid: int | None) -> str:
    """The process's state letter in /proc ('T': stopped, 't': traced), '' when gone or unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


class Launch:
    """The interface both launchers give a study; use as a context manager."""
    launcher = ""

    def __init__(self, worker: Worker, ranks, config: Any = None, procs_files: list[str] | None = None,
                 affinity: list[int] | None = None, peers: bool = False, start_timeout_s: float = 120.0,
                 tasks: bool = False):
        self.worker, self.ranks, self.config, self.tasks = worker, list(ranks), config, tasks
        self.procs_files, self.affinity, self.peers = list(procs_files or []), list(affinity or []), peers
        self.start_timeout_s = start_timeout_s
        self.launch_host = socket.gethostname()
        self.host_facts: dict[str, dict] = {}

    def operate(self, msgs: Any = None, on_start: Callable[[], None] | None = None,
                timeout_s: float | None = None, on_emit: Callable[[int, Any], None] | None = None
                ) -> tuple[float, list[Done]]:
        """One operation by every worker from one start line: (the release on the launcher's clock, results by
        rank). msgs: one message for all, or {rank: message}; on_start runs just before the release; timeout_s:
        how long the operation may take (None: as long as every worker lives); on_emit(rank, x): what a worker
        emits meanwhile (forked)."""
        raise NotImplementedError

    def pause(self, seconds: float) -> None:
        """Sleep between operations, watched: a worker that dies meanwhile ends the run at once."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(WATCH_S, left))
            self.check_alive()

    def check_alive(self) -> None:
        raise NotImplementedError

    def offset(self, done: Done, release: float) -> float:
        """Seconds to add to a worker's clock readings to put them on the launcher's axis."""
        return 0.0 if done.host == self.launch_host else release - done.release

    def joined_cgroup(self, rank: int) -> bool:
        """Whether the worker is in the run's cgroup (an MPI rank on another host cannot be)."""
        return bool(self.procs_files)

    def hosts(self, done: list[Done]) -> list[str]:
        return sorted({d.host for d in done})

    def _msg(self, msgs, rank: int):
        return msgs[rank] if isinstance(msgs, dict) else msgs

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc) -> None:
        pass


# --------------------------------------------------------------------------- forked on this host
def _forked_main(launch: "Forked", rank: int, inbox, out_q) -> None:
    w = launch.worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the study handles Ctrl-C and stops us
    signal.signal(signal.SIGTERM, _exit if w.exit_on_term else signal.SIG_DFL)
    die_with_parent()
    if w.own_session:
        os.setsid()                                  # its own autogroup; it still dies with its parent
    state, host = None, socket.gethostname()
    try:
        if w.warm_up:
            w.warm_up(launch.config)
        if not w.setup_in_cgroup:
            state = w.setup(rank, len(launch.ranks), launch.config)
        if launch.procs_files:
            cgroups.join(launch.procs_files)
        apply_affinity(launch.affinity)               # a client check without a cgroup: pinned instead
        if w.setup_in_cgroup:
            state = w.setup(rank, len(launch.ranks), launch.config)
        out_q.put(("ready", rank, None))
        line = Line((lambda: launch.peer_barrier.wait(OP_TIMEOUT_S)) if launch.peers else _no_sync,
                    lambda x: out_q.put(("emit", rank, x)), launch.task_q, launch.stop_flag)
        while (msg := inbox.get()) != STOP:
            out_q.put(("arrived", rank, None))       # the launcher opens the line once all have arrived
            launch.start.wait(OP_TIMEOUT_S)
            release = time.monotonic()
            try:
                result = w.work(state, rank, msg, line)
            except BaseException:
                if launch.peers:
                    launch.peer_barrier.abort()       # the others stop at their next sync, not after its timeout
                if w.on_failure and state is not None:
                    w.on_failure(state)
                raise
            out_q.put(("done", rank, Done(rank, host, release, result)))
    except threading.BrokenBarrierError:
        out_q.put(("aborted", rank, None))
    except OSError as exc:
        out_q.put(("error", rank, (traceback.format_exc(), exc.errno, exc.strerror or str(exc), exc.filename)))
    except BaseException:
        out_q.put(("error", rank, (traceback.format_exc(), None, None, None)))


def _exit(*_) -> None:
    raise SystemExit(143)


def _no_sync() -> None:
    pass


class Forked(Launch):
    """The workers as forked processes of this one."""
    launcher = "fork"

    def __enter__(self) -> "Forked":
        ctx = mp.get_context("fork")
        n = len(self.ranks)
        self.start = StartLine(ctx, n)                         # the workers wait, this process opens it
        self.peer_barrier = PeerBarrier(ctx, n) if self.peers else None
        self.task_q = ctx.Queue() if self.tasks else None
        self.stop_flag = Flag(ctx)
        self.out_q = ctx.Queue()
        self.inboxes = {r: ctx.SimpleQueue() for r in self.ranks}
        self.oom_before = budget.oom_kills([Path(f).parent for f in self.procs_files])
        self.stopped_since: dict[int, float] = {}
        self.procs = [ctx.Process(target=_forked_main, args=(self, r, self.inboxes[r], self.out_q), daemon=True,
                                  name=f"{self.worker.label.replace(' ', '-')}-{r}") for r in self.ranks]
        self.host_facts = {}
        try:
            for i, pr in enumerate(self.procs):
                try:
                    pr.start()
                except OSError as exc:                        # EAGAIN (pids / nproc limit), ENOMEM
                    raise EnvironmentFailure(
                        f"could not start {self.worker.label} {self.ranks[i]} ({i + 1} of {n}): fork failed: "
                        f"{exc.strerror or exc}; the process, thread or memory limit of this host or user is "
                        f"reached (ulimit -u, the pids cgroup's pids.max; now: {budget.process_limits()}): use "
                        "fewer workers or launcher: mpi"
                    ) from None
            self._collect("ready", self.start_timeout_s)
        except BaseException as exc:
            self.__exit__(type(exc), exc, None)               # the workers already started go, without a hang
            raise
        return self

    def _dead(self, have) -> str | None:
        """Why a worker not in `have` is gone; one killed by a signal first (those it took down with a barrier
        leave with status 0)."""
        gone = [(r, pr.exitcode) for r, pr in zip(self.ranks, self.procs)
                if r not in have and pr.pid is not None and pr.exitcode is not None]
        for r, code in sorted(gone, key=lambda rc: rc[1] >= 0):
            oom = budget.oom_cause(self.oom_before) if code == -signal.SIGKILL else None
            return f"{self.worker.label} {r} died: {how_ended(code, oom)}"
        return self._stopped(have)

    def _stopped(self, have) -> str | None:
        """A worker not in `have` stopped (state T: SIGSTOP, SIGTSTP; t: a debugger) for STOPPED_S: it would hold
        the run until its operation's timeout in silence (a kv client: 20 × duration + 600 s)."""
        now = time.monotonic()
        for r, pr in zip(self.ranks, self.procs):
            if r in have or pr.pid is None or _state(pr.pid) not in ("T", "t"):
                self.stopped_since.pop(r, None)
                continue
            since = self.stopped_since.setdefault(r, now)
            if now - since >= STOPPED_S:
                return (f"{self.worker.label} {r} (pid {pr.pid}) is stopped (state T in /proc: SIGSTOP, Ctrl-Z or a "
                        f"debugger) for {STOPPED_S:.0f} s; the run cannot finish without it and ends: continue it "
                        f"(kill -CONT {pr.pid}) within {STOPPED_S:.0f} s to keep a run going")
        return None

    def _fail(self, why: str):
        return (EnvironmentFailure if "died: killed" in why or "is stopped" in why else RuntimeError)(why)

    def check_alive(self) -> None:
        if (why := self._dead({})) is not None:
            raise self._fail(why)

    def _collect(self, want: str, timeout_s: float, on_emit=None, late: str | None = None) -> dict:
        got: dict = {}
        deadline, broken = time.monotonic() + timeout_s, None
        while len(got) < len(self.ranks):
            try:
                kind, rank, payload = self.out_q.get(timeout=0.5)
            except queue.Empty:
                why = self._dead(got)
                if why is None and time.monotonic() > deadline:
                    why = (f"{self.worker.label} {broken}: its barrier was broken and no other {self.worker.label} "
                           "said why" if broken is not None else
                           late or f"{self.worker.label}s not {want} after {timeout_s:.0f} s")
                if why:
                    raise self._fail(why)
                continue
            if kind == "emit":
                if on_emit is None:
                    raise RuntimeError(f"{self.worker.label} {rank} emitted where nobody listens")
                on_emit(rank, payload)
                continue
            if kind == "aborted":           # another worker broke a barrier: its reason or its death follows
                broken, deadline = rank, min(deadline, time.monotonic() + 10)
                continue
            if kind == "error":
                tb, errno, strerror, filename = payload
                if errno is not None:       # kept as an OSError: a full target is told apart from a bug
                    raise OSError(errno, f"{self.worker.label} {rank}: {strerror}", filename) from WorkerTraceback(tb)
                raise RuntimeError(f"{self.worker.label} {rank} failed:\n{tb}")
            if kind != want:
                raise RuntimeError(f"{self.worker.label} {rank} sent {kind!r}, expected {want!r}")
            got[rank] = payload
        return got

    def put_tasks(self, items) -> None:
        """Items for the shared task queue, then one end marker per worker (before operate)."""
        for item in items:
            self.task_q.put(item)
        for _ in self.ranks:
            self.task_q.put(STOP)

    def operate(self, msgs: Any = None, on_start: Callable[[], None] | None = None,
                timeout_s: float | None = None, on_emit: Callable[[int, Any], None] | None = None
                ) -> tuple[float, list[Done]]:
        self.begin(msgs, on_start)
        return self.end(timeout_s, on_emit)

    def begin(self, msgs: Any = None, on_start: Callable[[], None] | None = None) -> float:
        """operate's first half: the workers released from the start line, working while the launcher goes on
        (a job beside a measured one); returns the release. end() collects, ask_stop() ends open-ended work."""
        self.stop_flag.clear()
        for r in self.ranks:
            self.inboxes[r].put(self._msg(msgs, r))
        if on_start:
            on_start()
        self.release = self._meet()
        return self.release

    def ask_stop(self) -> None:
        self.stop_flag.set()

    def end(self, timeout_s: float | None = None, on_emit: Callable[[int, Any], None] | None = None
            ) -> tuple[float, list[Done]]:
        got = self._collect("done", float("inf") if timeout_s is None else timeout_s, on_emit)
        return self.release, [got[r] for r in self.ranks]

    def _meet(self) -> float:
        """The start line: every worker's "arrived" read from the watched queue (a worker that dies or stops
        before it arrives ends the run at once, with its reason), then the line opened; returns the release."""
        self._collect("arrived", OP_TIMEOUT_S, late=f"{self.worker.label}s did not all reach the start line "
                                                    f"within {OP_TIMEOUT_S:.0f} s")
        self.check_alive()                  # one that arrived and died since: its reason now, not a release
        release = time.monotonic()
        self.start.open()
        return release

    def __exit__(self, *exc) -> None:
        started = [pr for pr in self.procs if pr.pid is not None]
        if exc[0] is None:
            for r in self.ranks:
                self.inboxes[r].put(STOP)
        else:
            self.start.abort()
            if self.peer_barrier is not None:
                self.peer_barrier.abort()
            for pr in started:
                if pr.is_alive():
                    pr.terminate()
                    if _state(pr.pid) in ("T", "t"):
                        pr.kill()                     # a stopped worker takes SIGTERM only once continued
        self._drain(started, 10)
        reap(started, 10)
        for q in filter(None, (self.out_q, self.task_q)):
            q.close()
            q.cancel_join_thread()

    def _drain(self, started, timeout_s: float) -> None:
        """Read what the workers still write until they are gone, so none blocks on a full pipe."""
        deadline = time.monotonic() + timeout_s
        while any(pr.is_alive() for pr in started) and time.monotonic() < deadline:
            try:
                self.out_q.get(timeout=0.1)
            except (queue.Empty, OSError, EOFError, ValueError):
                pass
