"""Page 1's findings a reader can quote (issue 62: the KIOXIA CM7 and Micron briefs open with a "Test Results
Snapshot" of claims for named drives), above the answers table: one line per study, its first question with a
finding, from the studies' own page-1 answers, and the largest difference between targets.

A study's page-1 answer may carry `quote` = {"lead": ..., "says": ...}: the finding for its target with its context
("feeds 1 emulated accelerator, storage-bound beyond" under "Emulated training (unet3d on V100s, AU ≥ 90 %)");
targets that say the same share it ("local, hdd-emulated: recomputing wins within 128K tokens"). An answer that is
not settled has no quote: its question's line names its targets as "not settled" (the table's footnote says why).
The differences are the snapshot's headlines (report/headlines.py), the largest first, one per study.
"""
from __future__ import annotations

import html
import re

from ..report.formatting import effect_size
from .scorecard import NOT_SETTLED, on_page_one

DIFFERENCES = 1           # "up to N× …" lines between targets page 1 shows at most


def lines(rows: list[dict], headlines: list[dict] | None = None, differences: int = DIFFERENCES) -> list[str]:
    """Page 1's findings as HTML lines, the studies' first, then the largest differences between targets."""
    rows = [a for a in rows if on_page_one(a)]
    out, studies = [], set()
    for q in dict.fromkeys(str(a["question"]) for a in rows):
        mine = [a for a in rows if str(a["question"]) == q]
        study = mine[0].get("study")
        quoted = [a for a in mine if isinstance(a.get("quote"), dict)]
        if not quoted or (study and study in studies):      # one line per study: its first question quoted
            continue
        studies.add(study)
        said: dict[str, list[str]] = {}                     # what is said -> the targets it is said of
        for a in quoted:
            said.setdefault(str(a["quote"]["says"]), []).append(str(a["target"]))
        unsettled = [str(a["target"]) for a in mine if a.get("unsettled") and a not in quoted]
        if unsettled:
            said.setdefault(NOT_SETTLED, []).extend(unsettled)
        words = "; ".join(f"{html.escape(', '.join(ts))}: {html.escape(w)}" for w, ts in said.items())
        out.append(f"<b>{html.escape(str(quoted[0]['quote']['lead']))}</b> — {words}.")
    return out + [difference(h) for h in largest(headlines or [], differences)]


def largest(headlines: list[dict], n: int) -> list[dict]:
    """The n largest target-vs-target differences, one per study (report/headlines.py's headlines)."""
    ranked = sorted((h for h in headlines if h.get("delta_percent") is not None and h.get("ref") and h.get("other")),
                    key=effect_size, reverse=True)
    chosen, studies = [], set()
    for h in ranked:
        if h["study"] not in studies and len(chosen) < n:
            chosen.append(h)
            studies.add(h["study"])
    return chosen


def difference(h: dict) -> str:
    """'<b>Vector search</b> — queries/s, local vs hdd-emulated: up to 159× as high.'"""
    title = re.sub(r"\s*[:(].*$", "", str(h.get("study_title", "")))
    text = re.sub(r"\s*\([^()]*\)", "", str(h["text"]))
    return (f"<b>{html.escape(title)}</b> — {html.escape(str(h['label']))}, {html.escape(str(h['ref']))} vs "
            f"{html.escape(str(h['other']))}: {html.escape(text)}.")


def block(found: list[str]) -> str:
    """The findings' HTML block for page 1 ('' when there is none)."""
    if not found:
        return ""
    return ('<p class="quotes-head">Findings to quote (each study\'s chapter gives its basis)</p>'
            '<ul class="quotes">' + "".join(f'<li class="quote">{x}</li>' for x in found) + "</ul>")
