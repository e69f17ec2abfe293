"""How the brief writes a difference, once for every study: a percent below 2×, a ratio (×N) from
2× on (a difference of several hundred times reads as a factor, not as a five-digit percent), 3
significant digits with thousands separators, and a spread over repeats only when it says something
the value does not (a spread that rounds to the value is noise on a card)."""
from __future__ import annotations

import math
import re

RATIO_FROM = 2.0      # a difference of at least this factor is written as ×N


def factor(delta_percent: float, better: str) -> float:
    """The ref ÷ other factor in the direction that is better (>1 when the reference is better)
    from compare()'s delta %: higher: 1 + d/100; lower: 1 / (1 - d/100)."""
    if better == "higher":
        return 1 + delta_percent / 100
    rest = 1 - delta_percent / 100
    return math.inf if rest <= 0 else 1 / rest


def effect_size(h: dict) -> float:
    """How large a headline's difference is, either way: |log| of its better-direction factor (-1 without one)."""
    d = h.get("delta_percent")
    if d is None:
        return -1.0
    f = factor(d, h["better"])
    return math.inf if f == math.inf else abs(math.log(f)) if f > 0 else math.inf


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


_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_TERM = rf"\(?\s*(?:{_NUM})\s*\)?"
_PRODUCT = re.compile(rf"(?<![\d.,])({_TERM}(?:\s*[×÷+]\s*{_TERM})+)\s*=\s*({_NUM})(?![\d])")


def products_that_do_not_add_up(text: str) -> list[str]:
    """Every arithmetic sentence in `text` ("16 × 49.8 = 796.8", "4 × (2 + 1) = 12") whose result is not the
    printed operands' result to the printed precision: the brief computes what it prints from what it
    prints. Expressions without × or ÷ are left alone."""
    bad = []
    for m in _PRODUCT.finditer(text):
        expr, result = m.group(1), m.group(2)
        if "×" not in expr and "÷" not in expr or expr.count("(") != expr.count(")"):
            continue
        try:
            value = eval(expr.replace(",", "").replace("×", "*").replace("÷", "/"), {"__builtins__": {}})  # noqa: S307 - digits and + * / ( ) only
        except (SyntaxError, ZeroDivisionError):
            continue
        decimals = len(result.split(".")[1]) if "." in result else 0
        if abs(value - float(result.replace(",", ""))) > 0.5 * 10 ** -decimals + 1e-9:
            bad.append(f"{m.group(0).strip()} (the printed operands give {value:,.{decimals + 2}f})")
    return bad
