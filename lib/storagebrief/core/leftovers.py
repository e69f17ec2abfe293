"""What killed runs leave behind, found and removed at the start of the next run (and by
`storagebrief doctor --clean`): storagebrief cgroups and tracefs instances
(`storagebrief-trace-<pid>-<nonce>`, blocktrace) whose creating process is dead.

Cgroup names carry the creator's PID (cgroups.Cgroup), so a live run's cgroups are never
touched; processes still inside a dead run's cgroup (orphaned workers, training jobs) are
killed before the cgroup is removed.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from . import blocktrace
from .cgroups import PREFIX, _own_paths


def _owner_pid(name: str) -> int | None:
    """The creating process's PID from a cgroup name (PREFIX<what>-<pid>-<nonce>)."""
    parts = name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _all_controller_dirs() -> list[Path]:
    """Our own cgroup directory in every hierarchy we can see (v1 per controller, v2 unified)."""
    own, dirs = _own_paths(), []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] not in ("cgroup", "cgroup2"):
            continue
        if parts[2] == "cgroup2":
            rel = own.get("")
        else:
            rel = next((own[c] for c in parts[3].split(",") if c in own), None)
        if rel is not None and (Path(parts[1]) / rel.lstrip("/")).is_dir():
            dirs.append(Path(parts[1]) / rel.lstrip("/"))
    return list(dict.fromkeys(dirs))


def remove_leftovers() -> list[str]:
    """Remove storagebrief cgroups and tracefs instances whose creating process is dead (left by
    kill -9 or a crash).

    Processes still inside (orphaned workers, training jobs) are killed first: they belong to
    a run that no longer exists; so is a trace reader still holding a dead run's instance.
    Tracing in a leftover instance is switched off before it is removed. Returns one line per
    removed cgroup or instance, for notes and doctor."""
    removed = []
    for inst in blocktrace.instances():
        pid = blocktrace.owner_pid(inst.name)
        if pid is not None and not _alive(pid):
            removed.append(blocktrace.remove_instance(inst) + f" of dead process {pid}")
    for parent in _all_controller_dirs():
        for d in sorted(parent.glob(f"{PREFIX}*")):
            pid = _owner_pid(d.name)
            if not d.is_dir() or pid is None or _alive(pid):
                continue
            killed = _kill_members(d)
            try:
                d.rmdir()
            except OSError as exc:
                removed.append(f"could not remove leftover cgroup {d}: {exc.strerror}")
                continue
            removed.append(f"removed leftover cgroup {d} of dead process {pid}"
                           + (f" (killed {killed} orphaned process(es) in it)" if killed else ""))
    return removed


def _kill_members(d: Path) -> int:
    killed = 0
    for _ in range(50):
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return killed
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.05)
    return killed
