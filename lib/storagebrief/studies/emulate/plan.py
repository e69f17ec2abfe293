"""What the emulate sweep runs: a fixed list of accelerator counts, or a search per workload and target.

Fixed list (`emulate.accelerators: [1, 2, 3, 4]`): (workload, N) x repeats, every target at each.
Search (`emulate.accelerators: auto`, search.py): one Search per workload and target, handed to the
engine as an adaptive plan (core/plans.py): the next run depends on the last rows. Workloads run one
after the other as with a list; inside a workload the targets' searches take turns run by run (targets
interleaved, as a list interleaves them), and a target whose search has finished drops out.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ...core import plans, reruns
from ...core.sweep import Point
from ...kit import client_check
from .limits import CHECK, checks, judge, measured  # noqa: F401  (re-exported: the rows every reader filters)
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
    cpus_confined: int = 0                  # client check: the emulator held to this many CPUs (0: all)


def fixed_plan(p: EmulateParams) -> list[Point]:
    """(workload, accelerators) x repeats in run order (targets interleave inside each)."""
    return [Point(EmulateConfig(w, n), r, f"{n} accelerator(s)")
            for w in p.workloads for n in p.accelerators for r in range(1, p.repeats + 1)]


class SearchPlan:
    """The searches of every workload and target as one adaptive plan for the engine."""
    kind = "search"

    def __init__(self, p: EmulateParams, targets: list, rerun_disturbed: int = 0):
        self.workloads, self.targets = list(p.workloads), [getattr(t, "name", t) for t in targets]
        warmup = 1 if p.mlperf_rules else 0       # the rules' warm-up run is not judged
        self.searches = {(w, getattr(t, "name", t)): self._search(p, w, t, warmup, rerun_disturbed)
                         for w in self.workloads for t in targets}
        self._w, self._last = 0, -1
        self._out: dict[tuple[str, str], Probe] = {}

    @staticmethod
    def _search(p: EmulateParams, w: str, t, warmup: int, reruns: int) -> Search:
        cap, cap_by = p.search_cap(w, t)
        return Search(p.spec(w).au_threshold_percent, p.repeats, p.budget_s(t), cap, warmup=warmup, cap_by=cap_by,
                      reruns=reruns)

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
                         targets=(t,), rerun=probe.rerun), t
        return None

    def done(self, point: Point, target: str, row: dict) -> None:
        """The run's row decides: its AU, what limited it, its seconds (row's search_elapsed_s) and whether it was
        disturbed (re-run, not judged, while the search allows: search.py)."""
        cfg: EmulateConfig = point.config
        key = (cfg.workload, target)
        seconds = float(row["search_elapsed_s"]) - cfg.search_elapsed_before_s
        self.searches[key].record(self._out.pop(key), float(row["au_percent"]), str(row.get("limited_by", "")),
                                  seconds, disturbed=reruns.is_disturbed(row))

    def runs_left(self) -> int:
        return sum(s.runs_left() for (w, _), s in self.searches.items() if w in self.workloads[self._w:])

    def outcomes(self) -> dict[tuple[str, str], object]:
        """(workload, target) -> search.Outcome of every finished search."""
        return {k: s.outcome() for k, s in self.searches.items() if s.done}


# --------------------------------------------------------------------------- client check
def headline_n(g, threshold: float) -> int:
    """The point the answer rests on: the largest passing N below the first failing one; when none passed,
    the smallest N tried."""
    verdicts = {int(n): judge(x.au_percent, x.limited_by, threshold) for n, x in g.groupby("accelerators")}
    fails = [n for n in sorted(verdicts) if verdicts[n] != "pass"]
    ok = [n for n in verdicts if verdicts[n] == "pass" and (not fails or n < fails[0])]
    return max(ok) if ok else min(verdicts)


class ClientCheckPlan:
    """The study's plan, then per workload one point re-run with the emulator on half its CPUs
    (emulate.client_check, kit/client_check.py): the answer's point on the first target."""

    def __init__(self, inner, sweep):
        self.inner = plans.as_plan(inner, sweep.target_names, sweep.params.run.rerun_disturbed)
        self.kind, self.sweep, self.p = self.inner.kind, sweep, sweep.p
        self.todo: list | None = None

    def next(self):
        if self.todo is None:
            item = self.inner.next()
            if item is not None:
                return item
            self.todo = self._points()
        return self.todo.pop(0) if self.todo else None

    def _points(self) -> list:
        cpus = client_check.check_cpus(self.sweep.note, self.p.launcher)
        if not cpus:
            return []
        total = len(os.sched_getaffinity(0))
        frame = measured(self.sweep.frame())
        ref = self.sweep.target_names[0]
        out = []
        for w in self.p.workloads:
            g = frame[(frame.workload == w) & (frame.target == ref)] if not frame.empty else frame
            if g.empty:
                continue
            n = headline_n(g, self.p.spec(w).au_threshold_percent)
            cfg = EmulateConfig(w, n, cpus_confined=len(cpus))
            out += [(Point(cfg, r, f"{n} accelerator(s), client check on {len(cpus)} of {total} CPUs", targets=(ref,)),
                     ref) for r in range(1, self.p.client_check_repeats + 1)]
        return out

    def done(self, point, target: str, row: dict) -> None:
        if not point.config.cpus_confined:
            self.inner.done(point, target, row)

    def runs_left(self) -> int:
        if self.todo is not None:
            return len(self.todo)
        return self.inner.runs_left() + self.p.client_check_repeats * len(self.p.workloads)


def confine_client(run, config: EmulateConfig, cfg: dict, group):
    """A client-check run: its accelerators held to half the CPUs (a cgroup, else their affinity)."""
    if not config.cpus_confined:
        return None
    conf = client_check.confine_run(run, group)
    cfg["cpu_affinity"] = conf.affinity
    return conf


def check_columns(config: EmulateConfig, conf) -> dict:
    """client_check / cpus_confined / cpus_available / cpu_confinement of a run (empty on the sweep's own runs)."""
    return client_check.row_columns(CHECK if conf else None, conf)
