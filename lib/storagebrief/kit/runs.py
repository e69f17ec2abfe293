"""The run table as studies read it: the runs that measured, and metrics.json's common part; for a brief
section, what failed and which side files are missing."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from ..report.headlines import as_metrics
from ..report.words import plural


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


def at_point(frame: pd.DataFrame | None, target: str, point, keys: list[str], column: str) -> list[float]:
    """`column` of every measured repeat on `target` whose `keys` equal `point`'s (a row of points.csv: its
    figure is their median or mean), for the range page 1 shows; [] without runs."""
    if frame is None or not len(frame):
        return []
    ok = ok_runs(frame)
    same = ok.target == target
    for k in keys:             # a points.csv value read back may be 50.0 where runs.csv has 50, or text
        same &= (ok[k] == point[k]) | (ok[k].astype(str) == str(point[k]))
    return list(ok[same][column])


def failed_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs that did not measure (status other than ok)."""
    if "status" not in frame:
        return frame.iloc[0:0]
    return frame[frame.status.fillna("ok") != "ok"]


def what_failed(frame: pd.DataFrame, study_dir: Path, side_files: dict[str, str], group: str = "sweep") -> list[str]:
    """Markdown paragraphs a section opens with: how many runs failed of how many and why (grouped by `group`
    when the table has it, then the reason), and each side file of `side_files` (name -> what it holds) that is
    not in the result folder, so nothing absent reads as "none measured"."""
    bad, lines, out = failed_runs(frame), [], []
    if len(bad):
        reasons = bad.get("failure_reason", pd.Series("", index=bad.index)).fillna("").astype(str)
        where = bad.get(group, pd.Series("run", index=bad.index)).fillna("run").astype(str)
        for (kind, why), g in bad.groupby([where, reasons], sort=False):
            lines.append(f"- {plural(len(g), f'{kind} run')} on {', '.join(sorted(set(g.target.astype(str))))}: "
                         f"{why or 'no reason recorded'}")
        out.append(f"**What failed.** {len(bad)} of {plural(len(frame), 'run')} failed; their figures are left out of every "
                   "table below:\n\n" + "\n".join(lines))
    missing = [f"- missing: {name} ({what} left out)" for name, what in side_files.items()
               if not (Path(study_dir) / name).is_file()]
    if missing:
        out.append("**Files missing from the result folder:**\n\n" + "\n".join(missing))
    return out


def open_section(study_dir: Path, frame: pd.DataFrame, side_files: dict[str, str], nothing: str):
    """A points-based brief section's opening: the style, what failed or is missing (what_failed), then
    (study.json, points.csv); None when there are no points (`nothing` said when points.csv is there but empty)."""
    from ..report.display import show_md, style
    from .files import read_csv_or_none, read_json_or
    style()
    study_dir = Path(study_dir)
    for text in what_failed(frame, study_dir, side_files):
        show_md(text)
    study = read_json_or(study_dir / "study.json", {})
    pts = read_csv_or_none(study_dir / "points.csv")
    if pts is None or pts.empty:
        if (study_dir / "points.csv").is_file():
            show_md(nothing)
        return None
    return study, pts
