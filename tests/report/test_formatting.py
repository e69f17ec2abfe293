"""The brief's one way of writing a difference (report/formatting.py): percent below 2×, ×N above,
spreads only when they say something."""
from __future__ import annotations

import pytest

from storagebrief.report import formatting as fmt


@pytest.mark.parametrize("delta, better, text", [
    (50.0, "higher", "50.0% higher"), (20.0, "lower", "20.0% lower"), (99.9, "higher", "99.9% higher"),
    (100.0, "higher", "2× as high"), (37195.1, "higher", "373× as high"), (124900.0, "higher", "1,250× as high"),
    (50.0, "lower", "2× lower"), (99.8, "lower", "500× lower"), (49.9, "lower", "49.9% lower"),
])
def test_a_difference_reads_as_percent_below_2x_and_as_a_factor_above(delta, better, text):
    assert fmt.difference(delta, better) == text


def test_factor_is_the_better_direction_ratio():
    assert fmt.factor(150, "higher") == pytest.approx(2.5)
    assert fmt.factor(75, "lower") == pytest.approx(4.0)
    assert fmt.factor(100, "lower") == float("inf")


@pytest.mark.parametrize("x, text", [(372.4, "372"), (2.5, "2.5"), (1250, "1,250"), (0.0123, "0.0123"),
                                     (12.345, "12.3"), (37195.1, "37,195")])
def test_three_significant_digits_with_thousands_separators(x, text):
    assert fmt.significant(x) == text


def test_a_spread_is_shown_only_when_it_differs_from_the_value():
    assert fmt.spread(99.99, 99.99, "lower") == ""                       # rounds to one value: noise
    assert fmt.spread(36506, 37885, "higher") == " (repeats 366× … 380× as high)"
    assert fmt.spread(10, 15, "higher") == " (repeats 10.0% … 15.0% higher)"
    assert fmt.spread(90, 150, "higher") == " (repeats 90.0% higher … 2.5× as high)"


@pytest.mark.parametrize("delta, text", [(65.7, "+65.7%"), (-15.5, "-15.5%"), (62630.5, "627× as much"),
                                         (-68.7, "3.19× less"), (100.0, "2× as much"), (-50.0, "2× less")])
def test_a_signed_change_reads_as_percent_near_1x_and_as_a_factor_beyond_2x(delta, text):
    assert fmt.change(delta) == text


def test_an_arithmetic_sentence_must_add_up_from_its_printed_numbers():
    ok = "a demand of 16 × 49.8 = 796.8 MB/s; read threads × (prefetch + 1) = 4 × (2 + 1) = 12; 1,000 × 2 = 2,000"
    assert fmt.products_that_do_not_add_up(ok) == []
    bad = fmt.products_that_do_not_add_up("a demand of 16 × 50 = 796 MB/s; 3 × 4 = 13")
    assert [b.split(" (")[0] for b in bad] == ["16 × 50 = 796", "3 × 4 = 13"]


def _rendered(monkeypatch, fn, *args) -> str:
    """The Markdown a brief function shows, as text."""
    import IPython.display
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(getattr(o, "data", "")
                                                                                      for o in objs))
    fn(*args)
    return "\n".join(str(s) for s in shown)


def test_the_emulate_analysis_computes_what_it_prints(monkeypatch):
    """The sentence that printed "16 × 50 = 796 MB/s" (demand 49.75 MB/s rounded in print, not in the sum)."""
    import pandas as pd

    from storagebrief.studies.emulate import brief as emulate_brief
    rows = [{"workload": "unet3d", "target": "local", "accelerators": n, "au_percent": au,
             "device_read_mb_per_s_avg": 40.0 * n, "loader_read_mb_per_s": 41.0 * n,
             "throttle_au_bound_percent": float("nan"), "read_latency_us_mean": 900.0, "emulator_overhead_s": 0.01,
             "measured_time_s": 10.0, "au_percent_overhead_removed": au + 0.1,
             "demand_mb_per_s_per_accelerator": 49.75} for n, au in ((4, 98.1), (8, 94.0), (16, 76.5))]
    sup = pd.DataFrame([{"workload": "unet3d", "target": "local", "au_threshold_percent": 90.0,
                         "accelerators_supported_text": "client-limited at 16", "searched": False,
                         "supported_limited_by": "client", "search_probes": ""}])
    text = _rendered(monkeypatch, emulate_brief._analysis, pd.DataFrame(rows), sup)
    assert "16 × 49.8 = 796.8 MB/s" in text
    assert fmt.products_that_do_not_add_up(text) == []
