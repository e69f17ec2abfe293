"""Optional side files of a study's results: the data, or nothing when the file is absent.

A side file the brief must have goes through brief.inputs (the gate: unreadable = a stated
reason). These are for extras a section shows when they are there (a histogram table, a hosts
table): absent or empty gives `default` / None, never an exception."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def read_json_or(path: str | Path, default=None):
    """The parsed JSON at `path`, or `default` when there is no such file."""
    path = Path(path)
    if not path.is_file():
        return {} if default is None else default
    return json.loads(path.read_text())


def read_csv_or_none(path: str | Path) -> pd.DataFrame | None:
    """The CSV at `path` as a frame, or None when it is absent, empty or a header line only."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size < 2:
        return None
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return None if frame.empty else frame
