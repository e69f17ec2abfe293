"""How quiet the machine was (issue 61): a page-1 cell resting on a disturbed run says so, and each chapter says
how much other work shared the machine. From runs.csv's interference columns (core/interference.py: `disturbed`,
`disturbed_reason`, `other_cpu_cores_avg`); results from before them say nothing."""
from __future__ import annotations

import pandas as pd

from ..core import reruns

DISTURBED = "disturbed"


def _ok(frame: pd.DataFrame | None) -> pd.DataFrame:
    frame = reruns.kept(frame)       # a disturbed run re-run is not what the answer rests on
    if frame is None or "disturbed" not in frame:
        return pd.DataFrame()
    return frame[frame["status"].astype(str) == "ok"] if "status" in frame else frame


def _flags(rows: pd.DataFrame) -> pd.Series:
    return rows["disturbed"].astype(str).str.strip().str.lower().isin(("true", "1", "1.0"))


NOTE = (f"{DISTURBED}: this answer rests on runs that ran beside other work and were not re-run quietly (its chapter "
        "says how many, and how much)")


def cell_note(frame: pd.DataFrame | None, target: str) -> str:
    """The footnote of a page-1 cell whose study's runs on `target` include disturbed ones (one text for every
    such cell: one footnote on page 1, the counts in the chapter's sentence), else ''."""
    rows = _ok(frame)
    if rows.empty or "target" not in rows:
        return ""
    mine = rows[rows["target"].astype(str) == str(target)]
    return NOTE if not mine.empty and _flags(mine).any() else ""


def sentence(frame: pd.DataFrame | None) -> str:
    """One sentence for a chapter: how much other work shared the machine and how many runs it disturbed; '' for
    results without the columns."""
    rows = _ok(frame)
    if rows.empty:
        return ""
    other = pd.to_numeric(rows.get("other_cpu_cores_avg"), errors="coerce").dropna() \
        if "other_cpu_cores_avg" in rows else pd.Series(dtype=float)
    cpu = (f"other work used {_cores(other.mean())} on average (at most {_cores(other.max())} in one run)"
           if len(other) else "other work's CPU was not measured")
    flags, again = _flags(rows), reruns.reran(rows)
    redone = (f"; {again} disturbed run{'s' if again > 1 else ''} re-run, the re-run{'s' if again > 1 else ''} "
              "counted instead") if again else ""
    if not flags.any():
        return f"How quiet the machine was: {cpu}{redone}; no run counted was disturbed." if again else \
            f"How quiet the machine was: {cpu}; no run disturbed."
    by_target = rows[flags].groupby(rows["target"].astype(str)).size()
    where = ", ".join(f"{t}: {n}" for t, n in by_target.items())
    first = str(rows[flags]["disturbed_reason"].iloc[0]) if "disturbed_reason" in rows else ""
    return (f"How quiet the machine was: {cpu}{redone}; {int(flags.sum())} of {len(rows)} runs disturbed ({where})"
            + (f", e.g. {first}" if first and first != "nan" else "") + ".")


def _cores(x: float) -> str:
    """'3 % of a core' under one core, '1.70 cores' from one up."""
    return f"{x * 100:.0f} % of a core" if x < 1 else f"{x:.2f} cores"
