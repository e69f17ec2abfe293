"""A process's state from /proc/<pid>/stat: is it running, when did it start. A leaf: cgroups and
procs both ask it, and neither imports the other for it."""
from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 = state)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the PID it names one process,
    never a later one that reused the number."""
    f = stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None


def running(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    f = stat_fields(pid)
    return bool(f) and f[0] not in ("Z", "X")


def cpu_seconds_of(pid: int) -> float | None:
    """The process's user + system CPU seconds so far (every thread); None once it is gone."""
    import os
    f = stat_fields(pid)
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") if f and len(f) > 12 else None
