"""Accelerators supported, searched (`emulate.accelerators: auto`): the next N depends on the last result.

Per workload and target, one Search:
  doubling   N = 1, 2, 4, 8, ... while the probe passes (mean AU >= the workload's threshold),
             capped at `search_max` (the cap itself is probed when the next doubling would pass it);
  bisect     between the largest passing N (lo) and the first storage-limited failing N (hi)
             until hi = lo + 1: the answer is lo, storage-limited.
It stops early when
  client     a probe fails and the client limited it (limits.judge: the majority of its repeats
             client-limited, a tie counts as client): "client-limited at N", as with a fixed list;
  scale      a probe passes but its AU was no measurement (window.py: too few steps in its window, or the
             loaders did not read what AU claims; at least half its repeats): "not answered at this
             scale" — more accelerators only shorten the window (the data set is split among them);
  budget     the next probe would not finish within `search_budget_s` (the seconds this search's
             own runs took, counted from the rows' `search_elapsed_s`; a new probe starts only when
             the time so far plus `repeats` x the longest run of the largest count probed below it
             fits — a run's time falls with N while compute-bound, as the dataset is split among
             more accelerators, and stays about data ÷ bandwidth once storage-bound): "≥ lo";
  cap        N = search_max passed: "≥ search_max";
  memory     on a directory target under the page-cache cap, the most accelerators whose reads fit it
             (memory.py) passed: "≥ N (page-cache cap)" — more would measure the cap's thrash.
Repeats: every probed N runs `repeats` times (targets interleaved run by run) and is judged on
the mean AU of its repeats, the rule a fixed list's "accelerators supported" uses (limits.judge),
so a probe near the threshold is not steered by one run's spread. A probe, once started, always
runs all its repeats: the budget can be overrun by a wrong guess of the probe's time, never by
half a probe.
Disturbed runs (core/reruns.py): a run that other work disturbed is not judged while a re-run is possible
(`reruns` per run, `run.rerun_disturbed`, and the budget holds one more run as long as it): the same repeat
runs again and the re-run is judged instead; a re-run disturbed too stops re-runs in this search (the load
stands). Past that the disturbed run is judged and its row stays
`disturbed`, so the answer says it rests on it (brief/quiet.py).

Pure logic (no I/O): run.py drives it through the sweep engine's adaptive plan (plan.py) and
limits.supported() derives the same answer from runs.csv alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .limits import judge, outcome_text

DOUBLING, BISECT = "doubling", "bisect"
STOPS = ("storage", "client", "scale", "budget", "cap", "memory")     # why a search ends (its `limited_by`)


@dataclass(frozen=True)
class Probe:
    """One run of a search: accelerator count, probe index (1-based), phase, repeat (1-based)."""
    n: int
    step: int
    phase: str
    repeat: int
    rerun: int = 0      # k: the k-th re-run of this repeat (its earlier run was disturbed)


@dataclass(frozen=True)
class Outcome:
    """A finished search: the answer (a floor when stopped by budget or cap; None when client-limited or not
    answered at this scale)."""
    answer: int | None
    limited_by: str             # storage | client | scale | budget | cap | memory
    first_fail: int | None      # smallest failing (or unmeasured) N probed (None: none failed)
    elapsed_s: float
    budget_s: float
    probes: tuple[int, ...]     # the accelerator counts probed, in order
    passed: int = 0             # the largest passing N

    @property
    def text(self) -> str:
        return outcome_text(self.answer, self.limited_by, self.first_fail, self.elapsed_s, passed=self.passed)


@dataclass
class Search:
    """The search of one workload on one target; call next(), run it, record() its result, repeat."""
    threshold: float
    repeats: int
    budget_s: float
    cap: int
    warmup: int = 0                      # the first runs of each probe that are not judged (MLPerf's warm-up)
    cap_by: str = "cap"                  # what sets `cap`: search_max (cap) or the page-cache cap (memory)
    reruns: int = 0                      # re-runs of a disturbed run (within the budget), per run
    lo: int = 0                          # largest passing N
    hi: int | None = None                # smallest failing N (storage)
    elapsed_s: float = 0.0
    run_s: dict[int, float] = field(default_factory=dict)      # N -> its longest run (seconds)
    stop: str | None = None
    client_at: int | None = None
    probes: list[int] = field(default_factory=list)
    _phase: str = DOUBLING
    _results: list[tuple[float, str]] = field(default_factory=list)   # the current probe's (AU, limited_by)
    _pending: Probe | None = None
    _rerun: Probe | None = None          # a disturbed run's re-run, next
    reran: int = 0                       # disturbed runs re-run (not judged)

    def __post_init__(self):
        if self.repeats <= self.warmup or self.cap < 1 or self.budget_s <= 0:
            raise ValueError(f"search needs repeats >= 1, cap >= 1, budget > 0 (got {self.repeats}, {self.cap}, "
                             f"{self.budget_s})")
        self.probes.append(1)

    @property
    def n(self) -> int:
        return self.probes[-1]

    @property
    def done(self) -> bool:
        return self.stop is not None

    def next(self) -> Probe | None:
        """The next run (the current probe's next repeat, or the first repeat of the next probe); None: done."""
        if self._pending is not None:
            raise RuntimeError(f"search at N = {self._pending.n}: record the last run before asking for the next")
        if self.done:
            return None
        if self._rerun is not None:
            self._pending, self._rerun = self._rerun, None
            return self._pending
        self._pending = Probe(self.n, len(self.probes), self._phase, len(self._results) + 1)
        return self._pending

    def record(self, probe: Probe, au_percent: float, limited_by: str, seconds: float,
               disturbed: bool = False) -> None:
        """One run's result: its AU, what limited it (limits.limited_by), its wall seconds and whether other work
        disturbed it (then it is re-run instead of judged while `reruns` and the budget allow)."""
        if probe != self._pending:
            raise RuntimeError(f"search: recorded {probe}, expected {self._pending}")
        self._pending = None
        self.elapsed_s += seconds
        self.run_s[probe.n] = max(self.run_s.get(probe.n, 0.0), seconds)
        if disturbed and probe.rerun:
            self.reruns = 0                  # a re-run disturbed too: the load stands, re-runs stop (core/reruns.py)
        if disturbed and probe.rerun < self.reruns and self.elapsed_s + seconds <= self.budget_s:
            self._rerun, self.reran = replace(probe, rerun=probe.rerun + 1), self.reran + 1
            return
        self._results.append((au_percent, limited_by))
        if len(self._results) == self.repeats:
            self._judge()

    def _judge(self) -> None:
        aus, limits = zip(*self._results[self.warmup:])
        verdict = judge(aus, limits, self.threshold)
        self._results = []
        n = self.n
        if verdict in ("client", "unmeasured"):     # no number here, and more accelerators will not give one
            self.stop, self.client_at = ("client" if verdict == "client" else "scale"), n
            return
        if verdict == "pass":
            self.lo = n
        else:
            self.hi = n
        self._advance()

    def _advance(self) -> None:
        if self.hi is None:
            if self.lo >= self.cap:
                self.stop = self.cap_by
                return
            nxt, phase = min(2 * self.lo, self.cap), DOUBLING
        elif self.hi - self.lo <= 1:
            self.stop = "storage"
            return
        else:
            nxt, phase = (self.lo + self.hi) // 2, BISECT
        if self.elapsed_s + self.repeats * self.expected_run_s(nxt) > self.budget_s:
            self.stop = "budget"
            return
        self.probes.append(nxt)
        self._phase = phase

    def expected_run_s(self, n: int) -> float:
        """A run at N is expected to take as long as the longest run of the largest count probed below N
        (the longest run of all when none is below)."""
        below = [k for k in self.run_s if k < n]
        return self.run_s[max(below)] if below else max(self.run_s.values(), default=0.0)

    def outcome(self) -> Outcome:
        if not self.done:
            raise RuntimeError("search not finished")
        first_fail = self.client_at if self.stop in ("client", "scale") else self.hi
        return Outcome(None if self.stop in ("client", "scale") else self.lo, self.stop, first_fail, self.elapsed_s,
                       self.budget_s, tuple(self.probes), passed=self.lo)

    def runs_left(self) -> int:
        """At most this many runs remain (probes left by the doubling and bisection still possible,
        and what the budget leaves at the longest run so far)."""
        if self.done:
            return 0
        now = self.repeats - len(self._results) + (self._rerun is not None)   # the current probe's runs to come
        if self.hi is None:                                # doublings after this one, then a bisection
            probes = math.ceil(math.log2(self.cap / self.n)) + max(0, math.ceil(math.log2(self.cap)) - 1)
        else:
            probes = max(0, math.ceil(math.log2(self.hi - self.lo)) - 1)
        by_search = now + probes * self.repeats
        shortest = min(self.run_s.values(), default=0.0)
        if shortest <= 0:
            return by_search
        by_budget = now + max(0, int((self.budget_s - self.elapsed_s) // shortest))
        return min(by_search, by_budget)
