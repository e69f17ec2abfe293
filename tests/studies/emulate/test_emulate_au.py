"""Emulated accelerators: the AU definition (compute ÷ wall, nothing subtracted), its steady-state window,
and what limited a run (storage, the client, neither) with accelerators supported (issue 11)."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from storagebrief.core import config
from storagebrief.studies.emulate import STUDY, limits, metrics
from test_emulate import SMALL, params_dict


# --------------------------------------------------------------------------- arithmetic
def synthetic_times(n: int, steps: int, compute: float, wait: list[float], overshoot: float, release: float,
                    t_start: float = 100.0) -> np.ndarray:
    """Timelines as the workers record them: wait for data, compute, barrier."""
    times = np.zeros((n, steps, 5))
    boundary = t_start
    for s in range(steps):
        arrive = []
        for r in range(n):
            t0 = boundary
            t1 = t0 + wait[r]
            t2 = t1 + compute + overshoot
            arrive.append(t2)
            times[r, s, :4] = (t0, t1, t2, t2)
        boundary = max(arrive) + release
        times[:, s, 4] = boundary
    return times


def test_au_arithmetic_on_synthetic_timings():
    compute, steps = 0.1, 11
    times = synthetic_times(2, steps, compute, wait=[0.0, 0.05], overshoot=0.001, release=0.0005)
    m = metrics.job_metrics(times, compute, batch=4, t_start=100.0)
    # Each step: slowest waits 0.05 s for data, then computes; overshoot and release are the emulator's own
    # delays. Issue 11: AU = compute / wall with nothing subtracted (MLPerf Storage / DLIO); the figure with
    # those delays removed (the former au_percent) is kept under its own name.
    assert m["au_percent"] == pytest.approx(100 * 0.1 / (0.15 + 0.0015), rel=1e-9)
    assert m["au_percent_overhead_removed"] == pytest.approx(100 * 0.1 / 0.15, rel=1e-9)
    assert m["emulator_overhead_s"] == pytest.approx((steps - 1) * 0.0015, rel=1e-9)
    step = 0.15 + 0.0015
    assert m["total_time_s"] == pytest.approx(steps * step)
    assert m["samples_per_s"] == pytest.approx(2 * 4 * (steps - 1) / ((steps - 1) * step))
    assert m["au_own_percent"][0] == pytest.approx(100.0)
    assert m["au_own_percent"][1] == pytest.approx(100 * 0.1 / 0.15)
    assert m["peer_wait_s"][0] == pytest.approx(steps * (0.05 + 0.0005))
    assert m["compute_overshoot_us_mean"] == pytest.approx(1000.0)


def test_au_is_compute_over_wall_with_late_steps_nothing_subtracted():
    """Accelerators late by scheduling delay (a saturated client) lower AU: the delay is not subtracted."""
    compute, steps = 0.1, 10
    times = synthetic_times(3, steps, compute, wait=[0.0, 0.0, 0.0], overshoot=0.0, release=0.0)
    late = {3: 0.2, 6: 0.05, 7: 0.3}               # step -> how late the closing accelerator was
    for s, extra in late.items():                  # accelerator 2 woke up late from its compute
        times[2, s, 2:4] += extra
        times[:, s, 4] += extra
        times[:, s + 1:, :] += extra
    m = metrics.job_metrics(times, compute, batch=2, t_start=100.0)
    wall = steps * compute + sum(late.values())
    first_wall = compute                           # step 0 (excluded) was on time
    assert m["total_time_s"] == pytest.approx(wall)
    assert m["measured_time_s"] == pytest.approx(wall - first_wall)
    assert m["au_percent"] == pytest.approx(100 * compute * (steps - 1) / (wall - first_wall), rel=1e-9)
    assert m["au_percent"] < 70                    # 0.9 s of compute in 1.45 s
    # The lateness is measured (as sleep overshoot of the accelerator that closed the step) ...
    assert m["emulator_overhead_s"] == pytest.approx(sum(late.values()))
    # ... and only the separately named figure takes it out.
    assert m["au_percent_overhead_removed"] == pytest.approx(100.0)


def test_steady_state_au_window():
    """AU leaves out read_threads x (prefetch + 1) steps at each end (at most a quarter of the run each)."""
    assert metrics.au_window(63, 4, 2) == (12, 51)      # quick unet3d at 4 accelerators: steps 13..51
    assert metrics.au_window(252, 4, 2) == (12, 240)
    assert metrics.au_window(21, 4, 2) == (5, 16)       # capped at (21 - 1) // 4
    assert metrics.au_window(3, 4, 2) == (1, 3)         # the first step is always left out
    assert metrics.au_window(2, 4, 2) == (1, 2)
    assert metrics.au_window(1, 4, 2) == (0, 1)
    # Storage-bound run: after a slow first step the loader holds W batches (batch 0 among them), so steps
    # 1..W-1 are free; at the end the loader runs dry W steps early. Inside the window every step waits
    # 0.3 s for data: AU = 0.1 / 0.4.
    compute, steps, w = 0.1, 40, 4
    times = synthetic_times(1, steps, compute, wait=[0.3], overshoot=0.0, release=0.0)
    for s in list(range(1, w)) + list(range(steps - w, steps)):
        times[0, s, 1:] -= 0.3                     # batch already there: no wait ...
        times[0, s + 1:, :] -= 0.3                 # ... and every later step starts earlier
    window = metrics.au_window(steps, read_threads=2, prefetch=1)
    assert window == (w, steps - w)
    steady = metrics.job_metrics(times, compute, batch=1, t_start=100.0, window=window)
    assert steady["au_percent"] == pytest.approx(25.0)
    assert (steady["au_warmup_steps"], steady["au_window_steps"], steady["au_drain_steps"]) == (w, steps - 2 * w, w)
    assert steady["samples_per_s"] == pytest.approx(1 / 0.4)
    whole = metrics.job_metrics(times, compute, batch=1, t_start=100.0)   # all steps but the first
    free = (w - 1) + w                                          # 7 free steps of 0.1 s, 32 of 0.4 s
    assert whole["au_percent"] == pytest.approx(100 * 0.1 * 39 / (free * 0.1 + (39 - free) * 0.4))   # 28.9 %


def test_first_step_is_excluded_from_au():
    times = synthetic_times(1, 6, 0.1, wait=[0.0], overshoot=0.0, release=0.0)
    times[0, 0, 1:] += 5.0   # a slow first step (empty prefetch queues)
    times[0, 1:, :] += 5.0
    m = metrics.job_metrics(times, 0.1, batch=1, t_start=100.0)
    assert m["au_percent"] == pytest.approx(100.0)
    assert m["total_time_s"] == pytest.approx(5.0 + 0.6)


@pytest.mark.e2e
def test_cpu_starved_client_is_classified_client_and_not_supported(tmp_path):
    """8 accelerators with 1 ms of compute on one core, tiny records in page cache: the client, not the
    storage, is the limit; the run says so and earns the target no "accelerators supported"."""
    section = {**SMALL, "accelerators": [8], "num_files": 2048, "epochs": 2, "read_threads": 2, "prefetch": 1,
               "read_block_kib": 64,
               "workload_overrides": {"unet3d": {"record_bytes": 4096, "record_bytes_stdev": 0,
                                                 "batch_size_by_accelerator": {"v100": 2},
                                                 "compute_s": {"v100": 0.001}}}}
    p = config.validate(params_dict(tmp_path, section, cold_cache=False))   # data stays in page cache
    out = tmp_path / "out"
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})        # the accelerators fork from here: all on one core
    try:
        frame = STUDY.run(p, out, log=lambda *_: None, progress="off")
    finally:
        os.sched_setaffinity(0, allowed)
    row = frame.iloc[0]
    assert row.client_cores == 1
    assert row.au_percent < 90, row.au_percent
    # The evidence is the client's (a saturated machine or core, a busy accelerator, or accelerators late by
    # themselves: most of the lost time their own delays), whichever the load beside this test left strongest
    # (under the suite: 89 % machine CPU once; a 0.89 delay share with nothing saturated; a saturated CPU and
    # 99 % of the lost time the delays while other tests' reads made the shared disk's latency 20x its idle's).
    client, storage, delay = limits._evidence(row.to_dict(), 100.0)
    assert client or delay >= 0.5, row.limited_by_reason
    assert not storage or delay >= 0.5, row.limited_by_reason
    assert row.limited_by == "client" and not row.au_pass, row.limited_by_reason
    assert row.demand_samples_per_s == pytest.approx(8 * 2 / 0.001)
    assert row.samples_per_s < 0.9 * row.demand_samples_per_s
    assert row.client_cpu_s > 0 and row.client_cpu_s_per_gb > 0
    assert row.client_cpu_s_per_step == pytest.approx(row.client_cpu_s / row.steps)
    sup = metrics.supported(frame).iloc[0]
    assert pd.isna(sup.accelerators_supported) and sup.supported_limited_by == "client"
    assert sup.accelerators_supported_text == "client-limited at 8"
    m = json.loads((out / "metrics.json").read_text())
    assert m["unet3d"]["fast"]["accelerators_supported"] == "client-limited at 8"
    ml = json.loads((out / "mlperf_results.json").read_text())
    assert ml["accelerators_supported"][0]["accelerators_supported"] is None
    assert ml["results"][0]["limited_by"] == ["client"]


# --------------------------------------------------------------------------- what limited a run
def test_supported_rule_with_what_limited_it():
    """The first failing N decides: storage-limited -> the largest passing N; client-limited -> no number."""
    def frame(rows):
        return pd.DataFrame([{"workload": "w", "target": "t", "au_threshold_percent": 90.0, "accelerators": n,
                              "au_percent": au, "limited_by": by} for n, au, by in rows])
    sup = metrics.supported(frame([(1, 99, "none"), (2, 95, "none"), (4, 60, "storage"), (8, 30, "client")])).iloc[0]
    assert (sup.accelerators_supported, sup.supported_limited_by, sup.accelerators_supported_text) == (2, "storage", "2")
    sup = metrics.supported(frame([(1, 99, "none"), (2, 80, "client"), (4, 95, "none")])).iloc[0]
    assert pd.isna(sup.accelerators_supported) and sup.accelerators_supported_text == "client-limited at 2"
    assert sup.accelerators_supported_at_least == 1 and not sup.limited_by_sweep
    sup = metrics.supported(frame([(1, 99, "none"), (2, 98, "none")])).iloc[0]
    assert (sup.accelerators_supported, sup.supported_limited_by, bool(sup.limited_by_sweep)) == (2, "none", True)


def _row(au, bound=float("nan"), **kw):
    """A run's evidence: 10 s measured, no emulator delay, nothing busy unless given."""
    return {"au_percent": au, "throttle_au_bound_percent": bound, "measured_time_s": 10.0, "emulator_overhead_s": 0.0,
            "cpu_busy_percent": 20.0, "client_cpu_percent_of_cores": 10.0, "device_util_percent_avg": 10.0, **kw}


def test_what_limited_a_run_is_never_none_below_its_bound():
    """none only within 3 points of the bound; below it a cause from the evidence, or 'unexplained'."""
    by = limits.limited_by
    assert by(_row(98.0))[0] == "none"
    assert by(_row(94.0, cpu_busy_percent=99.0))[0] == "client"            # passes the 90 % rule, still lost 6 points
    assert by(_row(94.0))[0] == "unexplained"                             # no evidence either way: said so
    assert by(_row(50, cpu_busy_percent=95.0))[0] == "client"             # machine busy
    assert by(_row(50, cpu_busy_percent_max_core=99.0))[0] == "client"    # one core saturated
    assert by(_row(50, client_cpu_percent_of_cores=97.0))[0] == "client"  # the accelerators used all their cores
    assert by(_row(67, au_percent_overhead_removed=98.8))[0] == "client"  # late by themselves (scheduling)
    assert by(_row(67, emulator_overhead_s=2.0))[0] == "client"           # 2 of 3.3 s lost were its own delays
    assert by(_row(50, device_util_percent_avg=99.0))[0] == "storage"     # device busy
    slow = by(_row(50, device_read_latency_us=9000.0, device_read_latency_us_idle=1000.0))
    assert slow[0] == "storage" and "9.0 × the idle device" in slow[1]
    assert by(_row(50, cgroup_read_mb_per_s_au_window=95.0, throttle_cap_mb_per_s=100.0))[0] == "storage"
    assert by(_row(58.0, bound=60.0)) == ("storage", "AU 58.0 % at the throttle's bound of 60.0 % (the target's profile)")
    assert by(_row(40.0, bound=60.0))[0] == "unexplained"                 # far below the throttle's bound
    # both sides busy: the side that explains more of the lost time wins, and the reason names both
    both = by(_row(50, device_util_percent_avg=99.0, cpu_busy_percent=95.0, emulator_overhead_s=1.0))
    assert both[0] == "storage" and "device 99 % utilised" in both[1] and "machine CPU busy 95 %" in both[1]
    both = by(_row(50, device_util_percent_avg=99.0, cpu_busy_percent=95.0, emulator_overhead_s=4.0))
    assert both[0] == "client"
    assert by({"au_percent": 50.0})[0] == "unexplained"                  # nothing recorded
    # the device busy or slow with others' bytes (core/interference.py), the run's data page-cached: no storage
    # evidence; the emulator's own delays are then the cause (run21: "device 81 % utilised" beside other tests)
    theirs = {"device_util_percent_avg": 99.0, "device_read_latency_us": 9000.0, "device_read_latency_us_idle": 1000.0,
              "other_device_bytes": 400e6, "run_io_bytes": 1e6, "cgroup_read_bytes": 0}
    assert by(_row(50, **theirs, emulator_overhead_s=4.6)) == (
        "client", "accelerators late by themselves, no CPU saturated (50.0 points below its bound of 100 %; 92 % of "
                  "the lost time the emulator's own delays)")
    assert by(_row(50, **theirs))[0] == "unexplained"
    assert by(_row(50, **{**theirs, "cgroup_read_bytes": 500e6}))[0] == "storage"   # the run's own bytes: its device
    # one accelerator process at its interpreter's one core, on a 2-core client far from full (issue 45)
    one = by(_row(50, client_cpu_cores_busiest_accelerator=0.93, client_busiest_accelerator=3))
    assert one[0] == "client" and "accelerator 3 used 0.93 of the one core a Python process runs on" in one[1]
    assert by(_row(50, client_cpu_cores_busiest_accelerator=0.5))[0] == "unexplained"


def test_the_busiest_accelerator_process_is_recorded():
    ranks = [{"cpu_s": 1.0, "cpus": [0, 1]}, {"cpu_s": 4.5, "cpus": [0, 1]}, {"cpu_s": 2.0, "cpus": [0, 1]}]
    cols = limits.client_cpu_columns(ranks, 5.0, 10, 10**9)
    assert cols["client_cpu_cores_busiest_accelerator"] == pytest.approx(0.9)
    assert cols["client_busiest_accelerator"] == 1 and cols["client_cpu_percent_of_cores"] == pytest.approx(75.0)
    # on S3 an accelerator's CPU includes its compiled client's, which runs beside the interpreter, not in it
    ranks[1]["helper_cpu_s"] = 3.5
    cols = limits.client_cpu_columns(ranks, 5.0, 10, 10**9)
    assert cols["client_busiest_accelerator"] == 2 and cols["client_cpu_cores_busiest_accelerator"] == pytest.approx(0.4)
    assert cols["client_cpu_s"] == pytest.approx(7.5)


def test_two_probes_with_two_causes_are_uncertain():
    assert limits.point_cause(["client", "client"]) == "client"
    assert limits.point_cause(["storage", "client"]) in ("uncertain (storage × 1, client × 1)",
                                                         "uncertain (client × 1, storage × 1)")


def test_idle_probe_reads_its_own_file_and_leaves_the_page_cache(tmp_path):
    """O_DIRECT reads drop a file's cached pages: the probe must not read the dataset (run.cold_cache: false)."""
    import shutil
    import subprocess
    from types import SimpleNamespace

    from storagebrief.core import targets as targets_mod
    from storagebrief.studies.emulate.run import idle_read_latency_us

    if shutil.which("fincore") is None:
        pytest.skip("needs fincore (util-linux) to see the page cache")
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    data.read_bytes()
    before = subprocess.run(["fincore", "-bno", "RES", str(data)], capture_output=True, text=True).stdout.strip()
    target = SimpleNamespace(device=targets_mod.resolve_device(tmp_path))
    if not target.device.name:
        pytest.skip(f"no block device under {tmp_path}")
    idle_read_latency_us(target, tmp_path, 65536)
    after = subprocess.run(["fincore", "-bno", "RES", str(data)], capture_output=True, text=True).stdout.strip()
    assert after == before and int(after) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]      # the probe file is gone


def test_the_machine_busy_evidence_names_the_other_work_beside_the_run():
    """Issue 61: a busy machine is the client's evidence; the share that was other work (core/interference.py) is
    named, so a reader can tell a saturated client from a disturbed run."""
    reason = limits.limited_by(_row(50, cpu_busy_percent=95.0, other_cpu_cores_avg=1.1))[1]
    assert "machine CPU busy 95 % of the run, 1.10 cores of it other work" in reason
    assert "other work" not in limits.limited_by(_row(50, cpu_busy_percent=95.0, other_cpu_cores_avg=0.1))[1]
