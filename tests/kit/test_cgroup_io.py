"""kit.cgroup_io: a run's own device reads from its cgroup's counters, sampled at an interval."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from storagebrief.kit.cgroup_io import CgroupIoSampler, cgroup_read_stats


class Counters:
    """A cgroup whose blkio read counters grow by 1 MB and 10 requests each time they are read."""
    def __init__(self):
        self.reads = 0
        self.asked = []

    def io_read_stats(self, dev):
        self.asked.append(dev)
        self.reads += 1
        return self.reads * 1_000_000, self.reads * 10


DEV = SimpleNamespace(major=8, minor=16)


def test_read_stats_need_a_group_and_a_real_device():
    group = Counters()
    assert cgroup_read_stats(None, DEV) is None and cgroup_read_stats(group, None) is None
    assert cgroup_read_stats(group, SimpleNamespace(major=None, minor=None)) is None
    assert cgroup_read_stats(group, DEV) == (1_000_000, 10) and group.asked == [(8, 16)]


def test_sampler_takes_samples_between_start_and_stop_and_windows_count_them():
    s = CgroupIoSampler(Counters(), DEV, interval_s=0.01)
    s.start()
    # counts, not clocks: wait for a few samples however loaded the machine is
    import time
    deadline = time.monotonic() + 30
    while len(s.samples) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    n = len(s.samples)
    assert n >= 5                                   # the first, at least 3 by the thread, the last at stop
    assert [b for _, b, _ in s.samples] == [i * 1_000_000 for i in range(1, n + 1)]
    first, last = s.samples[0][0], s.samples[-1][0]
    got = s.window(first, last)
    assert got[:2] == ((n - 1) * 1_000_000, (n - 1) * 10) and got[2] == pytest.approx(last - first)
    assert s.window(last + 1, last + 2) is None
    assert s.summary()["cgroup_read_mb_per_s_max"] > 0


def test_without_counters_the_sampler_starts_no_thread_and_says_nothing():
    s = CgroupIoSampler(None, DEV, interval_s=0.01)
    s.start()
    s.stop()
    assert s.samples == [] and s.timeseries() == [] and s.summary() == {}
