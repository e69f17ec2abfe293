"""The writing ranks: one forked process each on this host, living for one run (saves then restores).

Each rank, before any clock: dies with its parent (PR_SET_PDEATHSIG), joins the run's cgroup (the
target's throttle; a client-check run's cpuset too, or pins itself to its half of the CPUs) and fills its write buffer once with incompressible bytes (kit.checkpoint), reused
for every write, as DLIO does). Then per operation the parent sends it (op, folder, files) and all
ranks and the parent meet at a barrier; from its release each rank saves or loads (rank_io.py, the
primitives the MPI launcher's ranks run too: writes, fsync of every file and the folder, preads by
reader threads, per-call latency histograms) and reports its start and end (CLOCK_MONOTONIC,
system-wide on Linux, so the parent puts every rank on one clock from the earliest release), its bytes,
files and fsync calls. A failed rank stops the run: the barrier is broken, the others are
terminated, RuntimeError says who; a rank killed from outside (OOM killer, kill -9) or a fork the
kernel refused (pids / nproc limits) is the environment: EnvironmentFailure, one line, exit 2, like
the MPI launcher. Stopping never waits on the ranks' queue: ranks die on SIGTERM without writing to
it, and the parent drains it while it reaps them (a rank flushing its last message never blocks).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import resource
import signal
import threading
import time
import traceback
from pathlib import Path

from ...core import cgroups
from ...core.causes import EnvironmentFailure
from ...core.procs import die_with_parent, reap
from ...kit.checkpoint import incompressible
from ...kit.client_check import apply_affinity
from .rank_io import ONE_CLOCK, RankResult, RankStore, operate

BARRIER_TIMEOUT_S = 600.0
WATCH_S = 0.2                 # how often a wait between operations looks for a dead rank


def _rank(rank: int, buf_bytes: int, procs_files: list[str], fault: dict | None, barrier, inbox, out_q,
          s3: dict | None = None, affinity: list[int] | None = None) -> None:
    """One rank (a forked process): buffer (and S3 client) once, then an operation per message until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles Ctrl-C and stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)    # not the parent's handler: stopped means gone
    die_with_parent()
    try:
        if procs_files:
            cgroups.join(procs_files)
        apply_affinity(affinity or [])                 # client check without a cgroup: pinned instead
        buf = incompressible(buf_bytes)                # generated before any clock
        if s3:
            buf = memoryview(bytes(buf))               # as bytes, once: what botocore sends without a copy
        store = RankStore(s3) if s3 else None          # its own client, made before any clock
        out_q.put(("ready", rank, None))
        while (msg := inbox.get()) is not None:
            barrier.wait(BARRIER_TIMEOUT_S)
            out_q.put(("done", rank, operate(rank, msg, buf, fault, store=store)))
    except threading.BrokenBarrierError:
        out_q.put(("aborted", rank, "barrier broken (another rank failed)"))
    except BaseException:
        out_q.put(("error", rank, traceback.format_exc()))


def watched_sleep(seconds: float, check) -> None:
    """Sleep `seconds`, calling check() every WATCH_S (it raises to end the wait)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(WATCH_S, left))
        check()


class RankPool:
    """The run's rank processes; use as a context manager (they are always reaped)."""

    launcher, clock = "fork", ONE_CLOCK

    def __init__(self, ranks: list[int], buf_bytes: int, procs_files: list[str] | None = None,
                 fault: dict | None = None, start_timeout_s: float = 120.0, s3: dict | None = None,
                 affinity: list[int] | None = None):
        ctx = mp.get_context("fork")
        self.ranks = list(ranks)
        self.barrier = ctx.Barrier(len(self.ranks) + 1)       # the ranks and this process
        self.out_q = ctx.Queue()
        self.inboxes = {r: ctx.SimpleQueue() for r in self.ranks}
        self.procs = [ctx.Process(target=_rank, args=(r, buf_bytes, procs_files or [], fault, self.barrier,
                                                      self.inboxes[r], self.out_q, s3, affinity),
                                  daemon=True, name=f"checkpoint-rank-{r}") for r in self.ranks]
        self.start_timeout_s = start_timeout_s
        self.ok = False

    def __enter__(self) -> "RankPool":
        try:
            for i, pr in enumerate(self.procs):
                try:
                    pr.start()
                except OSError as exc:        # EAGAIN (pids / nproc limit), ENOMEM
                    raise EnvironmentFailure(
                        f"could not start checkpoint rank {self.ranks[i]} ({i + 1} of {len(self.ranks)}): fork "
                        f"failed: {exc.strerror or exc}; the process, thread or memory limit of this host or "
                        "user is reached (ulimit -u, the pids cgroup's pids.max): use fewer ranks (mode: "
                        "subset) or launcher: mpi") from None
            self._collect("ready", self.start_timeout_s)
        except BaseException as exc:
            self.__exit__(type(exc), exc, None)      # the ranks already started go, without a hang
            raise
        return self

    def _dead(self, have) -> str | None:
        """Why a rank not in `have` is gone; a rank killed by a signal first (the others it took down
        with the barrier leave with status 0)."""
        gone = [(r, pr.exitcode) for r, pr in zip(self.ranks, self.procs)
                if r not in have and pr.pid is not None and pr.exitcode is not None]
        for r, code in sorted(gone, key=lambda rc: rc[1] >= 0):
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return f"checkpoint rank {r} died: {how}" + (
                " (from outside the run: the OOM killer, kill -9, or a limit of the host)" if code < 0 else "")
        return None

    def pause(self, seconds: float) -> None:
        """MLPerf's pause before an operation, watched: a rank that dies in it ends the run at once (a kill -9
        in a 20 s pause was noticed only at the next barrier, 18 s later)."""
        def check() -> None:
            if (why := self._dead({})) is not None:
                raise (EnvironmentFailure if "died: killed" in why else RuntimeError)(why)
        watched_sleep(seconds, check)

    def _collect(self, want: str, timeout_s: float) -> dict:
        got: dict = {}
        deadline = time.monotonic() + timeout_s
        while len(got) < len(self.ranks):
            try:
                kind, rank, payload = self.out_q.get(timeout=0.5)
            except queue.Empty:
                why = self._dead(got) or (f"ranks not {want} after {timeout_s:.0f} s"
                                          if time.monotonic() > deadline else None)
                if why:
                    raise (EnvironmentFailure if "died: killed" in why else RuntimeError)(why)
                continue
            if kind != want:
                raise RuntimeError(f"checkpoint rank {rank} failed:\n{payload}")
            got[rank] = payload
        return got

    def operate(self, op: str, folder: Path, files_by_rank: dict[int, tuple[int, list]], block: int,
                readers: int = 1) -> tuple[float, list[RankResult]]:
        """One save or load by every rank from one barrier; returns (release instant, results by rank).
        files_by_rank: rank -> (source rank, [(file name, bytes)])."""
        for r in self.ranks:
            source, files = files_by_rank[r]
            self.inboxes[r].put((op, str(folder), source, files, block, readers))
        self._meet()
        release = time.monotonic()
        got = self._collect("done", BARRIER_TIMEOUT_S)
        out = [got[r] for r in self.ranks]
        return min([release, *(r.start for r in out)]), out

    def _meet(self) -> None:
        """The parent's barrier wait, watched: a rank that dies before it arrives (kill -9, the OOM killer)
        breaks the barrier at once instead of after BARRIER_TIMEOUT_S."""
        stop, seen = threading.Event(), []

        def watch() -> None:
            while not stop.wait(WATCH_S):
                if (why := self._dead({})) is not None:
                    seen.append(why)
                    self.barrier.abort()
                    return
        watcher = threading.Thread(target=watch, daemon=True, name="checkpoint-rank-watch")
        watcher.start()
        try:
            self.barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            why = seen[0] if seen else self._dead({})
            if why is None:
                raise RuntimeError(f"checkpoint ranks did not all reach the barrier within {BARRIER_TIMEOUT_S:.0f} s") \
                    from None
            raise (EnvironmentFailure if "died: killed" in why else RuntimeError)(why) from None
        finally:
            stop.set()
            watcher.join()

    def __exit__(self, *exc) -> None:
        started = [pr for pr in self.procs if pr.pid is not None]
        if exc[0] is None:
            for r in self.ranks:
                self.inboxes[r].put(None)
        else:
            self.barrier.abort()
            for pr in started:
                if pr.is_alive():
                    pr.terminate()
        self._drain(started, 10)
        reap(started, 10)
        self.out_q.close()
        self.out_q.cancel_join_thread()

    def _drain(self, started, timeout_s: float) -> None:
        """Read what the ranks still write until they are gone, so none blocks on a full pipe."""
        deadline = time.monotonic() + timeout_s
        while any(pr.is_alive() for pr in started) and time.monotonic() < deadline:
            try:
                self.out_q.get(timeout=0.1)
            except (queue.Empty, OSError, EOFError, ValueError):
                pass


# --------------------------------------------------------------------------- the ranks' budget
# What the forked checkpoint ranks may take of this machine, checked before any work (validate too).
#
# Every rank is a process of its own on this host (launcher: fork) holding a write buffer, and on
# restore `readers_per_rank` reader threads each with a read buffer; the parent keeps a few pipes per
# rank. Before a rank is forked the run is refused, with the numbers, when
# - tasks (the ranks, their reader threads and queue threads) exceed what the pids cgroup limit of this
#   process (and its ancestors) leaves, or RLIMIT_NPROC for a user who is not root;
# - the parent's pipes exceed what RLIMIT_NOFILE leaves;
# - the buffers plus a process's own memory exceed what the run may use: the memory cgroup's limit
#   less its usage (this process's cgroup and its ancestors) or MemAvailable, whichever is smaller.
# Measured on the 2-core VM (a rank with a 1 MiB buffer, pandas imported in the parent): 3.0-4.5 open
# files in the parent and 4.0 MiB private dirty memory per rank; the budget takes 5 files and 8 MiB.
MIB = 1 << 20
GIB = 1 << 30
RANK_OWN_BYTES = 8 * MIB      # a forked rank's own memory beside its buffers (measured 4.0 MiB, ×2)
PARENT_FILES_PER_RANK = 5     # pipes the parent holds per rank (measured 3.0-4.5)
TASKS_PER_RANK_BESIDE_READERS = 2   # the rank's main thread and its queue's feeder thread
MEMORY_SHARE = 0.8            # of what the run may use: the rest for the page cache, the parent, the monitor
S3_CLIENT_BYTES = 96 * MIB    # a rank's own boto3 client on S3 targets (measured 45.7 MiB private dirty, ×2)


def _cgroup_dirs(controller: str) -> list[Path]:
    """This process's cgroup directory and its ancestors for `controller` (v1 or v2), nearest first."""
    from ...core import cgroups

    try:
        _, d = cgroups.controller_dir(controller)
    except (cgroups.CgroupUnavailable, OSError):
        return []
    out = [d]
    while d.parent != d and (d.parent / "cgroup.procs").exists():
        d = d.parent
        out.append(d)
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text == "max" or not text.lstrip("-").isdigit() else int(text)


def pids_left() -> tuple[int, str] | None:
    """(tasks this process may still start, where the limit is) under the pids cgroup, or None."""
    best = None
    for d in _cgroup_dirs("pids"):
        limit, now = _read_int(d / "pids.max"), _read_int(d / "pids.current")
        if limit is not None and now is not None and (best is None or limit - now < best[0]):
            best = (limit - now, f"pids.max {limit:,} in {d} ({now:,} in use)")
    return best


def nproc_left() -> tuple[int, str] | None:
    """(tasks this user may still start, RLIMIT_NPROC), or None: root is not held by it, or no limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if os.geteuid() == 0 or soft == resource.RLIM_INFINITY:
        return None
    uid, mine = os.getuid(), 0
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                st = (p / "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                mine += int(fields.get("Threads", "1").strip())
    return soft - mine, f"RLIMIT_NPROC {soft:,} for uid {uid} ({mine:,} tasks running; ulimit -u)"


def files_left() -> tuple[int, str]:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    return soft - open_now, f"RLIMIT_NOFILE {soft:,} ({open_now:,} open; ulimit -n)"


def memory_left() -> tuple[int, str] | None:
    """(bytes the run may use, where that comes from): MemAvailable or the memory cgroup's room."""
    best = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                best = (int(line.split()[1]) * 1024, "MemAvailable")
    except (OSError, ValueError, IndexError):
        pass
    for d in _cgroup_dirs("memory"):
        limit = _read_int(d / "memory.max") or _read_int(d / "memory.limit_in_bytes")
        usage = _read_int(d / "memory.current") or _read_int(d / "memory.usage_in_bytes")
        if limit is None or usage is None or limit >= 1 << 60:
            continue
        if best is None or limit - usage < best[0]:
            best = (limit - usage, f"the memory cgroup {d} (limit {limit / GIB:,.2f} GiB, {usage / GIB:,.2f} GiB used)")
    return best


def rank_buffers(p, model: str) -> tuple[int, int]:
    """(write buffer, one read buffer) bytes per rank, as the run sizes them: a block, at most the largest file."""
    from ...core.checkpoint_workloads import files_of_rank

    w = p.workload(model)
    largest = max(f.bytes for r in p.writers(model) for f in files_of_rank(w, r, p.scale))
    return min(p.write_block, largest), min(p.read_block, largest)


def check_budget(p, s3: bool = False) -> None:
    """Refuse (ValueError, one line with the numbers) a fork-launched model this machine cannot hold; `s3`:
    an S3 target is measured, so every rank also holds its own boto3 client."""
    if p.launcher != "fork":
        return          # MPI ranks live on their hosts: mpirun and kit.mpi.preflight check them there
    for model in p.models:
        n = len(p.writers(model))
        tasks = n * (TASKS_PER_RANK_BESIDE_READERS + p.readers_per_rank)
        for left in (pids_left(), nproc_left()):
            if left is not None and tasks > left[0]:
                raise ValueError(
                    f"checkpoint.models: {model} forks {n:,} ranks, {tasks:,} tasks with readers_per_rank = "
                    f"{p.readers_per_rank}, more than the {max(left[0], 0):,} this run may start ({left[1]}): "
                    "use mode: subset (8 ranks), lower readers_per_rank, launcher: mpi across hosts, or raise the "
                    "limit")
        files, where = files_left()
        if n * PARENT_FILES_PER_RANK > files:
            raise ValueError(f"checkpoint.models: {model} forks {n:,} ranks, about {n * PARENT_FILES_PER_RANK:,} "
                             f"open files in the parent, more than the {files:,} left ({where}): use mode: subset, "
                             "launcher: mpi, or raise the limit")
        write, read = rank_buffers(p, model)
        client = S3_CLIENT_BYTES if s3 else 0
        per_rank = write + p.readers_per_rank * read + RANK_OWN_BYTES + client
        room = memory_left()
        if room is not None and n * per_rank > MEMORY_SHARE * room[0]:
            raise ValueError(
                f"checkpoint: {model}'s {n:,} ranks need {n * per_rank / GIB:,.2f} GiB ({n:,} × ("
                f"{write / MIB:,.0f} MiB write buffer + readers_per_rank {p.readers_per_rank} × read_block "
                f"{read / MIB:,.0f} MiB + {RANK_OWN_BYTES / MIB:.0f} MiB per process"
                + (f" + {client / MIB:.0f} MiB for its S3 client" if client else "") + ")), more than "
                f"{MEMORY_SHARE:.0%} of the {room[0] / GIB:,.2f} GiB this run may use ({room[1]}): lower "
                "readers_per_rank or read_block_mib / write_block_mib, raise scale, or use mode: subset")
