"""Issue 61: a notebook run's brief shows the range over the pipeline's runs of the same knobs, and says how many
studies it holds and where they came from. A run records its page-1 values when it ends (notebook.run_study and
the CLI call notebook.record_in_history), whether or not a brief is rendered; the brief's own record adds nothing
more for the same results."""
from __future__ import annotations

import json

import pandas as pd

from conftest import bare_project
from storagebrief.brief import scorecard
from storagebrief.brief.pageone import page_one_rows, record_history
from storagebrief.kit import history
from storagebrief.notebook import record_in_history
from test_brief_faults import preprocess_rows, write_study


def _run(reports, tmp_path, entry: str, scale: float):
    """A preprocess study's results folder as `entry` leaves it (its speeds scaled: another run of the same knobs)."""
    rows = [{**r, "input_mb_per_s": r["input_mb_per_s"] * scale} for r in preprocess_rows()]
    d = write_study(reports, "preprocess", rows, tmp_path)
    inv = json.loads((d / "inventory.json").read_text())
    (d / "inventory.json").write_text(json.dumps({**inv, "entry": entry}))
    return d


def test_a_notebook_runs_brief_shows_the_range_over_the_pipelines_runs_and_how_many(tmp_path):
    root = bare_project(tmp_path)
    pipeline = _run(root / "reports", tmp_path, "pipeline", 1.0)
    record_in_history("preprocess", pipeline)                              # the pipeline's run ended
    assert record_history(root / "reports") == 0                           # its brief: recorded already
    notebook = _run(root / "reports" / "runs" / "20261207-071500", tmp_path, "notebook", 0.9)
    said = []
    record_in_history("preprocess", notebook, said.append)
    assert said == []
    rows = pd.read_csv(root / "reports" / "history" / "answers.csv")
    assert set(rows.entry) == {"pipeline", "notebook"} and rows.run_id.nunique() == 2
    (a, *_) = [r for r in page_one_rows(notebook.parent) if r.get("measures")]
    assert a["studies"] == 2 and a["origins"] == "1 pipeline, 1 notebook", a
    assert "2 studies (1 pipeline, 1 notebook) of these parameters on this machine" in a["answer"], a["answer"]
    line = scorecard.table_html([a], ["fast", "slow"])
    assert ("A range holds every run of its answer in 2 studies (1 pipeline, 1 notebook) of these parameters on "
            f"this machine ({history.SHOWN})") in line


def test_a_run_whose_history_is_refused_says_so_in_one_line_and_stands(tmp_path):
    root = bare_project(tmp_path)
    d = _run(root / "reports", tmp_path, "CLI", 1.0)
    path = history.location(root / "reports")
    path.parent.mkdir(parents=True)
    path.symlink_to(tmp_path / "elsewhere.csv")
    said = []
    record_in_history("preprocess", d, said.append)
    assert len(said) == 1 and "\n" not in said[0] and f"{path} is a symlink" in said[0], said
    assert not (tmp_path / "elsewhere.csv").exists()


def test_a_run_outside_any_project_writes_no_history_beside_its_folder(tmp_path):
    d = _run(tmp_path / "out", tmp_path, "CLI", 1.0)
    record_in_history("preprocess", d, print)
    assert not (tmp_path / "out" / "history").exists()
