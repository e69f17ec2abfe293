"""core/monitor.py: diskstats/CPU interval arithmetic and a real device's reads."""
import os
import time

import pandas as pd
import pytest

from storagebrief.core import cache, monitor, results, targets, config


def test_interval_metrics_arithmetic():
    a = monitor.Snapshot(t=0.0, reads=0, read_sectors=0, read_ms=0, writes=0, write_sectors=0, write_ms=0,
                         io_ms=0, cpu=(0, 0, 0, 100, 0, 0, 0, 0))
    b = monitor.Snapshot(t=2.0, reads=100, read_sectors=2 * 10**6 // 512 * 100, read_ms=50, writes=10,
                         write_sectors=80, write_ms=10, io_ms=1000, cpu=(30, 0, 10, 140, 20, 0, 0, 0))
    m = monitor.interval_metrics(a, b)
    assert m["read_iops"] == 50
    assert m["read_mb_per_s"] == pytest.approx(100 * (2 * 10**6 // 512) * 512 / 2 / 1e6)
    assert m["read_latency_us"] == 500
    assert m["avg_write_kib"] == pytest.approx(80 * 512 / 10 / 1024)
    assert m["util_percent"] == 50
    assert m["cpu_user_percent"] == 30 and m["cpu_iowait_percent"] == 20 and m["cpu_busy_percent"] == 40


def test_monitor_sees_real_device_reads(tmp_path):
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    if t.device.name is None:
        pytest.skip(t.device.reason)
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(32 << 20))
    assert cache.cold_cache([f], "files") == cache.BY_FILES_PARAM     # its pages only: the machine's stay
    with monitor.Monitor(t.device.name, 0.05) as mon:
        f.read_bytes()
        time.sleep(0.15)
    s = mon.summary()
    assert s["device_read_bytes"] >= 30 << 20
    assert mon.timeseries() and {"t_s", "read_mb_per_s", "cpu_busy_percent"} <= set(mon.timeseries()[0])


