"""report.headlines: compare() (higher/lower better, ties, missing targets, zero/NaN values, where the best
delta is, the never-better text), versus_reference() order and missing metrics, as_metrics()."""
from __future__ import annotations

import math

import pandas as pd

from storagebrief.report.headlines import as_metrics, compare, versus_reference


def _frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["target", "bs", "mb", "lat"])


# A: bs 1 twice (mean mb 110, mean lat 80), bs 2 (mb 150, lat 90); B: mb 100, lat 100 at both sizes
AB = _frame([("A", 1, 100.0, 70.0), ("A", 1, 120.0, 90.0), ("A", 2, 150.0, 90.0),
             ("B", 1, 100.0, 100.0), ("B", 2, 100.0, 100.0)])


def test_higher_is_better_takes_the_largest_delta_and_where():
    h = compare(AB, "mb", "higher", ["bs"], "A", "B", "Throughput")
    # bs 1: (110 / 100 - 1) x 100 = 10 %; bs 2: (150 / 100 - 1) x 100 = 50 % -> up to 50 % at bs 2
    assert h["delta_percent"] == 50.0 and h["at"] == {"bs": 2} and h["configurations"] == 2
    assert h["text"] == "up to 50.0% higher"
    assert h["id"] == "mb:A_vs_B" and (h["label"], h["metric"], h["better"], h["ref"], h["other"]) == \
        ("Throughput", "mb", "higher", "A", "B")
    assert type(h["at"]["bs"]) is int       # a plain Python value (JSON), not numpy


def test_lower_is_better():
    h = compare(AB, "lat", "lower", ["bs"], "A", "B", "Latency")
    # bs 1: (1 - 80 / 100) x 100 = 20 %; bs 2: (1 - 90 / 100) x 100 = 10 % -> up to 20 % at bs 1
    assert h["delta_percent"] == 20.0 and h["at"] == {"bs": 1}
    assert h["text"] == "up to 20.0% lower"


def test_never_better_says_so_with_the_best_case():
    h = compare(AB, "mb", "higher", ["bs"], "B", "A", "Throughput")
    # bs 1: (100 / 110 - 1) x 100 = -9.09 %; bs 2: (100 / 150 - 1) x 100 = -33.3 % -> best case -9.1 % at bs 1
    assert h["delta_percent"] == -9.1 and h["at"] == {"bs": 1}
    assert h["text"] == "never higher (best case -9.1%)"
    lo = compare(AB, "lat", "lower", ["bs"], "B", "A", "Latency")
    # bs 1: (1 - 100 / 80) x 100 = -25 %; bs 2: (1 - 100 / 90) x 100 = -11.1 % -> best case -11.1 % at bs 2
    assert lo["delta_percent"] == -11.1 and lo["at"] == {"bs": 2}
    assert lo["text"] == "never lower (best case -11.1%)"


def test_a_tie_is_never_better_and_at_is_the_first_configuration():
    f = _frame([("A", 1, 100.0, 1.0), ("A", 2, 100.0, 1.0), ("B", 1, 100.0, 1.0), ("B", 2, 100.0, 1.0)])
    h = compare(f, "mb", "higher", ["bs"], "A", "B", "x")
    # (100 / 100 - 1) x 100 = 0 at both: 0 is not better; the first of the tied configurations
    assert h["delta_percent"] == 0.0 and h["text"] == "never higher (best case +0.0%)"
    assert h["at"] == {"bs": 1} and h["configurations"] == 2


def test_a_missing_target_gives_no_delta():
    for ref, other in (("C", "B"), ("A", "C")):
        h = compare(AB, "mb", "higher", ["bs"], ref, other, "x")
        assert h["delta_percent"] is None and h["at"] == {} and h["configurations"] == 0
        assert h["text"] == f"{ref} vs {other}: no matched runs" and h["id"] == f"mb:{ref}_vs_{other}"


def test_zero_and_nan_values_are_left_out():
    f = _frame([("A", 1, 100.0, 1.0), ("A", 2, 300.0, 1.0), ("A", 3, math.nan, 1.0),
                ("B", 1, 0.0, 1.0), ("B", 2, 200.0, 1.0), ("B", 3, 100.0, 1.0)])
    h = compare(f, "mb", "higher", ["bs"], "A", "B", "x")
    # bs 1: B = 0 (no ratio); bs 3: A NaN; only bs 2: (300 / 200 - 1) x 100 = 50 %
    assert h["delta_percent"] == 50.0 and h["at"] == {"bs": 2} and h["configurations"] == 1
    zero = _frame([("A", 1, 0.0, 1.0), ("B", 1, 5.0, 1.0)])
    h = compare(zero, "mb", "higher", ["bs"], "A", "B", "x")
    assert h["delta_percent"] is None and h["configurations"] == 0 and h["text"] == "A vs B: no matched runs"


def test_at_over_several_keys_and_a_nan_key():
    f = pd.DataFrame({"target": ["A", "B", "A", "B"], "rw": ["r", "r", "w", "w"], "qd": [1.0, 1.0, math.nan, math.nan],
                      "mb": [120.0, 100.0, 300.0, 100.0]})
    h = compare(f, "mb", "higher", ["rw", "qd"], "A", "B", "x")
    # (r, 1): 20 %; (w, NaN): (300 / 100 - 1) x 100 = 200 %: a configuration with a missing key still counts,
    # and its key is None in `at`
    assert h["delta_percent"] == 200.0 and h["at"] == {"rw": "w", "qd": None} and h["configurations"] == 2


def test_versus_reference_order_and_missing_metrics():
    f = pd.concat([AB, _frame([("C", 1, 50.0, 200.0), ("C", 2, 50.0, 200.0)])])
    metrics = [("mb", "higher", "Throughput"), ("nope", "higher", "Missing"), ("lat", "lower", "Latency")]
    hs = versus_reference(f, ["A", "B", "C"], ["bs"], metrics)
    # other targets in order, each with the metrics in order; "nope" is not in the frame: left out
    assert [h["id"] for h in hs] == ["mb:A_vs_B", "lat:A_vs_B", "mb:A_vs_C", "lat:A_vs_C"]
    # A vs C: mb bs 2: (150 / 50 - 1) x 100 = 200 %; lat bs 1: (1 - 80 / 200) x 100 = 60 %
    assert [h["delta_percent"] for h in hs] == [50.0, 20.0, 200.0, 60.0]
    assert versus_reference(f, ["A"], ["bs"], metrics) == []         # no other target


def test_as_metrics():
    hs = [compare(AB, "mb", "higher", ["bs"], "A", "B", "x"), compare(AB, "mb", "higher", ["bs"], "A", "Z", "x")]
    assert as_metrics(hs) == {"mb:A_vs_B": 50.0, "mb:A_vs_Z": None}
    assert as_metrics([]) == {}
    assert as_metrics([{"id": "k", "delta_percent": -1.5, "text": "t"}]) == {"k": -1.5}
