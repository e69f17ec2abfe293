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
