"""The suite's time budget (issue 56): no test takes over BUDGET_S of set-up, call and tear-down unless it is
listed in OVER_BUDGET with why and what it measured (seconds, under `make test`'s two workers). A fixture many
tests share (tests/suite.py's `shared_setup`) is a line of its own, `fixture <name>`. Keep the list short: a
test that lands here should first be made cheaper. tests/suite.py also orders the work by these seconds."""
from __future__ import annotations

import os

# STORAGEBRIEF_TEST_BUDGET_S: another budget for this run (the suite's own test of the check sets a tiny one)
BUDGET_S = float(os.environ.get("STORAGEBRIEF_TEST_BUDGET_S", "30"))

# nodeid, or "file::test" for every parametrization of a test -> (measured seconds, why it needs them)
OVER_BUDGET: dict[str, tuple[float, str]] = {
}


def _entry(nodeid: str):
    if nodeid in OVER_BUDGET:
        return OVER_BUDGET[nodeid]
    return OVER_BUDGET.get(nodeid.split("[", 1)[0])


def seconds(nodeid: str) -> float | None:
    """The listed seconds of a test (or shared fixture), or None when it is not listed."""
    entry = _entry(nodeid)
    return entry[0] if entry else None


def over(durations: dict[str, float]) -> list[tuple[str, float]]:
    """(nodeid, seconds) of every test or shared fixture over the budget and not listed, slowest first."""
    return sorted(((n, s) for n, s in durations.items() if s > BUDGET_S and _entry(n) is None),
                  key=lambda ns: -ns[1])
