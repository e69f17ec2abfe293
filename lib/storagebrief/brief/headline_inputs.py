"""The snapshot's headlines of every readable study, each with what its numbers do not show (a sweep cut short, an
emulated profile or a cold cache that was not applied): read by page 1's findings (pageone.py, quotes.py) and the
snapshot's cards (assemble.py), which imports page 1, so this lives below both."""
from __future__ import annotations

import pandas as pd

from ..core import cache
from ..studies import get as get_study
from . import inputs
from .inputs import unapplied_profiles
from .parts import in_kernel as _in_kernel


def fallback_cache_methods(frame: pd.DataFrame) -> list[str]:
    """cache.cold_cache's fallbacks (no root, or cold cache off); a study may choose a method by
    design (training evicts its dataset files only: 'fadvise_dontneed (dataset files)')."""
    return sorted(m for m in set(frame.cache_method.fillna("").astype(str))
                  if m in ("fadvise_dontneed", cache.BY_FILES_PARAM, cache.BY_FILES_ENV) or m.startswith("none"))


def _caveats(s: inputs.StudyInput, h: dict) -> list[str]:
    """What a headline's numbers do not show: a sweep cut short, an emulated profile or a cold cache that
    was not applied."""
    frame = s.frame
    out = []
    if s.cut_short():
        out.append(f"sweep cut short: {s.status['runs_done']} of {s.status['runs_planned']} runs")
    out += [f"{t}: {why}" for t, why in unapplied_profiles(frame).items() if t in (h["ref"], h["other"])]
    return out + cache_caveats(fallback_cache_methods(frame))


# The cold-cache methods a reader meets in words (the cache_method column keeps how it was chosen).
METHOD_WORDS = {cache.BY_FILES_ENV: "evicting the run's own files (set in the environment)",
                cache.BY_FILES_PARAM: "evicting the run's own files (set in the parameters)"}


def cache_caveats(methods: list[str]) -> list[str]:
    """A headline's words for the cold-cache methods that were not drop_caches: the run's own files by choice
    (run.cold_cache: files, or the variable), or a fallback (no root, cold cache off)."""
    chosen = [m for m in methods if m in (cache.BY_FILES_PARAM, cache.BY_FILES_ENV)]
    rest = [m for m in methods if m not in chosen]
    where = "the environment" if cache.BY_FILES_ENV in chosen else "the parameters"
    out = [f"cold cache of its own files only (set in {where})"] if chosen else []
    return out + ([f"cold cache by {', '.join(rest)}, not drop_caches"] if rest else [])


def snapshot_headlines(reports_dir, survive: bool | None = None) -> tuple[list[dict], list[tuple[str, str]]]:
    """The snapshot's headlines of every readable study, and (study title, why) of those left out.
    survive: a study whose arithmetic fails is left out, not raised (default: inside the brief's kernel)."""
    survive = _in_kernel() if survive is None else survive
    out, left_out = [], []
    for s in inputs.studies(reports_dir):
        if not s.ok:
            left_out.append((s.title, f"could not be read: {s.problem}"))
            continue
        try:
            hs = get_study(s.key).headlines(s.frame, s.names)
        except Exception as exc:   # noqa: BLE001 - one study's arithmetic must not take the others' cards
            if not survive:
                raise
            left_out.append((s.title, f"headlines could not be computed: {type(exc).__name__}: {exc}"))
            continue
        out += [{**h, "study": s.key, "study_title": s.title, "caveats": _caveats(s, h)} for h in hs]
    return out, left_out
