"""How the brief writes a difference, once for every study: a percent below 2×, a ratio (×N) from
2× on (a difference of several hundred times reads as a factor, not as a five-digit percent), 3
significant digits with thousands separators, and a spread over repeats only when it says something
the value does not (a spread that rounds to the value is noise on a card)."""
from __future__ import annotations

import math

RATIO_FROM = 2.0      # a difference of at least this factor is written as ×N


def factor(delta_percent: float, better: str) -> float:
    """The ref ÷ other factor in the direction that is better (>1 when the reference is better)
    from compare()'s delta %: higher: 1 + d/100; lower: 1 / (1 - d/100)."""
    if better == "higher":
        return 1 + delta_percent / 100
    rest = 1 - delta_percent / 100
    return math.inf if rest <= 0 else 1 / rest


def significant(x: float, digits: int = 3) -> str:
    """3 significant digits, thousands separators: 372, 2.5, 1,250, 0.0123."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    text = f"{round(x, places):,.{places}f}"
    return text.rstrip("0").rstrip(".") if places else text


def difference(delta_percent: float, better: str) -> str:
    """'50.0% higher', '20.0% lower', or from 2× on '372× as high' / '500× lower'."""
    word = "higher" if better == "higher" else "lower"
    f = factor(delta_percent, better)
    if f >= RATIO_FROM:
        return f"{significant(f)}× as high" if better == "higher" else f"{significant(f)}× lower"
    return f"{delta_percent:.1f}% {word}"


def spread(lo_percent: float, hi_percent: float, better: str) -> str:
    """' (repeats a … b)' in the value's own form, or '' when both ends read the same."""
    a, b = difference(lo_percent, better), difference(hi_percent, better)
    if a == b:
        return ""
    unit = lambda s: s.split(" ", 1)[1]   # noqa: E731  "higher", "× as high", …
    if unit(a) == unit(b):
        a = a.split(" ", 1)[0]
    return f" (repeats {a} … {b})"


def change(delta_percent: float) -> str:
    """A signed effect (a limit's effect on one target): '+65.7%', '-15.5%', from 2× on '627× as much' or
    '3.2× less'."""
    f = 1 + delta_percent / 100
    if f >= RATIO_FROM:
        return f"{significant(f)}× as much"
    if 0 < f <= 1 / RATIO_FROM:
        return f"{significant(1 / f)}× less"
    return f"{delta_percent:+.1f}%"
