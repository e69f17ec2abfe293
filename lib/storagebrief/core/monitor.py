"""Background sampler of a block device's counters and the CPU.

Reads /proc/diskstats and /proc/stat every `interval_s` on a daemon thread and
turns each interval into MB/s, IOPS, average request KiB, average latency and
utilization, plus CPU user/system/iowait %. Run averages come from the first
and last snapshot (exact totals); maxima are the largest fixed interval.
Counters are device-wide: anything else reading the same disk is counted too. Each snapshot also takes
core/interference.py's sample of the machine (the run's own processes' CPU and I/O, kernel threads, memory
pressure), so a run's summary says what else the machine did meanwhile (other_cpu_cores_avg, other_device_bytes,
memory_stall_*): the study's row gets them, and core/sweep.py judges them (`disturbed`).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import interference

SECTOR = 512
MACHINE_S = 0.5         # the interference sample (core/interference.py): at most this often


@dataclass(frozen=True)
class Snapshot:
    t: float
    reads: int = 0
    read_sectors: int = 0
    read_ms: int = 0
    writes: int = 0
    write_sectors: int = 0
    write_ms: int = 0
    io_ms: int = 0
    cpu: tuple[int, ...] = ()   # user nice system idle iowait irq softirq steal
    machine: interference.Sample | None = None    # the run's processes, kernel threads, memory pressure


def read_diskstats(device: str | None) -> dict[str, int]:
    if device is None:
        return {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) >= 14 and f[2] == device:
            return dict(reads=int(f[3]), read_sectors=int(f[5]), read_ms=int(f[6]),
                        writes=int(f[7]), write_sectors=int(f[9]), write_ms=int(f[10]),
                        io_ms=int(f[12]))
    return {}


def read_cpu() -> tuple[int, ...]:
    with open("/proc/stat") as fh:
        first = fh.readline().split()
    return tuple(int(x) for x in first[1:9])


def snapshot(device: str | None, owner: interference.Owner | None = None) -> Snapshot:
    machine = interference.sample(owner) if owner is not None else None
    return Snapshot(t=time.monotonic(), cpu=read_cpu(), machine=machine, **read_diskstats(device))


def interference_columns(a: Snapshot, b: Snapshot, between: list[Snapshot] | None = None) -> dict[str, float]:
    """What else the machine did from `a` to `b` (core/interference.totals), {} without samples."""
    samples = [s.machine for s in [a, *(between or []), b] if s.machine is not None]
    dev = ((b.read_sectors - a.read_sectors) * SECTOR, (b.write_sectors - a.write_sectors) * SECTOR) \
        if b.reads or b.writes or b.read_sectors or b.write_sectors else None
    return interference.totals(samples, (a.cpu, b.cpu), b.t - a.t, dev)


def interval_metrics(a: Snapshot, b: Snapshot) -> dict[str, float]:
    """Metrics of the interval between two snapshots (units in the names)."""
    dt = max(b.t - a.t, 1e-9)
    reads, writes = b.reads - a.reads, b.writes - a.writes
    rbytes = (b.read_sectors - a.read_sectors) * SECTOR
    wbytes = (b.write_sectors - a.write_sectors) * SECTOR
    out = {
        "read_mb_per_s": rbytes / dt / 1e6,
        "write_mb_per_s": wbytes / dt / 1e6,
        "read_iops": reads / dt,
        "write_iops": writes / dt,
        "avg_read_kib": rbytes / reads / 1024 if reads else 0.0,
        "avg_write_kib": wbytes / writes / 1024 if writes else 0.0,
        "read_latency_us": (b.read_ms - a.read_ms) * 1000 / reads if reads else 0.0,
        "write_latency_us": (b.write_ms - a.write_ms) * 1000 / writes if writes else 0.0,
        "util_percent": min(100.0, (b.io_ms - a.io_ms) / (dt * 1000) * 100),
        "read_bytes": float(rbytes),
        "write_bytes": float(wbytes),
    }
    if a.cpu and b.cpu:
        d = [y - x for x, y in zip(a.cpu, b.cpu)]
        total = sum(d) or 1
        out["cpu_user_percent"] = (d[0] + d[1]) / total * 100
        out["cpu_system_percent"] = (d[2] + d[5] + d[6]) / total * 100
        out["cpu_iowait_percent"] = d[4] / total * 100
        out["cpu_busy_percent"] = (total - d[3] - d[4]) / total * 100
    return out


class Monitor:
    """Context manager: samples while a run is in flight.

    with Monitor("vda", 0.5) as mon: ...work...
    mon.summary() -> dict of device_*/cpu_* columns; mon.timeseries() -> rows.
    """

    def __init__(self, device: str | None, interval_s: float = 0.5, owner: interference.Owner | None = None):
        self.device = device
        self.owner = owner or interference.Owner()     # whose processes are the run's (this one's, by default)
        self.interval_s = interval_s
        self.snapshots: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Monitor":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.snapshots = [snapshot(self.device, self.owner)]
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="storagebrief-monitor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_t = self.snapshots[0].t + self.interval_s
        # the machine's sample reads every process's /proc/<pid>/stat (~2-10 ms here): at most every MACHINE_S
        stride, n = max(1, round(MACHINE_S / self.interval_s)), 0
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            n += 1
            self.snapshots.append(snapshot(self.device, self.owner if n % stride == 0 else None))
            next_t += self.interval_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.snapshots.append(snapshot(self.device, self.owner))

    def timeseries(self) -> list[dict]:
        t0 = self.snapshots[0].t if self.snapshots else 0.0
        rows = []
        for a, b in zip(self.snapshots, self.snapshots[1:]):
            if b.t - a.t < self.interval_s * 0.2:  # the short tail interval at stop
                continue
            i = interference_columns(a, b)
            rows.append({"t_s": round(b.t - t0, 4), **interval_metrics(a, b),
                         **{k.removesuffix("_avg"): i[k] for k in ("run_cpu_cores_avg", "other_cpu_cores_avg") if k in i}})
        return rows

    def summary(self) -> dict[str, float]:
        if len(self.snapshots) < 2:
            return {}
        total = interval_metrics(self.snapshots[0], self.snapshots[-1])
        series = self.timeseries()
        out = {"monitor_interval_s": self.interval_s, "monitor_samples": len(series)}
        if self.device:
            for k in ("read_mb_per_s", "write_mb_per_s", "read_iops", "write_iops",
                      "util_percent"):
                out[f"device_{k}_avg"] = total[k]
                out[f"device_{k}_max"] = max((r[k] for r in series), default=total[k])
            for k in ("avg_read_kib", "avg_write_kib", "read_latency_us", "write_latency_us"):
                out[f"device_{k}"] = total[k]
            out["device_read_bytes"] = int(total["read_bytes"])
            out["device_write_bytes"] = int(total["write_bytes"])
        for k in ("cpu_user_percent", "cpu_system_percent", "cpu_iowait_percent", "cpu_busy_percent"):
            if k in total:
                out[k] = total[k]
        out.update(interference_columns(self.snapshots[0], self.snapshots[-1], self.snapshots[1:-1]))
        return out

    @property
    def span_s(self) -> float:
        return self.snapshots[-1].t - self.snapshots[0].t if len(self.snapshots) > 1 else 0.0


def standing_load(sample_s: float = 0.5) -> str:
    """doctor's line: the load average and the machine's CPU busy over a short sample (what a study would share)."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "unknown (no load average)"
    a = read_cpu()
    time.sleep(sample_s)
    b = read_cpu()
    d = [y - x for x, y in zip(a, b)]
    total = sum(d) or 1
    busy_cores = (total - d[3] - d[4]) / total * (os.cpu_count() or 1)
    limit = interference.OTHER_CPU_CORES
    said = (f"load average {one:.2f} (1 min), {five:.2f} (5 min); {busy_cores:.2f} of {os.cpu_count()} cores busy "
            f"over {sample_s:g} s")
    return said if busy_cores <= limit else (f"{said}  -> a run now would share the CPU: beside more than {limit:g} "
                                             "cores of other work it is marked disturbed")
