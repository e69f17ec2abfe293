"""What the emulate sweep runs: a fixed list of accelerator counts, or a search per workload and target.

Fixed list (`emulate.accelerators: [1, 2, 3, 4]`): (workload, N) x repeats, every target at each.
Search (`emulate.accelerators: auto`, search.py): one Search per workload and target, handed to the
engine as an adaptive plan (core/plans.py): the next run depends on the last rows. Workloads run one
after the other as with a list; inside a workload the targets' searches take turns run by run (targets
interleaved, as a list interleaves them), and a target whose search has finished drops out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.sweep import Point
from .params import EmulateParams
from .search import Probe, Search


@dataclass(frozen=True)
class EmulateConfig:
    """One point of the sweep: a workload at an accelerator count (and, in a search, which probe)."""
    workload: str
    accelerators: int
    search_step: int | None = None          # probe index of the search (1-based); None: a fixed list
    search_phase: str = ""                  # doubling | bisect
    search_elapsed_before_s: float = 0.0    # seconds the search's runs took before this one


def fixed_plan(p: EmulateParams) -> list[Point]:
    """(workload, accelerators) x repeats in run order (targets interleave inside each)."""
    return [Point(EmulateConfig(w, n), r, f"{n} accelerator(s)")
            for w in p.workloads for n in p.accelerators for r in range(1, p.repeats + 1)]


class SearchPlan:
    """The searches of every workload and target as one adaptive plan for the engine."""
    kind = "search"

    def __init__(self, p: EmulateParams, target_names: list[str]):
        self.workloads, self.targets = list(p.workloads), list(target_names)
        self.searches = {(w, t): Search(p.spec(w).au_threshold_percent, p.repeats, p.search_budget_s, p.search_max)
                         for w in self.workloads for t in self.targets}
        self._w, self._last = 0, -1
        self._out: dict[tuple[str, str], Probe] = {}

    def _target(self, w: str) -> str | None:
        """The next target whose search of `w` goes on, after the last one that ran (round robin)."""
        k = len(self.targets)
        for i in range(1, k + 1):
            j = (self._last + i) % k
            if not self.searches[(w, self.targets[j])].done:
                self._last = j
                return self.targets[j]
        return None

    def next(self):
        while self._w < len(self.workloads):
            w = self.workloads[self._w]
            t = self._target(w)
            if t is None:
                self._w, self._last = self._w + 1, -1
                continue
            s = self.searches[(w, t)]
            probe = s.next()
            self._out[(w, t)] = probe
            cfg = EmulateConfig(w, probe.n, probe.step, probe.phase, s.elapsed_s)
            return Point(cfg, probe.repeat, f"{probe.n} accelerator(s), search step {probe.step} ({probe.phase})",
                         targets=(t,)), t
        return None

    def done(self, point: Point, target: str, row: dict) -> None:
        """The run's row decides: its AU, what limited it, and its seconds (row's search_elapsed_s)."""
        cfg: EmulateConfig = point.config
        key = (cfg.workload, target)
        seconds = float(row["search_elapsed_s"]) - cfg.search_elapsed_before_s
        self.searches[key].record(self._out.pop(key), float(row["au_percent"]), str(row.get("limited_by", "")),
                                  seconds)

    def runs_left(self) -> int:
        return sum(s.runs_left() for (w, _), s in self.searches.items() if w in self.workloads[self._w:])

    def outcomes(self) -> dict[tuple[str, str], object]:
        """(workload, target) -> search.Outcome of every finished search."""
        return {k: s.outcome() for k, s in self.searches.items() if s.done}
