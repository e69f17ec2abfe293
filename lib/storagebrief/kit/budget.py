"""What a run may start and hold on this machine, checked before any work (by `validate` too): one budget for
every study that forks workers or buffers data.

The room (`Room.now()`): tasks this process may still start under the pids cgroup (this cgroup and its
ancestors, v1 or v2) and, for a user who is not root, under RLIMIT_NPROC (threads count as tasks for both);
files under RLIMIT_NOFILE; and the memory the run may use: the memory cgroup's limit less its usage (this cgroup
and its ancestors) or MemAvailable, whichever is smaller. `check` refuses a need beyond the room with one line
(ValueError: exit 2) naming what needs it, how the numbers add up, the limit and what to lower.

After the fact: `oom_kills()` counts the OOM killer's kills (the memory cgroups and the host), so a worker killed
by signal 9 is told apart as the OOM killer's, naming the cgroup's limit (`oom_cause`).
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30
MEMORY_SHARE = 0.8            # of what the run may use: the rest for the page cache, the parent, the monitor
PROCESS_OWN_BYTES = 8 * MIB   # a forked worker's own memory beside its buffers (measured 4.0 MiB, ×2)
FILES_PER_WORKER = 5          # pipes the parent holds per forked worker (measured 3.0-4.5)
TASKS_PER_WORKER = 2          # a forked worker's main thread and its queue's feeder thread
# the compiled S3 client (core.s3mover): its resident peak (VmHWM) measured 8.5 MiB started, 13.0 / 15.1 / 28.4 MiB
# after 8 MiB GETs at 1 / 4 / 16 connections: 12 MiB + 1 MiB a connection (its 1 MiB read buffer) holds them all
S3_CLIENT_IDLE_BYTES = 12 * MIB
S3_CLIENT_CONNECTION_BYTES = 1 * MIB

Left = tuple[int, str]        # (how many are left, where the limit is: the numbers behind it)


def _cgroup_dirs(controller: str, extra: list[Path] = ()) -> list[Path]:
    """This process's cgroup directory and its ancestors for `controller` (v1 or v2), nearest first."""
    from ..core import cgroup_tree

    try:
        _, d = cgroup_tree.controller_dir(controller)
    except (cgroup_tree.CgroupUnavailable, OSError):
        return list(extra)
    out = [*extra, d]
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


def pids_left() -> Left | None:
    """Tasks this process may still start under the pids cgroup, or None (no limit, no controller)."""
    best = None
    for d in _cgroup_dirs("pids"):
        limit, now = _read_int(d / "pids.max"), _read_int(d / "pids.current")
        if limit is not None and now is not None and (best is None or limit - now < best[0]):
            best = (limit - now, f"pids.max {limit:,} in {d} ({now:,} in use)")
    return best


def nproc_left() -> Left | None:
    """Tasks this user may still start (RLIMIT_NPROC), or None: root is not held by it, or no limit."""
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


def files_left() -> Left:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    return soft - open_now, f"RLIMIT_NOFILE {soft:,} ({open_now:,} open; ulimit -n)"


def _memory_limit(d: Path) -> tuple[int, int] | None:
    """(limit, usage) bytes of one memory cgroup directory (v2 or v1), or None when it sets no limit."""
    limit = _read_int(d / "memory.max") or _read_int(d / "memory.limit_in_bytes")
    usage = _read_int(d / "memory.current") or _read_int(d / "memory.usage_in_bytes")
    return None if limit is None or usage is None or limit >= 1 << 60 else (limit, usage)


def _cgroup_words(d: Path, limit: int, usage: int) -> str:
    return f"the memory cgroup {d} (limit {limit / GIB:,.2f} GiB, {usage / GIB:,.2f} GiB used)"


def memory_left() -> Left | None:
    """Bytes the run may use: MemAvailable or the memory cgroup's room, whichever is smaller."""
    best = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                best = (int(line.split()[1]) * 1024, "MemAvailable")
    except (OSError, ValueError, IndexError):
        pass
    for d in _cgroup_dirs("memory"):
        got = _memory_limit(d)
        if got is not None and (best is None or got[0] - got[1] < best[0]):
            best = (got[0] - got[1], _cgroup_words(d, *got))
    return best


@dataclass(frozen=True)
class Room:
    """What this run may still start and use, read once."""
    pids: Left | None
    nproc: Left | None
    files: Left
    memory: Left | None

    @classmethod
    def now(cls) -> "Room":
        return cls(pids_left(), nproc_left(), files_left(), memory_left())


def check(what: str, *, tasks: int = 0, files: int = 0, memory: int = 0, how: str = "", lower: str = "",
          room: Room | None = None) -> None:
    """Refuse (ValueError, one line) a need beyond the room. `what` opens the line and names the knobs
    ("kv_cache.clients = 64:"); `how`: how the figure adds up (for the one kind asked: call once per kind when
    they add up differently); `lower`: what to change. Kinds left at 0 are not checked."""
    room = room or Room.now()
    how = f" ({how})" if how else ""
    if tasks:
        for left in (room.pids, room.nproc):
            if left is not None and tasks > left[0]:
                raise ValueError(f"{what} {tasks:,} tasks{how}, more than the {max(left[0], 0):,} this run may "
                                 f"start ({left[1]}): {lower}")
    if files and files > room.files[0]:
        raise ValueError(f"{what} about {files:,} open files{how}, more than the {max(room.files[0], 0):,} left "
                         f"({room.files[1]}): {lower}")
    if memory and room.memory is not None and memory > MEMORY_SHARE * room.memory[0]:
        raise ValueError(f"{what} need {memory / GIB:,.2f} GiB{how}, more than {MEMORY_SHARE:.0%} of the "
                         f"{max(room.memory[0], 0) / GIB:,.2f} GiB this run may use ({room.memory[1]}): {lower}")


def s3_client_bytes(connections: int, body: int = 0) -> int:
    """The memory of one worker's compiled S3 client (core.s3mover: a process of its own beside the worker, whose
    buffers the worker's own figures do not count) with `connections` requests in flight and a `body` of upload
    bytes it holds."""
    return S3_CLIENT_IDLE_BYTES + max(connections, 1) * S3_CLIENT_CONNECTION_BYTES + body


def process_limits() -> str:
    """The process limits that hold now, with their numbers (for a fork that failed anyway)."""
    held = [left[1] for left in (pids_left(), nproc_left()) if left is not None]
    return "; ".join(held) if held else "no pids cgroup limit or RLIMIT_NPROC holds this process"


# --------------------------------------------------------------------------- after the fact: the OOM killer
def _oom_count(path: Path) -> int | None:
    """The `oom_kill` line of memory.events (v2), memory.oom_control (v1) or /proc/vmstat."""
    try:
        for line in path.read_text().splitlines():
            key, _, n = line.partition(" ")
            if key == "oom_kill" and n.strip().isdigit():
                return int(n)
    except OSError:
        pass
    return None


def oom_kills(cgroup_dirs: list[Path] = ()) -> dict[Path, int]:
    """The OOM killer's kill counts: in `cgroup_dirs` (a run's own memory cgroups), this process's memory
    cgroup and its ancestors, and the host's (/proc/vmstat)."""
    out = {}
    for d in _cgroup_dirs("memory", [Path(d) for d in cgroup_dirs]):
        for f in ("memory.events", "memory.oom_control"):
            if (n := _oom_count(d / f)) is not None:
                out[d] = n
                break
    if (n := _oom_count(Path("/proc/vmstat"))) is not None:
        out[Path("/proc/vmstat")] = n
    return out


def oom_cause(before: dict[Path, int]) -> str | None:
    """Which OOM killer killed since `before` (oom_kills()): a memory cgroup's, with its limit, else the
    host's; None when none did."""
    now = oom_kills([d for d in before if d.name != "vmstat"])
    for d, n in now.items():
        if n > before.get(d, n):
            if d.name == "vmstat":
                return "the OOM killer: the host ran out of memory"
            got = _memory_limit(d)
            return "the OOM killer: " + (_cgroup_words(d, *got) if got else f"the memory cgroup {d}") + " was full"
    return None
