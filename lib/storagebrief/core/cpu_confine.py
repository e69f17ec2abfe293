"""A run's processes held to some CPUs, through the engine (Run.confine_cpus; kit/client_check.py's check
confines a re-run to half the CPUs). First that works:
  cgroup v1 cpuset   a child cgroup of our own cpuset cgroup (its own hierarchy: the run's memory /
                     blkio cgroups stay as they are), `cpuset.cpus` = the CPUs, `cpuset.mems` copied;
  cgroup v2 cpuset   `cpuset.cpus` on the run's own v2 cgroup (a process is in one v2 cgroup only),
                     the controller enabled in its parent; else `cpu.max` = those CPUs' time;
  sched_setaffinity  no cgroup could be had (not root, no delegation): every thread of each process
                     pins itself to the CPUs (needs no privilege); the reason is recorded.
The cpuset cgroup is a cgroups.Cgroup: removed when the run ends (the Run owns it), at exit, on a signal,
and after kill -9 by the leftovers sweep (its name carries our PID).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import cgroup_tree, cgroups

CPUSET, QUOTA, AFFINITY = "cgroup cpuset", "cgroup cpu.max quota", "sched_setaffinity"


def cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


class CpusetCgroup(cgroups.Cgroup):
    """A v1 cpuset child cgroup of our own cpuset cgroup (removed like every Cgroup)."""

    def __init__(self, name: str, cpus: list[int]):
        super().__init__(name)
        self.cpus = cpus

    def create(self) -> "CpusetCgroup":
        try:
            version, parent = cgroup_tree.controller_dir("cpuset")
            if version != 1:
                raise cgroups.CgroupUnavailable("the cpuset controller is in the v2 hierarchy")
            d = parent / self.name
            d.mkdir(exist_ok=True)
            self.dirs["cpuset"] = (1, d)
            cgroups._live[self.name] = self
            cgroups._install_handlers()     # not install_handlers: a pending signal must not be forgotten
            (d / "cpuset.mems").write_text((parent / "cpuset.mems").read_text().strip() or "0")
            (d / "cpuset.cpus").write_text(cpu_list(self.cpus))
        except PermissionError as exc:
            self.remove()
            raise cgroups.CgroupUnavailable(f"cpuset cgroup: permission denied ({exc.filename}; not root?)") from None
        except OSError as exc:
            self.remove()
            raise cgroups.CgroupUnavailable(f"cpuset cgroup: {exc}") from None
        return self


@dataclass
class Confinement:
    """How a run's client processes are held to `cpus`; `procs_files` are joined like the run's own cgroup's,
    `affinity` (when not empty) is applied by each process to all its threads (apply_affinity)."""
    cpus: list[int]
    method: str
    reason: str = ""                                 # why no cgroup was used, when none was
    procs_files: list[str] = field(default_factory=list)
    affinity: list[int] = field(default_factory=list)
    group: cgroups.Cgroup | None = None

    def describe(self) -> str:
        how = f"{self.method} {cpu_list(self.cpus)}"
        return f"{how} ({self.reason})" if self.reason else how

    def remove(self) -> None:
        if self.group is not None:
            self.group.remove()


def _v2_run_dir(run_group) -> Path | None:
    for version, d in (run_group.dirs.values() if run_group is not None else ()):
        if version == 2:
            return d
    return None


def _v2_confine(d: Path, cpus: list[int], total: int) -> str:
    """cpuset.cpus on a v2 cgroup, else cpu.max; returns the method used (raises OSError/CgroupUnavailable)."""
    try:
        cgroups.Cgroup._enable_v2(d.parent, "cpuset")
        (d / "cpuset.cpus").write_text(cpu_list(cpus))
        return CPUSET + " (v2)"
    except (OSError, cgroups.CgroupUnavailable):
        cgroups.Cgroup._enable_v2(d.parent, "cpu")
        period = 100_000
        (d / "cpu.max").write_text(f"{period * len(cpus)} {period}")
        return QUOTA + f" (v2, {len(cpus)} of {total} CPUs' time)"


def confine(name: str, cpus: list[int], run_group=None) -> Confinement:
    """Hold a run's client processes to `cpus`: a cgroup when one can be had, else their affinity (reason kept)."""
    total = len(os.sched_getaffinity(0))
    reasons = []
    d = _v2_run_dir(run_group)
    if d is not None:
        try:
            return Confinement(cpus, _v2_confine(d, cpus, total))
        except (OSError, cgroups.CgroupUnavailable) as exc:
            reasons.append(f"v2: {exc}")
    else:
        try:
            group = CpusetCgroup(name, cpus).create()
            return Confinement(cpus, CPUSET + " (v1)", procs_files=group.procs_files, group=group)
        except cgroups.CgroupUnavailable as exc:
            reasons.append(str(exc))
    return Confinement(cpus, AFFINITY, reason="no cgroup: " + "; ".join(reasons), affinity=list(cpus))
