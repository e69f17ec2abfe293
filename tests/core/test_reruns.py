"""Disturbed runs re-run (core/reruns.py, core/plans.FixedPlan): which rows readers keep, what a plan queues."""
from __future__ import annotations

import pandas as pd

from storagebrief.core import plans, reruns
from storagebrief.core.contract import Point


def _walk(plan, disturbed):
    """Run a plan to its end; `disturbed(point, target)` marks a run's fake row. Returns (config, target, rerun)."""
    seen = []
    while (item := plan.next()) is not None:
        pt, target = item
        seen.append((pt.config, target, pt.rerun))
        plan.done(pt, target, {"disturbed": "True" if disturbed(pt, target) else "False"})
    return seen


def test_a_fixed_plan_runs_a_disturbed_point_again_next_at_most_rerun_disturbed_times():
    points = [Point(c, 1, c) for c in ("a", "b")]
    always_a_on_x = _walk(plans.FixedPlan(points, ["x", "y"], 1), lambda pt, t: pt.config == "a" and t == "x")
    assert always_a_on_x == [("a", "x", 0), ("a", "x", 1), ("a", "y", 0), ("b", "x", 0), ("b", "y", 0)]
    twice = _walk(plans.FixedPlan(points, ["x"], 2), lambda pt, t: pt.rerun == 0)      # each re-run quiet
    assert twice == [("a", "x", 0), ("a", "x", 1), ("b", "x", 0), ("b", "x", 1)]
    standing = _walk(plans.FixedPlan(points, ["x"], 2), lambda pt, t: True)           # a re-run disturbed too:
    assert standing == [("a", "x", 0), ("a", "x", 1), ("b", "x", 0)]                   # the load stands, no more
    assert _walk(plans.as_plan(points, ["x"]), lambda pt, t: True) == [("a", "x", 0), ("b", "x", 0)]   # off


def test_readers_keep_the_re_run_not_the_disturbed_run_it_replaced():
    assert [reruns.run_id("r", k) for k in (0, 1, 2)] == ["r", "r-rerun1", "r-rerun2"]
    assert [reruns.rerun_of("r", k) for k in (0, 1, 2)] == ["", "r", "r-rerun1"]
    frame = pd.DataFrame({"run_id": ["a", "a-rerun1", "a-rerun2", "b"], "rerun_of": ["", "a", "a-rerun1", None],
                          "disturbed": [True, True, "False", "True"]})
    assert list(reruns.kept(frame).run_id) == ["a-rerun2", "b"]      # b: disturbed, never re-run: kept
    assert reruns.reran(frame) == 2 and list(reruns.superseded(frame)) == [True, True, False, False]
    old = frame.drop(columns="rerun_of")                                # results from before the column
    assert reruns.kept(old) is old and reruns.reran(old) == 0
    assert [reruns.is_disturbed(r) for r in ({"disturbed": True}, {"disturbed": "False"}, {})] == [True, False, False]
