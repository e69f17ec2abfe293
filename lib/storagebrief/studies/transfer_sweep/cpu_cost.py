"""CPU cost per path, the point of Micron's GDS brief (GDS frees the CPU): CPU seconds ÷ bytes moved,
as CPU cores per GB/s (cores busy ÷ GB/s moved = CPU s ÷ GB).

  process_cpu_s   over the measured window only: fio's own accounting on fio paths ((usr_cpu + sys_cpu)
                  % × job_runtime, summed over its jobs, ramp excluded); the worker's own rusage on ours
                  (all its threads, kvikio's pool included).
  tree_cpu_s      the point's whole process tree from start to exit (start-up and ramp included): the
                  rusage of the reaped child.
  cgroup_cpu_s    the run's cgroup over the same life, where the kernel accounts it (cgroup v2 cpu.stat,
                  v1 cpuacct.usage): everything the run started, however it forked.
"""
from __future__ import annotations

import resource
from pathlib import Path

from ...core.columns import Column

COLUMNS: tuple[Column, ...] = (
    Column("process_cpu_s", "s", "CPU time (user + system) of the path's process over the measured window", "number"),
    Column("cpu_cores_per_gb_per_s", "cores/(GB/s)", "process_cpu_s ÷ (io_bytes / 10⁹): CPU cores busy per GB/s moved",
           "number"),
    Column("tree_cpu_s", "s", "CPU time of the point's whole process tree, start-up and ramp included (rusage)",
           "number"),
    Column("cgroup_cpu_s", "s", "CPU time the run's cgroup accounted over the point (cgroup v2 cpu.stat / v1 "
           "cpuacct); empty where the run's cgroup has no CPU accounting", "number"),
)


def fio_process_cpu_s(doc: dict) -> float | None:
    """fio's own CPU accounting of its jobs over the measured window (usr_cpu, sys_cpu are % of job_runtime)."""
    job = doc["jobs"][0]
    runtime_ms = job.get("job_runtime")
    if runtime_ms is None:
        return None
    return (float(job["usr_cpu"]) + float(job["sys_cpu"])) / 100.0 * float(runtime_ms) / 1e3


def per_gb(cpu_s: float | None, io_bytes) -> float | None:
    return cpu_s / (io_bytes / 1e9) if cpu_s is not None and io_bytes else None


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cgroup_cpu_s(group) -> float | None:
    """CPU seconds the cgroup has accounted so far (None without CPU accounting in its hierarchies)."""
    if group is None:
        return None
    for version, d in getattr(group, "dirs", {}).values():
        d = Path(d)
        try:
            if version == 2 and (d / "cpu.stat").exists():
                for line in (d / "cpu.stat").read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == "usage_usec":
                        return int(v) / 1e6
            if version == 1 and (d / "cpuacct.usage").exists():
                return int((d / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None
    return None


class Meter:
    """Around one point's process: the reaped tree's rusage and the run cgroup's CPU."""

    def __init__(self, group=None):
        self.group = group
        self.tree0, self.cg0 = children_cpu_s(), cgroup_cpu_s(group)

    def columns(self) -> dict:
        cg1 = cgroup_cpu_s(self.group)
        return {"tree_cpu_s": children_cpu_s() - self.tree0,
                "cgroup_cpu_s": cg1 - self.cg0 if cg1 is not None and self.cg0 is not None else None}
