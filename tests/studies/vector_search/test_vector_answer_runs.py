"""Issue 61: the vector search's page-1 point (per target, the best QPS at recall >= the floor) runs
`answer_runs` times in all, after the sweep found it; the other points run `repeats` times."""
from __future__ import annotations

import pandas as pd
import pytest

from storagebrief.core import results
from storagebrief.studies.vector_search import brief
from storagebrief.studies.vector_search.run import Config, answer_points
from test_vector_search_run import TINY, _cli


def _row(target, data, L, qps, recall):
    return {"target": target, "status": "ok", "data": data, "search_list": L, "beam_width": 1, "threads": 1,
            "repeat": 1, "qps": qps, "recall_at_k": recall, "regime": "io-bound", "reads_agree": True,
            "limited_by": ""}


def test_each_targets_answer_point_is_its_best_qps_at_the_recall_floor():
    frame = pd.DataFrame([_row("fast", "clustered", 20, 900.0, 0.90), _row("fast", "clustered", 50, 500.0, 0.96),
                          _row("fast", "clustered", 100, 300.0, 0.99), _row("fast", "uniform", 50, 999.0, 0.99),
                          _row("slow", "clustered", 20, 9.0, 0.90), _row("slow", "clustered", 50, 5.0, 0.94)])
    got = answer_points(frame, 0.95)
    assert [(c, t) for c, _, t in got] == [(Config("clustered", 50, 1, 1), "fast")]     # slow: no point reached it
    assert got[0][1] == "clustered L50 W1 T1"
    assert answer_points(frame.iloc[:0], 0.95) == []


@pytest.mark.slow
def test_a_real_sweep_runs_the_answer_point_three_times_and_page_one_shows_its_range(tmp_path):
    out = _cli(tmp_path, {**TINY, "search_list": [10], "uniform_control": False, "answer_runs": 3, "recall_floor": 0.05,
                          "max_point_s": 0.3, "probe_s": 0.1})
    assert out.returncode == 0, out.stderr[-2000:]
    runs = results.read_runs(tmp_path / "out" / "runs.csv")
    assert sorted(runs.repeat) == [1, 2, 3] and set(runs.search_list) == {10}
    (a,) = brief.answers(tmp_path / "out", runs, ["dir"])
    assert "one run" not in a["answer"] and len(a["measures"][brief.MEASURE]) == 3, a
