"""A run's own device reads, from its cgroup's blkio counters (the monitor's counters are device-wide):
any study can sample the cgroup its run made (core.sweep.Run.cgroup / throttle)."""
from __future__ import annotations

import threading
import time


def cgroup_read_stats(group, device) -> tuple[int, int] | None:
    """(bytes, requests) the run's own processes read from the target's device."""
    if group is None or device is None or device.major is None:
        return None
    return group.io_read_stats((device.major, device.minor))


class CgroupIoSampler:
    """Samples the run's own device reads (cgroup blkio counters) at the monitor's interval (add it
    with run.add_sampler: it starts and stops with the clock).

    The monitor's counters are device-wide, so other work on a shared disk shows up
    in them; these count only the requests of the cgroup's processes (throttled or not).
    """

    def __init__(self, group, device, interval_s: float):
        self.group, self.device, self.interval_s = group, device, interval_s
        self.samples: list[tuple[float, int, int]] = []   # (perf_counter s, bytes, requests)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        st = cgroup_read_stats(self.group, self.device)
        if st is not None:   # perf_counter: the accelerators' step clock (CLOCK_MONOTONIC on Linux)
            self.samples.append((time.perf_counter(), st[0], st[1]))

    def start(self) -> None:
        self._take()
        if not self.samples:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True, name="storagebrief-cgroup-io")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._take()

    def timeseries(self) -> list[dict]:
        t0 = self.samples[0][0] if self.samples else 0.0
        return [{"t_s": round(b[0] - t0, 4), "cgroup_read_mb_per_s": (b[1] - a[1]) / max(b[0] - a[0], 1e-9) / 1e6}
                for a, b in zip(self.samples, self.samples[1:]) if b[0] - a[0] >= self.interval_s * 0.2]

    def window(self, t0: float, t1: float) -> tuple[int, int, float] | None:
        """(bytes, requests, seconds) between the first sample at or after t0 and the last at or before t1.

        None when fewer than two samples fall inside (a window shorter than the interval).
        """
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        a, b = inside[0], inside[-1]
        return b[1] - a[1], b[2] - a[2], b[0] - a[0]

    def summary(self) -> dict:
        series = self.timeseries()
        if not series:
            return {}
        return {"cgroup_read_mb_per_s_max": max(r["cgroup_read_mb_per_s"] for r in series)}
