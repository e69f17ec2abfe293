"""Disturbed runs re-run (issue 61): a run that other work disturbed (core/interference.py) is run again.

The engine (core/sweep.py) re-runs a point whose run came back `disturbed` at most `run.rerun_disturbed` times
(params.yaml: 1; a params file without it: 0): a fixed plan (core/plans.FixedPlan) queues the same point again right after it; an adaptive plan
decides for itself (the emulate search re-runs a probe's disturbed run only while its budget allows, and judges
the re-run instead: studies/emulate/search.py). The re-run's id is the first's with `-rerunK` and its row names
the run it replaces in `rerun_of`; both rows stay in runs.csv. A re-run disturbed too means the load stands (on
a 2-core VM beside a test suite every run was disturbed, and re-running each doubled a stage for nothing): that
plan re-runs nothing more, and its disturbed rows say so on page 1. Readers take `kept(frame)`: every row but the
ones a later row re-ran (`superseded`). A re-run that is disturbed too, or a disturbed run whose budget was spent,
is kept and stays `disturbed`: the brief says that the answer rests on it (brief/quiet.py), never silently.
"""
from __future__ import annotations

RERUN_OF = "rerun_of"
SUFFIX = "-rerun"


def is_disturbed(row) -> bool:
    """A row's `disturbed`, as written (True, numpy's True_) or read back from runs.csv ('True')."""
    value = row.get("disturbed") if hasattr(row, "get") else None
    return value is not None and str(value).strip().lower() in ("true", "1", "1.0")


def run_id(base: str, rerun: int) -> str:
    """The id of re-run `rerun` (0: the first run) of the run whose id is `base`."""
    return f"{base}{SUFFIX}{rerun}" if rerun else base


def rerun_of(base: str, rerun: int) -> str:
    """The id of the run that re-run `rerun` replaces ('' for a first run)."""
    return run_id(base, rerun - 1) if rerun else ""


def superseded(frame):
    """Bool Series: rows a later row re-ran (their id is some row's `rerun_of`); all False for tables without it."""
    import pandas as pd

    if frame is None or RERUN_OF not in frame or "run_id" not in frame:
        return pd.Series(False, index=getattr(frame, "index", None), dtype=bool)
    replaced = {str(x) for x in frame[RERUN_OF].dropna() if str(x).strip()}
    return frame["run_id"].astype(str).isin(replaced)


def kept(frame):
    """The rows a reader judges: every row but the disturbed ones that were re-run."""
    if frame is None or RERUN_OF not in frame:
        return frame
    drop = superseded(frame)
    return frame[~drop].reset_index(drop=True) if drop.any() else frame


def reran(frame) -> int:
    """How many rows of `frame` are re-runs of a disturbed run."""
    if frame is None or RERUN_OF not in frame:
        return 0
    return int(frame[RERUN_OF].fillna("").astype(str).str.strip().ne("").sum())
