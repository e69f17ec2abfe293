"""One history per project (issue 61): a notebook run twice and `make study` gave vector search 175, 92.2 and 263
queries/s, each brief "(one run)", because each results folder kept its own history. Every run of a project now
lands in <project>/reports/history/answers.csv, appended by several processes at once without losing a row; a
history file that is a symlink or not ours is refused in one line; the per-folder files of before are still read."""
from __future__ import annotations

import json
import multiprocessing
import os

import pandas as pd
import pytest

import test_history
from another_user import NOBODY, as_root
from conftest import bare_project
from storagebrief.kit import history
from storagebrief.studies.preprocess import brief as pre

MINE = {"package_git_commit": "same checkout", "git_commit": "6813f25a0b1c"}     # the project's own checkout


def _study(d, rates: list[float], **inventory):
    """A study's results folder `d` as a run leaves it, with its entry point (inventory's `entry`)."""
    return test_history._study(d.parent, rates, **{**MINE, **inventory})


def _record(d, frame) -> dict:
    """What a brief render (or a run's end) does: the study's page-1 answer, its values recorded."""
    return test_history._render(d.parent, d, frame)


def test_a_notebook_run_and_the_pipeline_land_in_one_history_and_the_notebooks_brief_shows_both(tmp_path):
    root = bare_project(tmp_path)
    _record(*_study(root / "reports" / "preprocess", [500.4, 524.8], entry="pipeline"))
    nb, frame = _study(root / "reports" / "runs" / "20261207-070000" / "preprocess", [489.0, 499.6], entry="notebook")
    a = _record(nb, frame)
    assert history.location(nb.parent) == root / "reports" / "history" / "answers.csv"
    rows = pd.read_csv(root / "reports" / "history" / "answers.csv")
    assert list(rows.columns) == history.COLUMNS and rows.run_id.nunique() == 2 and len(rows) == 4
    assert set(rows.entry) == {"pipeline", "notebook"} and set(rows.code) == {"6813f25a0b1c"}
    assert not list((root / "reports" / "runs").rglob("answers*.csv"))        # nothing kept beside the run
    assert a["short"] == "494.3 MB/s at P = 1 (489.0–524.8 over 4 runs)", a
    assert ("2 studies (1 pipeline, 1 notebook) of these parameters on this machine, 4 runs: 489.0–524.8"
            in a["answer"]), a["answer"]
    # a CLI run with --out elsewhere inside the project reads the same history
    cli, frame = _study(root / "mine" / "try1" / "preprocess", [480.0], entry="CLI")
    before = history.earlier(cli, pre.MEASURE, "local")
    assert before == [[500.4, 524.8], [489.0, 499.6]] and before.origins() == "1 pipeline, 1 notebook, 1 CLI"


def test_other_code_or_another_study_is_not_comparable(tmp_path):
    root = bare_project(tmp_path)
    _record(*_study(root / "reports" / "preprocess", [500.4, 524.8], entry="pipeline"))
    d, _ = _study(root / "reports" / "runs" / "1" / "preprocess", [1.0], git_commit="0123456789ab")
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(root / "reports" / "runs" / "2" / "preprocess", [1.0], git_commit="6813f25a0b1c-dirty")
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(root / "reports" / "runs" / "3" / "preprocess", [1.0])
    (d / "status.json").write_text(json.dumps({"study": "checkpoint"}))      # the engine's word for its study
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(root / "reports" / "runs" / "4" / "preprocess", [1.0])
    assert history.earlier(d, pre.MEASURE, "local") == [[500.4, 524.8]]


def _writer(args) -> None:
    """One process recording its studies one after another, each a brief render of its own."""
    folders, barrier = args
    barrier.wait()
    for d in folders:
        history.record(d.parent, [{"study": "preprocess", "target": "local",
                                   "measures": {pre.MEASURE: [float(d.parent.name) + 1, 7.5]}}], {"preprocess": d})


def test_two_processes_appending_at_once_lose_no_row(tmp_path):
    root = bare_project(tmp_path)
    sides = [[_study(root / "reports" / "runs" / str(side * 100 + i) / "preprocess", [float(side * 100 + i)])[0]
              for i in range(40)] for side in (0, 1)]
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=((folders, barrier),)) for folders in sides]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = pd.read_csv(history.location(root / "reports"))
    assert len(rows) == 160 and rows.run_id.nunique() == 80, len(rows)      # two values of each of 80 studies
    assert (history.location(root / "reports").read_text().count("recorded_utc")) == 1     # one header


def test_a_symlinked_group_writable_or_foreign_history_file_is_refused_in_one_line(tmp_path):
    root = bare_project(tmp_path)
    d, frame = _study(root / "reports" / "preprocess", [500.4, 524.8])
    path = history.location(root / "reports")
    path.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("keep\n")
    path.symlink_to(elsewhere)
    with pytest.raises(history.UnsafeHistory) as err:
        _record(d, frame)
    assert "\n" not in str(err.value) and f"{path} is a symlink" in str(err.value)
    assert elsewhere.read_text() == "keep\n" and history.earlier(d, pre.MEASURE, "local") == []
    path.unlink()
    path.write_text(",".join(history.COLUMNS) + "\n")
    path.chmod(0o664)
    with pytest.raises(history.UnsafeHistory, match="is writable by its group"):
        _record(d, frame)
    path.chmod(0o644)
    os.rename(path.parent, tmp_path / "moved")
    path.parent.symlink_to(tmp_path / "moved")
    with pytest.raises(history.UnsafeHistory, match=f"{path.parent} is a symlink"):
        _record(d, frame)


@as_root
def test_a_history_file_of_another_user_is_refused(tmp_path):
    root = bare_project(tmp_path)
    d, frame = _study(root / "reports" / "preprocess", [500.4, 524.8])
    _record(*_study(root / "reports" / "runs" / "1" / "preprocess", [300.0]))
    path = history.location(root / "reports")
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(history.UnsafeHistory) as err:
        _record(d, frame)
    assert "\n" not in str(err.value) and f"belongs to uid {NOBODY}" in str(err.value)
    assert history.earlier(d, pre.MEASURE, "local") == []          # nothing read from it either


def test_an_old_per_folder_history_is_still_read_and_never_written(tmp_path):
    """Before issue 61 each brief kept <reports>/answers-history.csv: a study there still counts its earlier
    studies (as "other": their entry point was not recorded), matched by what those files recorded."""
    root = bare_project(tmp_path)
    reports = root / "reports" / "runs" / "20261201-000000"
    old = "\n".join([",".join(history.LEGACY_COLUMNS),
                     "2026-12-01T00:00:00Z,preprocess,aaaaaaaaaaaa,abc123,same checkout,vm|AMD EPYC|2|1|6.1,"
                     f"{pre.MEASURE},local,510.0",
                     "2026-12-01T00:00:00Z,preprocess,aaaaaaaaaaaa,abc123,same checkout,vm|AMD EPYC|2|1|6.1,"
                     f"{pre.MEASURE},local,530.0", ""])
    reports.mkdir(parents=True)
    (reports / history.LEGACY).write_text(old)
    d, frame = _study(reports / "preprocess", [489.0, 499.6], entry="notebook")
    a = _record(d, frame)
    assert a["short"] == "494.3 MB/s at P = 1 (489.0–530.0 over 4 runs)", a
    assert "2 studies (1 notebook, 1 other)" in a["answer"], a["answer"]
    assert (reports / history.LEGACY).read_text() == old                  # read, never written
    assert len(pd.read_csv(history.location(reports))) == 2              # this study's rows went to the project's
