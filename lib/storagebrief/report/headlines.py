"""Headline arithmetic: how much better the reference target is than each other one.

Every study's headlines() is versus_reference(); the brief's snapshot cards and
headlines.json come from here, so a card is always recomputable from runs.csv.
"""
from __future__ import annotations

import math

import pandas as pd

from . import formatting


def compare(frame: pd.DataFrame, metric: str, better: str, keys: list[str], ref: str, other: str,
            label: str) -> dict:
    """How much better `ref` is than `other` on `metric`, at best, over matched configurations.

    Means over repeats per configuration; delta % = (ref/other - 1) * 100 when higher
    is better, (1 - ref/other) * 100 when lower is better. 'Up to' = the maximum.
    """
    means = frame.groupby(keys + ["target"], dropna=False)[metric].mean().unstack("target")
    hid = f"{metric}:{ref}_vs_{other}"
    base = {"id": hid, "label": label, "metric": metric, "better": better, "ref": ref, "other": other}
    if ref not in means or other not in means:
        return {**base, "delta_percent": None, "at": {}, "configurations": 0,
                "text": f"{ref} vs {other}: no matched runs"}
    pair = means[[ref, other]].dropna()
    pair = pair[(pair[other] > 0) & (pair[ref] > 0)]
    if pair.empty:
        return {**base, "delta_percent": None, "at": {}, "configurations": 0,
                "text": f"{ref} vs {other}: no matched runs"}
    ratio = pair[ref] / pair[other]
    delta = (ratio - 1) * 100 if better == "higher" else (1 - ratio) * 100
    at = delta.idxmax()
    value = float(delta.max())
    at_dict = dict(zip(keys, at if isinstance(at, tuple) else (at,)))
    word = "higher" if better == "higher" else "lower"
    if value > 0:
        text = f"up to {formatting.difference(value, better)}"
    else:
        text = f"never {word} (best case {value:+.1f}%)"
    return {**base, "delta_percent": round(value, 1), "at": {k: _plain(v) for k, v in at_dict.items()},
            "configurations": int(len(pair)), "text": text}


def versus_reference(frame: pd.DataFrame, target_names: list[str], keys: list[str],
                     metrics: list[tuple[str, str, str]]) -> list[dict]:
    """compare() of the first (reference) target with each other one, per (metric, better, label).

    Metrics missing from the frame are left out. Every study's headlines() is this call.
    """
    return [compare(frame, metric, better, keys, target_names[0], other, label)
            for other in target_names[1:] for metric, better, label in metrics if metric in frame]


def _plain(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.item() if hasattr(v, "item") else v


def as_metrics(headlines: list[dict]) -> dict:
    """The headlines as metrics.json holds them: id -> delta percent (None: no matched runs)."""
    return {h["id"]: h["delta_percent"] for h in headlines}
