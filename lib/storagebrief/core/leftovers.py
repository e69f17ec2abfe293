"""What killed runs leave behind, found and removed at the start of the next run (and by
`storagebrief doctor --clean`): storagebrief cgroups and tracefs instances
(`storagebrief-trace-<pid>-<nonce>`, blocktrace) whose creating process is dead, processes
started by a run that is gone, temporary folders of dead runs, and test hosts (nethosts: network
namespaces with their sshd) whose creator is dead, and S3 gateways (versitygw) of dead runs with the
buckets those runs created (core.s3gateway's registry in this user's private runtime folder,
core.runtime_dir: entries another user wrote are never read).

What the sweep removes or kills is this user's: a scratch folder must be a real folder owned by this
user (in /dev/shm a name of our shape may be another user's), a marked process must run as this user.

Cgroup names carry the creator's PID (cgroups.Cgroup), so a live run's cgroups are never
touched; processes still inside a dead run's cgroup (orphaned workers, training jobs, fio's
job processes) are killed before the cgroup is removed. Processes a run started through
procs.Scope carry its owner marker in their environment, so they are found after a kill -9 even
where there is no cgroup (not root) and even when they left the process group (fio's job calls
setsid). Temporary folders (procs.scratch_dir) are named with their creator's PID: the
shared-memory ones in /dev/shm here, the ones inside a run's out or target folder by the study
that uses that folder (remove_leftovers(folders)).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from . import blocktrace, folders, lock, nethosts, procs, s3gateway
from .cgroups import PREFIX, own_dirs

SHM = Path("/dev/shm")


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
    return own_dirs()


def remove_leftovers(folders=()) -> list[str]:
    """Remove what runs killed by kill -9 or a crash left behind: storagebrief cgroups and tracefs
    instances whose creating process is dead, processes whose owner marker names a dead run, and
    dead runs' temporary folders in /dev/shm and in `folders` (a run's out or target folders).

    Processes still inside (orphaned workers, training jobs) are killed first: they belong to
    a run that no longer exists; so is a trace reader still holding a dead run's instance.
    Tracing in a leftover instance is switched off before it is removed. Returns one line per
    removed cgroup, instance, process or folder, for notes and doctor."""
    removed = s3gateway.leftovers()      # before the marker sweep: it also removes the dead run's buckets
    lock.stale_runtime_locks()           # out-folder locks of killed runs (no line: an empty file, not a result)
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
    # Without a cgroup (not root, or a hierarchy we cannot write) the marker is what finds them.
    removed += procs.kill_orphans()
    for folder in (SHM, *folders):
        removed += procs.remove_dead_scratch(Path(folder))
    removed += nethosts.leftovers(_alive)      # test hosts (network namespaces, sshd) of dead creators
    return removed


# Open MPI's shared-memory transport (vader) files; a rank killed with its host leaves its segment.
MPI_SEGMENTS = ("vader_segment.*",)
MPI_SEGMENT_MIN_AGE_S = 60      # younger ones may belong to a job starting now, not mapped yet


def _in_use() -> set[str]:
    """/dev/shm paths any process has open or mapped (those we may read: all of them as root)."""
    used: set[str] = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            used |= {line.split(None, 5)[5].strip() for line in (p / "maps").read_text().splitlines()
                     if "/dev/shm/" in line and len(line.split(None, 5)) == 6}
            for fd in (p / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    used.add(target)
        except OSError:
            continue
    return used


def remove_mpi_segments(shm: Path = SHM, min_age_s: float = MPI_SEGMENT_MIN_AGE_S) -> list[str]:
    """Open MPI vader_segment.* files in /dev/shm that no process has open or mapped, owned by this user and
    older than `min_age_s` (what a host or rank that died mid-run left): removed (doctor --clean)."""
    found = [f for pat in MPI_SEGMENTS for f in shm.glob(pat)]
    if not found:
        return []
    used, now, out = _in_use(), time.time(), []
    for f in found:
        try:
            st = f.lstat()
        except OSError:
            continue
        if str(f) in used or st.st_uid != os.getuid() or now - st.st_mtime < min_age_s or not f.is_file():
            continue
        try:
            f.unlink()
        except OSError as exc:
            out.append(f"could not remove leftover Open MPI segment {f}: {exc.strerror}")
            continue
        out.append(f"removed leftover Open MPI segment {f} ({st.st_size:,} bytes; no process had it open)")
    return out


def remove_dead_staging(targets, prefixes: tuple[str, ...] = ()) -> list[str]:
    """Staging folders killed runs left below each target's storagebrief/ (folders.sweep_staging: mkdtemp's
    `.<name>.tmp-*` and `prefixes`, real folders of ours only, never through a symlink), for doctor --clean.
    `targets`: (name, path) pairs. A target another run holds now is left alone, said in one line: its staging
    folders may be that run's."""
    out = []
    for name, path in targets:
        path = Path(path)
        if not (path / folders.DATA).is_dir():
            continue
        try:
            fd = lock.lock_file(path / lock.LOCK_NAME, f"target '{name}' ({path})", "refuse", print)
        except lock.TargetBusy as exc:
            out.append(f"{str(exc).split('; wait for it')[0]}: its staging folders were left alone")
            continue
        except OSError as exc:
            out.append(f"target '{name}' ({path}): its lock cannot be taken ({exc.strerror}): its staging folders "
                       "were left alone")
            continue
        try:
            out += folders.sweep_staging(path / folders.DATA, prefixes, depth=3)
        finally:
            os.close(fd)        # closing drops the flock
    return out


def _kill_members(d: Path) -> int:
    killed = 0
    for _ in range(50):
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return killed
        pids = [p for p in pids if procs.running(p)]   # zombies wait for init; they hold nothing
        if not pids:
            return killed
        killed += procs.kill_all(pids)
        time.sleep(0.05)
    return killed
