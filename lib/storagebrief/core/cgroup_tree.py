"""Where this process's cgroups are: the v1 and v2 hierarchies mounted here, this process's own cgroup in each,
the one a controller (memory, io/blkio) is active in, what an ancestor already throttles, and the limits a
cgroup's files hold. Read-only: core.cgroups creates, limits and removes the children it makes below them.
"""
from __future__ import annotations

import os
from pathlib import Path


class CgroupUnavailable(RuntimeError):
    """The capability is missing; the message says why (shown in the brief)."""


def _own_paths() -> dict[str, str]:
    """controller -> own cgroup path; '' key is the v2 unified path."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in (controllers.split(",") if controllers else [""]):
            out[c] = path
    return out


def _v1_mount(controller: str) -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup" and controller in parts[3].split(","):
            return Path(parts[1])
    return None


def _v2_mount() -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def _v2_controllers(path: Path) -> set[str]:
    try:
        return set((path / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def own_dirs() -> list[Path]:
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


def tracking_dir() -> tuple[int, Path]:
    """(version, own cgroup dir) of a hierarchy where a child cgroup can hold processes without limits.

    First that exists: the v1 pids hierarchy (no limit by default), the v2 unified one (membership
    needs no controller), then a v1 hierarchy that limits nothing unless asked."""
    own = _own_paths()

    def v1(c: str) -> Path | None:
        mount = _v1_mount(c)
        d = mount / own[c].lstrip("/") if mount is not None and c in own else None
        return d if d is not None and d.is_dir() else None

    if (d := v1("pids")) is not None:
        return 1, d
    v2 = _v2_mount()
    if v2 is not None and "" in own and (v2 / own[""].lstrip("/")).is_dir():
        return 2, v2 / own[""].lstrip("/")
    for c in ("cpuacct", "blkio", "memory"):
        if (d := v1(c)) is not None:
            return 1, d
    raise CgroupUnavailable("no cgroup hierarchy to hold a run's processes (neither cgroup v1 nor v2 is mounted)")


def controller_dir(controller: str) -> tuple[int, Path]:
    """(version, own cgroup dir) for a controller ('memory' or 'io'/'blkio').

    Prefers v1 when the controller is mounted there (a controller is active in
    only one hierarchy at a time).
    """
    own = _own_paths()
    v1_name = "blkio" if controller in ("io", "blkio") else controller
    mount = _v1_mount(v1_name)
    if mount is not None and v1_name in own:
        d = mount / own[v1_name].lstrip("/")
        if d.is_dir():
            return 1, d
    v2 = _v2_mount()
    v2_name = "io" if controller in ("io", "blkio") else controller
    if v2 is not None and "" in own:
        d = v2 / own[""].lstrip("/")
        if v2_name in _v2_controllers(d):
            return 2, d
    raise CgroupUnavailable(
        f"no writable '{controller}' cgroup controller: neither cgroup v1 '{v1_name}' nor "
        f"cgroup v2 '{v2_name}' is available for this process")


V1_THROTTLE_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                     "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")


def inherited_v1_limits(start: Path, device: tuple[int, int]) -> dict[str, int]:
    """The tightest cgroup v1 blkio throttle on `device` set on `start` or any ancestor up to the
    hierarchy's root (file name -> value). v2 io.max needs no copy: it is hierarchical."""
    key, out = f"{device[0]}:{device[1]}", {}
    d = start
    while True:
        for fname in V1_THROTTLE_FILES:
            try:
                lines = (d / fname).read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                f = line.split()
                if len(f) == 2 and f[0] == key and f[1].isdigit() and int(f[1]) > 0:
                    out[fname] = min(int(f[1]), out.get(fname, int(f[1])))
        if not (d.parent / "cgroup.procs").exists() or d.parent == d:
            return out
        d = d.parent


def capabilities() -> dict[str, str]:
    """controller -> 'v1 <dir>' / 'v2 <dir>' or the reason it is unavailable."""
    out = {}
    for c in ("memory", "blkio"):
        try:
            version, d = controller_dir(c)
            ok = os.access(d, os.W_OK)
            out[c] = f"v{version} {d}" + ("" if ok else " (not writable: needs root or delegation)")
        except (CgroupUnavailable, OSError) as exc:
            out[c] = f"unavailable: {exc}"
    return out


def read_v1_limit(path: Path, device: tuple[int, int]) -> int | None:
    """The limit a v1 blkio.throttle.* file holds for the device (None: no line, i.e. no limit)."""
    key = f"{device[0]}:{device[1]}"
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == key:
            return int(f[1])
    return None


def read_io_max(path: Path, device: tuple[int, int]) -> dict[str, int | None]:
    """The v2 io.max limits for the device: key -> value, None where 'max' (no limit)."""
    key = f"{device[0]}:{device[1]}"
    for line in path.read_text().splitlines():
        f = line.split()
        if f and f[0] == key:
            kv = dict(x.split("=", 1) for x in f[1:] if "=" in x)
            return {k: (None if v == "max" else int(v)) for k, v in kv.items()}
    return {}
