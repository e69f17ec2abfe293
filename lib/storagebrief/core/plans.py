"""What the sweep engine runs next: a plan known up front, or one that depends on earlier results.

A study's `plan(sweep)` hook returns either
  a list of Points   configurations x repeats in run order; the engine runs each on every target
                     (or its `targets`), targets interleaved inside each point (FixedPlan below); or
  an adaptive plan   an object with this interface (e.g. the emulate study's search for the largest
                     accelerator count, studies/emulate/plan.py):
                       kind: str                      shown in the progress line ("search")
                       next() -> (Point, target name) | None   the next run; None: finished
                       done(point, target name, row)  the row the engine recorded for that run
                       runs_left() -> int             at most this many runs remain (progress, ETA)
A disturbed run (core/reruns.py) is run again: a fixed plan queues its point once more (Point.rerun + 1) right
after it, up to `run.rerun_disturbed` times, until a re-run is disturbed too (a standing load: re-runs stop); an
adaptive plan re-runs within its own budget.
Either way every run is a normal run of the engine (cold cache, cgroups, monitor, one row). The study's
`skip` hook is asked for fixed plans only: an adaptive plan leaves out what it does not want by itself.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import reruns
from .contract import Point


@dataclass(frozen=True)
class PlannedRun:
    """A run of a fixed plan as the engine will start it (Sweep.planned, Sweep.runs_after): for a study that
    starts work for a later run ahead of it (train_resnet50's jobs). Its config is the plan's: a study's
    configure hook, if any, settles it only when the run starts."""
    config: Any
    target: Any           # core.targets.Target
    repeat: int
    run_id: str


class FixedPlan:
    """Points known up front, each on its targets (all by default), in order."""
    kind = "plan"

    def __init__(self, points, target_names: list[str], rerun_disturbed: int = 0):
        self.todo = [(pt, n) for pt in points for n in (pt.targets or target_names) if n in target_names]
        self.i = 0
        self.rerun_disturbed = rerun_disturbed     # re-runs of a point whose run was disturbed

    def next(self):
        if self.i >= len(self.todo):
            return None
        self.i += 1
        return self.todo[self.i - 1]

    def done(self, point, target: str, row: dict) -> None:
        """A disturbed run's point runs again next (at most rerun_disturbed times); otherwise the plan stays. A re-run
        disturbed too means a standing load (core/reruns.py): no more re-runs in this plan."""
        if reruns.is_disturbed(row) and point.rerun:
            self.rerun_disturbed = 0
        if reruns.is_disturbed(row) and point.rerun < self.rerun_disturbed:
            self.todo.insert(self.i, (replace(point, rerun=point.rerun + 1), target))

    def runs_left(self) -> int:
        return len(self.todo) - self.i


def as_plan(planned: Any, target_names: list[str], rerun_disturbed: int = 0):
    """The plan hook's answer as an object the engine walks: adaptive plans as they are, lists wrapped (a
    disturbed run re-run up to rerun_disturbed times)."""
    if hasattr(planned, "next") and hasattr(planned, "done"):
        return planned
    return FixedPlan(list(planned), target_names, rerun_disturbed)


class AnswerRepeats(FixedPlan):
    """A fixed plan run once, then the points a study's page-1 answers rest on run again (issue 61: answer points
    repeated, exploratory points once): when the plan's last run is done, `answer_points()` (the study's: from
    sweep.frame()) names (config, target) pairs and each gets repeats `first` .. `runs` (targets interleaved)."""

    def __init__(self, points, target_names: list[str], rerun_disturbed: int, answer_points, first: int, runs: int):
        super().__init__(points, target_names, rerun_disturbed)
        self.answer_points, self.first, self.runs, self.added = answer_points, first, runs, None
        self.expected = len(target_names)          # answer points guessed before they are known (progress only)

    def next(self):
        if self.i >= len(self.todo) and self.added is None:
            pairs = list(self.answer_points()) if self.runs >= self.first else []
            self.added = [(Point(config, r, f"{label} (answer point, run {r} of {self.runs})", targets=(target,)),
                           target) for r in range(self.first, self.runs + 1) for config, label, target in pairs]
            self.todo.extend(self.added)
        return super().next()

    def runs_left(self) -> int:
        ahead = 0 if self.added is not None else self.expected * max(0, self.runs - self.first + 1)
        return super().runs_left() + ahead
