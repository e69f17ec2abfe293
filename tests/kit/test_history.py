"""Earlier studies of the same parameters on this machine (issue 48): two quick studies 23 minutes apart gave
ingest 512.6 MB/s (500.4–524.8) and 494.3 (489.0–499.6), neither range holding the other. A brief records the
values behind its page-1 answers; a later study's brief shows the range over both."""
from __future__ import annotations

import json

import pandas as pd

from storagebrief.kit import history
from storagebrief.report.words import spread, spread_cell
from storagebrief.studies.preprocess import brief as pre

INVENTORY = {"params_hash": "abc123", "package_git_commit": "6813f25", "hostname": "vm", "cpu_model": "AMD EPYC", "cpu_threads": 2,
             "memory_total_bytes": 1, "kernel": "6.1"}


def _study(reports, rates: list[float], **inventory) -> tuple:
    """reports/preprocess as one study leaves it: runs.csv (ingest at P = 1) and inventory.json."""
    d = reports / "preprocess"
    d.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{"target": "local", "sweep": "processes", "processes": 1, "repeat": i + 1,
                           "input_mb_per_s": v, "status": "ok"} for i, v in enumerate(rates)])
    frame.to_csv(d / "runs.csv", index=False)
    (d / "inventory.json").write_text(json.dumps({**INVENTORY, **inventory}))
    return d, frame


def _render(reports, d, frame) -> dict:
    """What a brief render does for this study: its page-1 answer, then the answer's values recorded."""
    (a,) = pre.answers(d, frame, ["local"])
    history.record(reports, [{**a, "study": "preprocess"}], {"preprocess": d})
    return a


def test_a_second_study_of_the_same_parameters_shows_the_range_over_both(tmp_path):
    reports = tmp_path / "reports"
    first = _render(reports, *_study(reports, [500.4, 524.8]))
    assert first["short"] == "512.6 MB/s at P = 1 (500.4–524.8 over 2 runs)", first        # nothing earlier yet
    second = _render(reports, *_study(reports, [489.0, 499.6]))
    assert second["short"] == "494.3 MB/s at P = 1 (489.0–524.8 over 4 runs)", second
    assert ("(2 runs 489.0–499.6; 2 studies (2 other) of these parameters on this machine, 4 runs: 489.0–524.8)"
            in second["answer"]), second["answer"]
    rows = pd.read_csv(history.location(reports))
    assert list(rows.columns) == history.COLUMNS and len(rows) == 4 and rows.run_id.nunique() == 2


def test_a_rerender_adds_nothing_and_its_own_runs_are_not_earlier(tmp_path):
    reports = tmp_path / "reports"
    d, frame = _study(reports, [500.4, 524.8])
    _render(reports, d, frame)
    assert history.record(reports, [{**pre.answers(d, frame, ["local"])[0], "study": "preprocess"}],
                          {"preprocess": d}) == 0
    assert history.earlier(d, pre.MEASURE, "local") == []
    assert pre.answers(d, frame, ["local"])[0]["short"].endswith("(500.4–524.8 over 2 runs)")


def test_other_parameters_other_code_another_machine_or_another_target_are_not_earlier_studies(tmp_path):
    reports = tmp_path / "reports"
    _render(reports, *_study(reports, [500.4, 524.8]))
    d, _ = _study(reports, [300.0, 310.0], params_hash="other1")
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(reports, [300.0, 310.0], package_git_commit="0123abc")
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(reports, [300.0, 310.0], hostname="another-vm")
    assert history.earlier(d, pre.MEASURE, "local") == []
    d, _ = _study(reports, [300.0, 310.0])
    assert history.earlier(d, pre.MEASURE, "hdd-emulated") == []
    assert history.earlier(d, pre.MEASURE, "local") == [[500.4, 524.8]]


def test_no_results_folder_or_a_foreign_history_file_gives_no_earlier_study(tmp_path):
    assert history.earlier(None, pre.MEASURE, "local") == [] and history.identity(tmp_path) is None
    reports = tmp_path / "reports"
    d, _ = _study(reports, [1.0, 2.0])
    history.location(reports).parent.mkdir(parents=True)
    history.location(reports).write_text("a,b\n1,2\n")
    assert history.earlier(d, pre.MEASURE, "local") == []


def test_the_words_of_a_range_over_several_studies():
    assert spread([3.0], earlier=[[2.0, 4.0]]) == ("one run: no range; 2 studies of these parameters on this machine, "
                                                   "3 runs: 2.0–4.0")
    before = history.Earlier([[2.0, 4.0], [5.0]], ["notebook", "pipeline"], "notebook")
    assert spread([3.0, 3.5], earlier=before) == ("2 runs 3.0–3.5; 3 studies (1 pipeline, 2 notebook) of these "
                                                  "parameters on this machine, 5 runs: 2.0–5.0")
    assert spread_cell([3.0], earlier=[[2.0], [5.0]]) == "2.0–5.0 over 3 runs"
    assert spread_cell([3.0, 3.5], earlier=[]) == "3.0–3.5 over 2 runs" and spread_cell([], earlier=[[1.0, 2.0]]) == "one run"


def test_page_one_says_once_how_many_studies_its_ranges_hold(tmp_path):
    """The cells keep the range alone (page 1 spilled onto a second page with "over 2 studies" in eight cells);
    one line under the table says how many studies the ranges hold, and only when some hold more than this one."""
    from storagebrief.brief import scorecard
    reports = tmp_path / "reports"
    first = _render(reports, *_study(reports, [500.4, 524.8]))
    d, frame = _study(reports, [489.0, 499.6])
    second = pre.answers(d, frame, ["local"])[0]
    assert "2 studies" not in scorecard.table_html([{**first, "studies": 1}], ["local"])
    page = scorecard.table_html([{**second, "studies": 1 + len(history.earlier(d, pre.MEASURE, "local"))}], ["local"])
    assert "489.0–524.8" in page and "A range holds every run of its answer in 2 studies of these parameters" in page
