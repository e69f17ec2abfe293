"""Answer points repeated, exploratory points once (issue 61, core/plans.AnswerRepeats): a fixed plan runs once,
then the points a study's page-1 answers rest on run again up to the stated runs."""
from __future__ import annotations

from storagebrief.core import plans
from storagebrief.core.contract import Point


def _walk(plan):
    seen = []
    while (item := plan.next()) is not None:
        pt, target = item
        seen.append((pt.config, target, pt.repeat))
        plan.done(pt, target, {"disturbed": "False"})
    return seen


def test_the_answer_points_known_after_the_sweep_run_again_up_to_the_stated_runs():
    asked = []

    def answers():                      # what the study reads from the rows once the sweep is done
        asked.append(True)
        return [("b", "config b", "x"), ("a", "config a", "y")]

    plan = plans.AnswerRepeats([Point(c, 1, c) for c in ("a", "b")], ["x", "y"], 0, answers, 2, 3)
    assert plan.runs_left() == 4 + 2 * 2                       # before the answers are known: one per target
    assert _walk(plan) == [("a", "x", 1), ("a", "y", 1), ("b", "x", 1), ("b", "y", 1),
                           ("b", "x", 2), ("a", "y", 2), ("b", "x", 3), ("a", "y", 3)]
    assert asked == [True] and plan.runs_left() == 0           # asked once, after the last sweep run


def test_no_answer_runs_beyond_the_sweeps_own_repeats():
    plan = plans.AnswerRepeats([Point("a", 1, "a")], ["x"], 0, lambda: [("a", "a", "x")], 2, 1)
    assert _walk(plan) == [("a", "x", 1)]
    none_found = plans.AnswerRepeats([Point("a", 1, "a")], ["x"], 0, lambda: [], 2, 3)
    assert _walk(none_found) == [("a", "x", 1)]
