"""Was a client process, not the storage, the limit? Judged per process, against the cores it can use.

A rule that waits for the client to fill every CPU of the machine never fires for a Python client: one
interpreter runs Python code on one core at a time (the interpreter lock), so a boto3 worker tops out near
one core (measured 0.65-0.97 of one on 2 cores while a compiled client on the same gateway moved 2.3-10x the
bytes). So each client process is measured on its own - its CPU seconds over the batch's wall time - and
compared with the cores it can use: one for an interpreter-bound process, else its threads, capped by the CPUs it
may run on (affinity) and its cgroup's CPU quota. At >= BOUND_FRACTION of those it is client-bound (busy). A
process on a loaded machine may want its core and not get it: its busiest thread's time ready to run (on a CPU
or in the kernel's run queue, /proc/.../task/*/schedstat) over the wall time says that (starved) - per thread,
as the run-queue waits of many threads overlap and their sum overstates what the process wanted (measured:
32 boto3 threads at 0.5 of a core summed 1.5-3 s of waits in 0.5 s). And from outside (`ReadySampler`, in the
launching process, so the sampling takes nothing from the client's own interpreter): how often the process had
any thread on a CPU or ready for one (state R in /proc/<pid>/task/*/stat), a lower bound on the cores it wanted at
every sample. A client that always had CPU work ready was never waiting on the store, whatever CPU share it got
(measured: a boto3 PUT 64K c8 worker at 0.80-0.82 of a core, beside the gateway on 2 CPUs, had a thread ready in
93-95 % of the samples; GET workers at 0.9 of a core in 98-99 %). Either way a CPU, not the storage, set the figure.

Shared by every study whose client is Python (the object sweep now; emulate, checkpoint and the KV cache can
hand their own process measurements to `judge`). The worker measures itself (`SelfMeter`); the judgement runs
in the study's process.
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BOUND_FRACTION = 0.85      # a client process at this share of its usable cores or more: client-bound
MACHINE_BUSY_PERCENT = 90  # every CPU this busy (monitor, /proc/stat) during a run: the CPU, not the storage, limited


@dataclass(frozen=True)
class ProcessCPU:
    """One client process over one measured batch."""
    cpu_seconds: float         # user + system, every thread
    wall_seconds: float        # the batch's wall time (the measured clock)
    usable_cores: float        # what it could use (usable_cores())
    thread_runnable_seconds: float = 0.0   # its busiest thread's time on a CPU or waiting in the run queue
    waited_seconds: float = 0.0            # all its threads' run-queue waits, summed (evidence only: they overlap)
    label: str = "client"
    pid: int = 0
    ready_fraction: float | None = None    # share of ReadySampler's samples with a thread of it on a CPU or ready

    @property
    def cores_used(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def busiest_thread_share(self) -> float:
        """Its busiest thread's time on a CPU or ready for one, over the wall time."""
        return self.thread_runnable_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def cores_wanted(self) -> float:
        """What it used, what its busiest thread alone wanted, or how often any thread was ready (sampled),
        whichever is more; never above its usable cores."""
        return min(max(self.cores_used, self.busiest_thread_share, self.ready_fraction or 0.0), self.usable_cores)

    def as_dict(self) -> dict:
        return asdict(self)


def cgroup_cpu_quota(pid: int | str = "self") -> float | None:
    """The cgroup v2 CPU quota (cores) of a process's cgroup, or None when unlimited or unreadable."""
    try:
        rel = next(line.split("::", 1)[1].strip() for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                   if line.startswith("0::"))
        quota, period = (Path("/sys/fs/cgroup") / rel.lstrip("/") / "cpu.max").read_text().split()
    except (OSError, StopIteration, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def usable_cores(threads: int, interpreter_bound: bool, pid: int = 0) -> float:
    """The cores a process can keep busy: one for an interpreter-bound (Python) client, else its threads; never
    more than the CPUs it may run on (affinity) or its cgroup's CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        cpus = os.cpu_count() or 1
    cores = float(min(1 if interpreter_bound else max(threads, 1), cpus))
    quota = cgroup_cpu_quota(pid or "self")
    return min(cores, quota) if quota else cores


def thread_sched(pid: int | str = "self") -> dict[str, tuple[int, int]]:
    """Per present thread of a process: (ns on a CPU, ns ready but waiting for one), from schedstat; empty where
    the kernel does not keep it."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            run, wait = (int(x) for x in (task / "schedstat").read_text().split()[:2])
        except (OSError, ValueError):
            continue
        out[task.name] = (run, wait)
    return out


def cpu_seconds() -> float:
    """This process's user + system CPU seconds, every thread (the one helper: ranks, workers, loaders)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class SelfMeter:
    """This process's CPU and its threads' run-queue time between start() and stop(): call stop() while the
    batch's threads are still alive (a thread that has exited takes its schedstat with it)."""

    def start(self) -> "SelfMeter":
        self._cpu0, self._sched0, self._t0 = cpu_seconds(), thread_sched(), time.perf_counter()
        return self

    def stop(self, threads: int, interpreter_bound: bool, label: str = "client") -> ProcessCPU:
        wall = time.perf_counter() - self._t0
        cpu = cpu_seconds()
        return ProcessCPU(cpu - self._cpu0, wall, usable_cores(threads, interpreter_bound),
                          *sched_between(self._sched0, thread_sched()), label, os.getpid())


def sched_between(before: dict, after: dict) -> tuple[float, float]:
    """(its busiest thread's seconds on a CPU or ready for one, all its threads' run-queue waits summed) between
    two thread_sched() readings of one process (read from inside it, or from outside by pid)."""
    delta = [(run - before.get(tid, (0, 0))[0], wait - before.get(tid, (0, 0))[1]) for tid, (run, wait) in after.items()]
    return max((run + wait for run, wait in delta), default=0) / 1e9, sum(wait for _, wait in delta) / 1e9


def ready_now(pid: int) -> bool | None:
    """Has the process a thread on a CPU or in the run queue (state R) right now? None once it is gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split(None, 1)[0] == "R":
                return True
        except (OSError, IndexError):
            continue
    return False


class ReadySampler:
    """How often each of some processes had a thread ready to run, sampled every `period_s` from a thread of the
    process that waits for them (20 ms: ~0.5 % of a core here, beside a batch of a few seconds ~200 samples).
    Use around the measured batch: `with ReadySampler(pids) as s: ...` then `s.fractions()` (pid -> share)."""

    def __init__(self, pids: list[int], period_s: float = 0.02):
        self.pids, self.period_s = list(pids), period_s
        self._seen = {p: [0, 0] for p in self.pids}       # pid -> [samples, samples with a ready thread]
        self._stop = None

    def __enter__(self) -> "ReadySampler":
        import threading
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            for pid in self.pids:
                ready = ready_now(pid)
                if ready is not None:
                    self._seen[pid][0] += 1
                    self._seen[pid][1] += ready

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def fractions(self, least: int = 20) -> dict[int, float]:
        """pid -> share of samples with a ready thread; a process sampled fewer than `least` times is left out
        (a batch too short to say)."""
        return {p: r / n for p, (n, r) in self._seen.items() if n >= least}


def add_ready(processes: list[dict], fractions: dict[int, float]) -> list[dict]:
    """Rows' `client_processes` dicts with their sampled ready share (matched by pid)."""
    return [{**p, "ready_fraction": fractions.get(p.get("pid"), p.get("ready_fraction"))} for p in processes]


def evidence(p: ProcessCPU) -> str:
    """One process in words: its CPU over the wall time, against its usable cores."""
    text = (f"{p.label} {p.cpu_seconds:.2f} CPU-s / {p.wall_seconds:.2f} s wall = {p.cores_used:.2f} of "
            f"{p.usable_cores:g} usable core{'s' if p.usable_cores != 1 else ''}")
    thread = p.busiest_thread_share
    if p.ready_fraction is not None:
        text += f" (a thread of it on a CPU or ready for one in {p.ready_fraction:.0%} of the samples)"
    if thread > max(p.cores_used, p.ready_fraction or 0.0) + 0.05:
        text += f" (its busiest thread ready to run {min(thread, p.usable_cores):.2f} of the time)"
    return text


def pool_cores(processes: list[ProcessCPU], cpus: float | None = None) -> float:
    """The cores a pool of client processes can use together: their usable cores summed, never more than the CPUs
    the pool may run on (`cpus`; default: this process's affinity, the pool's parent)."""
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except OSError:
            cpus = os.cpu_count() or 1
    return min(sum(p.usable_cores for p in processes), float(cpus))


def judge(processes: list[ProcessCPU], cpus: float | None = None) -> tuple[bool, str]:
    """(client-bound, the evidence per process): bound when any process used, or wanted, BOUND_FRACTION of its
    usable cores - the slowest process sets a batch split among them - or a pool of them did of the cores it can
    use together (pool_cores: `cpus` the pool may run on); however busy the rest of the machine was."""
    if not processes:
        return False, ""
    bound = [p for p in processes if p.cores_wanted >= BOUND_FRACTION * p.usable_cores]
    starved = [p for p in bound if p.cores_used < BOUND_FRACTION * p.usable_cores]
    words = "; ".join(evidence(p) for p in processes)
    if bound:
        why = "starved: ready to run, the CPUs held by other work" if len(starved) == len(bound) else "busy"
        return True, f"{words}: ≥ {BOUND_FRACTION:.0%} of its usable cores ({why})"
    ceiling = pool_cores(processes, cpus)
    wanted = sum(p.cores_wanted for p in processes)
    if len(processes) > 1 and ceiling > 0 and wanted >= BOUND_FRACTION * ceiling:
        return True, (f"{words}: together {wanted:.2f} of the {ceiling:g} cores the {len(processes)} processes can "
                      f"use (≥ {BOUND_FRACTION:.0%})")
    return False, words


def from_row(row: dict) -> list[ProcessCPU]:
    """The client processes a row records (`client_processes`: a list of ProcessCPU dicts), or none."""
    return [ProcessCPU(**p) for p in row.get("client_processes") or []]
