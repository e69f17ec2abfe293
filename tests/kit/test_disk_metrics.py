"""kit.disk_metrics: the Samsung SDC study's disk-metrics table from the monitor's summary columns."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from storagebrief.kit import disk_metrics as dm

SUMMARY = {"device_read_iops_avg": 300.0, "device_write_iops_avg": 100.0, "device_read_latency_us": 200.0,
           "device_write_latency_us": 600.0, "device_read_bytes": 3_000_000, "device_write_bytes": 1_000_000,
           "device_read_mb_per_s_avg": 3.0, "device_write_mb_per_s_avg": 1.0}


def test_profile_weights_response_time_by_iops_and_converts_mb_to_mib():
    p = dm.profile(SUMMARY)
    assert p["device_iops_avg"] == 400.0
    assert p["device_response_time_us"] == pytest.approx((200 * 300 + 600 * 100) / 400)       # 300 µs
    assert p["device_mib_per_s_avg"] == pytest.approx(4e6 / 2**20)
    assert p["device_read_percent"] == 75.0
    assert dm.profile({}) == {}                                 # no monitored device: nothing invented
    idle = dict(SUMMARY, device_read_iops_avg=0.0, device_write_iops_avg=0.0, device_read_bytes=0, device_write_bytes=0)
    assert dm.profile(idle)["device_response_time_us"] == 0.0 and dm.profile(idle)["device_read_percent"] == 0.0


def test_table_has_one_row_per_metric_and_one_column_per_configuration():
    groups = pd.DataFrame({"device_iops_avg": [400.0, 50.0], "cpu_user_percent": [12.0, 3.0],
                           "cpu_system_percent": [4.0, 1.0], "cpu_iowait_percent": [0.25, 7.5]},
                          index=pd.Index([2, 4], name="streams"))
    table = dm.table(groups, [("IOPS", lambda r: dm.cell(r, "device_iops_avg")), ("CPU", dm.cpu_text),
                              ("absent", lambda r: dm.cell(r, "nope"))], "metric", column=lambda k: f"{k} streams")
    assert list(table.columns) == ["metric", "2 streams", "4 streams"]
    assert table["metric"].tolist() == ["IOPS", "CPU", "absent"]
    assert table["2 streams"].tolist()[:2] == [400.0, "12 / 4 / 0.2"] and table["4 streams"][1] == "3 / 1 / 7.5"
    assert math.isnan(table["4 streams"][2])
