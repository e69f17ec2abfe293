"""Is an AU a measurement (issue 61)? The loaders' bytes inside the AU window must support it, the window must
span a stated minimum of steps, a run that fails either cannot pass and a search says "not answered at this
scale" instead of "≥ N"; a run the page cache served says so, and AU above its throttle bound is never "at" it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from storagebrief.brief import accelerators as page_one
from storagebrief.studies.emulate import limits, run as emulate_run, window
from storagebrief.studies.emulate.loader import Loader
from storagebrief.studies.emulate.search import Search
from test_emulate_search import drive


def quick_row(n: int, au: float, window_steps: int, read_mb_per_s: float | None, **kw) -> dict:
    """A quick-profile unet3d row (336 files of 0.5 MB, batch 4, 0.04 s, 2 epochs, 4 threads, prefetch 2) whose
    loaders read `read_mb_per_s` over its AU window (0.04 s x window steps / AU)."""
    measured = 0.04 * window_steps / (au / 100)
    row = {"workload": "unet3d", "target": "t", "accelerators": n, "au_percent": au, "au_threshold_percent": 90.0,
           "demand_mb_per_s_per_accelerator": 49.8, "measured_time_s": measured, "au_window_steps": window_steps,
           "read_threads": 4, "prefetch": 2, "num_files": 336, "dataset_bytes": 336 * 498_000,
           "sample_bytes_mean": 498_000, "batch_size": 4, "epochs": 2, "cpu_busy_percent": 20.0,
           "emulator_overhead_s": 0.0, "device_util_percent_avg": 10.0,
           "loader_bytes_au_window": None if read_mb_per_s is None else read_mb_per_s * 1e6 * measured, **kw}
    return {**row, **window.checks(row)}


def test_the_loaders_bytes_inside_the_window_are_prorated_per_batch():
    spans = np.array([[0.0, 1.0, 100.0],     # before the window
                      [1.5, 2.5, 100.0],     # half inside
                      [3.0, 4.0, 100.0],     # inside
                      [4.5, 4.5, 50.0],      # an instant read inside
                      [5.5, 6.5, 100.0]])    # half inside at the end
    assert window.bytes_in_window(spans, 2.0, 6.0) == pytest.approx(50 + 100 + 50 + 50)
    assert window.bytes_in_window(np.zeros((0, 3)), 0.0, 1.0) == 0.0


def test_the_loader_records_every_batch_read(tmp_path):
    files = []
    for i in range(3):
        f = tmp_path / f"f{i}"
        f.write_bytes(bytes(10_000 + i))
        files.append(str(f))
    batches = [[(i, 0, 10_000 + i)] for i in range(3)] * 2
    loader = Loader(files, batches, threads=2, prefetch=1, block=4096)
    loader.start()
    got = [loader.next() for _ in batches]
    loader.close()
    spans = loader.read_spans()
    assert spans.shape == (6, 3) and (spans[:, 1] >= spans[:, 0]).all()
    assert spans[:, 2].sum() == sum(got) == sum(loader.bytes)


def test_minimum_window_and_the_data_set_that_reaches_it():
    assert window.min_window_steps(4, 2) == 24                 # quick unet3d: 2 x 4 threads x (2 + 1)
    assert window.min_run_steps(4, 2) == 44                    # steps 11..34 of 44: a 24-step window
    first, stop = window.au_window(44, 4, 2)
    assert stop - first == 24 and window.au_window(43, 4, 2)[1] - window.au_window(43, 4, 2)[0] == 23
    # at 4 accelerators 336 files give 42 steps (window 22); 352 give 44
    assert window.files_for_window(quick_row(4, 98.0, 22, 200.0)) == 352


def test_the_32_accelerator_quick_run_is_no_measurement_and_cannot_pass():
    """Issue 61's run: a 3-step window, 279-286 MB/s read against 32 x 49.8 MB/s demanded, AU 94 %."""
    row = quick_row(32, 94.0, 3, 283.0)
    assert row["au_window_min_steps"] == 24 and row["au_supported_by_reads"] is False
    assert row["au_read_support_ratio"] == pytest.approx(283.0 / (0.94 * 32 * 49.8), rel=1e-6)
    assert row["au_measured"] is False
    by, why = limits.limited_by(row)
    assert by == "unmeasured"
    assert "prefetch carried the window (too few steps)" in why and "its window was 3 steps, under the 24" in why
    assert "0.19 × the" in why and "emulate.num_files ≥" in why
    # the same AU over a window long enough, with the reads to match: a measurement, nothing limited it
    ok = quick_row(2, 98.0, 60, 0.98 * 2 * 49.8)
    assert (ok["au_measured"], ok["au_supported_by_reads"]) == (True, True)
    assert limits.limited_by(ok)[0] == "none"
    # a long window whose reads fall short of AU's claim by more than 10 %: prefetch (or a stale clock) carried it
    short = quick_row(4, 97.0, 40, 0.85 * 4 * 49.8 * 0.97)
    assert short["au_measured"] is False and limits.limited_by(short)[0] == "unmeasured"
    within = quick_row(4, 97.0, 40, 0.92 * 4 * 49.8 * 0.97)
    assert within["au_measured"] is True
    # a failing AU over a short window stays a failure with its own cause: prefetch only raises AU
    slow = quick_row(16, 60.0, 6, 400.0, device_util_percent_avg=99.0)
    assert slow["au_measured"] is False and limits.limited_by(slow)[0] == "storage"
    # rows written before these columns (old runs.csv): no verdict either way
    old = {k: v for k, v in ok.items() if not k.startswith(("au_measured", "au_supported"))}
    assert limits.limited_by(old)[0] == "none"


def test_an_unmeasured_count_stops_a_search_not_answered_at_this_scale():
    """Counts from 16 on pass on too few steps: the search says so instead of "≥ 32 (search budget)"."""
    def au(n):
        return (95.0, "unmeasured") if n >= 16 else (99.0, "none")
    s = Search(90.0, repeats=2, budget_s=1e9, cap=64)
    frame = pd.DataFrame(drive(s, au))
    out = s.outcome()
    assert [int(n) for n in frame.accelerators.drop_duplicates()] == [1, 2, 4, 8, 16]
    assert (out.answer, out.limited_by, out.first_fail) == (None, "scale", 16)
    assert out.text.startswith("not answered at this scale (8 passed; at 16 AU was no measurement")
    assert "≥" not in out.text
    sup = limits.supported(frame).iloc[0]          # the rows alone give the same answer
    assert pd.isna(sup.accelerators_supported) and sup.supported_limited_by == "scale"
    assert (sup.accelerators_supported_text, sup.accelerators_supported_at_least) == (out.text, 8)
    # in the bisection: 16 fails on storage, 12 passes on too few steps
    s = Search(90.0, repeats=1, budget_s=1e9, cap=64)
    drive(s, lambda n: (99.0, "none") if n <= 8 else (95.0, "unmeasured") if n == 12 else (60.0, "storage"))
    assert (s.outcome().limited_by, s.outcome().first_fail) == ("scale", 12)
    # a probe is unmeasured when at least half its repeats were; a failing mean stays a failure
    assert limits.judge([95, 95], ["unmeasured", "none"], 90) == "unmeasured"
    assert limits.judge([95, 95, 95], ["unmeasured", "none", "none"], 90) == "pass"
    assert limits.judge([95, 70], ["unmeasured", "storage"], 90) == "storage"


def test_a_fixed_list_with_an_unmeasured_count_gives_no_floor():
    rows = [quick_row(n, au, w, rate) for n, au, w, rate in
            ((1, 99.0, 144, 49.5), (2, 98.5, 60, 98.0), (4, 98.4, 22, 195.0), (8, 97.9, 12, 390.0))]
    frame = pd.DataFrame([{**r, "limited_by": limits.limited_by(r)[0]} for r in rows])
    assert list(frame.limited_by) == ["none", "none", "unmeasured", "unmeasured"]
    sup = limits.supported(frame).iloc[0]
    assert sup.supported_limited_by == "scale" and pd.isna(sup.accelerators_supported)
    assert sup.accelerators_supported_text == (
        "not answered at this scale (2 passed; at 4 AU was no measurement: too few steps, prefetch carried its "
        "window; a data set of 352 files or more, or the paper profile, answers it)")
    assert not sup.limited_by_sweep


def test_page_one_says_not_answered_at_this_scale():
    e = {"low": 8, "first_fail": 16, "high": 15, "limited_by": "scale", "au": {8: 97.0, 16: 95.0},
         "loader_mb_per_s": {}}
    assert page_one.answer_text(e) == "not answered at this scale (8 passed; at 16 the run was too short to measure)"
    assert page_one.short_text(e) == "not answered at this scale"
    assert "≥" not in page_one.answer_text(e) + page_one.short_text(e)
    assert page_one.floor(e) and "too short" in page_one.unsettled(e)
    assert "8 passed (AU 97.0 %), 16 not measured (AU 95.0 %): its runs too short" in page_one._measured(e)
    assert "neither confirms nor contradicts" in page_one.reconcile(e, {"accelerators_forecast": 20})


def test_page_cache_served_bytes_are_said_and_au_above_its_bound_is_never_at_it():
    """DLIO comparison in issue 61: 2 ranks at 45 MB/s, AU 72 % against a bound of 56.3 %, half the bytes from
    the page cache (device_bytes_per_loader_byte 0.50)."""
    row = quick_row(2, 72.0, 60, 0.72 * 2 * 49.8, throttle_au_bound_percent=56.3, device_bytes_per_loader_byte=0.50,
                    dataset_sizing="memory_cap")
    by, why = limits.limited_by(row)
    assert by == "storage" and "at the throttle's bound" not in why
    assert "AU 72.0 % above the throttle's bound of 56.3 %" in why
    assert "the page cache served 50 % of the loaders' bytes (the device read 0.50 bytes per loader byte)" in why
    at = quick_row(2, 57.0, 60, 0.57 * 2 * 49.8, throttle_au_bound_percent=56.3, device_bytes_per_loader_byte=0.99,
                   dataset_sizing="memory_cap")
    assert limits.limited_by(at) == ("storage", "AU 57.0 % at the throttle's bound of 56.3 % (the target's profile)")
    # a target whose cache is not meant cold: nothing to say
    fixed = {**row, "dataset_sizing": "fixed (page cache not controlled)"}
    assert "page cache" not in limits.limited_by(fixed)[1]
    # and notes.json says it per workload and target
    frame = pd.DataFrame([{**row, "repeat": 1}, {**at, "repeat": 2}])
    notes: list[str] = []
    emulate_run._cache_notes(SimpleNamespace(note=notes.append), frame)
    assert notes == ["emulate: unet3d on 't': the page cache served 50–50 % of the loaders' bytes in 1 of 2 runs "
                     "(device bytes per loader byte 0.50–0.50, at N = 2): their AU is above what the device alone "
                     "delivered, and a throttle's bound does not hold for them"]
