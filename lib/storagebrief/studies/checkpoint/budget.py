"""What the forked checkpoint ranks may take of this machine, checked before any work (validate too).

Every rank is a process of its own on this host (launcher: fork) holding a write buffer, and on
restore `readers_per_rank` reader threads each with a read buffer; the parent keeps a few pipes per
rank. Before a rank is forked the run is refused, with the numbers, when
- tasks (the ranks, their reader threads and queue threads) exceed what the pids cgroup limit of this
  process (and its ancestors) leaves, or RLIMIT_NPROC for a user who is not root;
- the parent's pipes exceed what RLIMIT_NOFILE leaves;
- the buffers plus a process's own memory exceed what the run may use: the memory cgroup's limit
  less its usage (this process's cgroup and its ancestors) or MemAvailable, whichever is smaller.
Measured on the 2-core VM (a rank with a 1 MiB buffer, pandas imported in the parent): 3.0-4.5 open
files in the parent and 4.0 MiB private dirty memory per rank; the budget takes 5 files and 8 MiB.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30
RANK_OWN_BYTES = 8 * MIB      # a forked rank's own memory beside its buffers (measured 4.0 MiB, ×2)
PARENT_FILES_PER_RANK = 5     # pipes the parent holds per rank (measured 3.0-4.5)
TASKS_PER_RANK_BESIDE_READERS = 2   # the rank's main thread and its queue's feeder thread
MEMORY_SHARE = 0.8            # of what the run may use: the rest for the page cache, the parent, the monitor


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


def check(p) -> None:
    """Refuse (ValueError, one line with the numbers) a fork-launched model this machine cannot hold."""
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
        per_rank = write + p.readers_per_rank * read + RANK_OWN_BYTES
        room = memory_left()
        if room is not None and n * per_rank > MEMORY_SHARE * room[0]:
            raise ValueError(
                f"checkpoint: {model}'s {n:,} ranks need {n * per_rank / GIB:,.2f} GiB ({n:,} × ("
                f"{write / MIB:,.0f} MiB write buffer + readers_per_rank {p.readers_per_rank} × read_block "
                f"{read / MIB:,.0f} MiB + {RANK_OWN_BYTES / MIB:.0f} MiB per process)), more than "
                f"{MEMORY_SHARE:.0%} of the {room[0] / GIB:,.2f} GiB this run may use ({room[1]}): lower "
                "readers_per_rank or read_block_mib / write_block_mib, raise scale, or use mode: subset")
