"""The run table as studies read it: the runs that measured, and metrics.json's common part."""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..report.headlines import as_metrics


def ok_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs that measured (status ok). A table without a status column (schema 1, from a study
    that never failed a run) is all ok."""
    if "status" not in frame:
        return frame
    return frame[frame.status.fillna("ok") == "ok"]


def metrics(frame: pd.DataFrame, target_names: list[str], headlines: Callable[[pd.DataFrame, list[str]], list[dict]],
            per_target: Callable[[pd.DataFrame], dict] | None = None, by: str | list[str] = "target") -> dict:
    """metrics.json (`dvc metrics show`): runs, failed runs, one entry per group of the ok runs
    (`by`, default the target; a list nests: {workload: {target: ...}}) and the headlines."""
    out: dict = {"runs": int(len(frame)),
                 "failed_runs": int(len(frame) - len(ok_runs(frame)))}
    ok = ok_runs(frame)
    if per_target is not None and len(ok):
        for key, g in ok.groupby(by):
            keys = list(key) if isinstance(key, tuple) else [key]
            node = out
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = per_target(g)
    out["headlines"] = as_metrics(headlines(frame, target_names))
    return out
