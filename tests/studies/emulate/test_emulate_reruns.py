"""A disturbed run in the accelerator search (issue 61): re-run, not judged, while the search's budget allows;
past that it is judged and its row stays disturbed (fake rows: the search is pure)."""
from __future__ import annotations

from storagebrief.core import config
from storagebrief.studies.emulate import plan as emulate_plan
from storagebrief.studies.emulate.search import Search
from test_emulate import SMALL, params_dict
from test_emulate_search import fake_au


def _drive(search: Search, boundary: int, disturbed) -> list[tuple]:
    """Run the search against a target passing up to `boundary`; a run `disturbed(probe)` marks reads AU 40 %
    (other work took its CPU). Returns (n, repeat, rerun, AU) of every run."""
    runs = []
    while (probe := search.next()) is not None:
        bad = disturbed(probe)
        au, by = (40.0, "storage") if bad else fake_au(boundary)(probe.n)
        search.record(probe, au, by, 1.0, disturbed=bad)
        runs.append((probe.n, probe.repeat, probe.rerun, au))
    return runs


def test_a_disturbed_run_is_re_run_and_the_search_judges_the_re_run():
    s = Search(90.0, repeats=2, budget_s=100, cap=8, reruns=1)
    runs = _drive(s, 8, lambda p: p.n == 4 and p.repeat == 2 and p.rerun == 0)
    assert runs[4:7] == [(4, 1, 0, 99.0), (4, 2, 0, 40.0), (4, 2, 1, 99.0)]
    assert (s.outcome().answer, s.outcome().limited_by, s.reran) == (8, "cap", 1)
    # without re-runs the disturbed 40 % is judged: the mean fails N = 4, a wrong boundary
    s = Search(90.0, repeats=2, budget_s=100, cap=8)
    _drive(s, 8, lambda p: p.n == 4 and p.repeat == 2)
    assert (s.outcome().answer, s.outcome().limited_by, s.reran) == (3, "storage", 0)


def test_a_disturbed_run_is_judged_once_its_re_run_or_the_budget_is_spent():
    always = Search(90.0, repeats=1, budget_s=100, cap=8, reruns=1)
    runs = _drive(always, 8, lambda p: p.n == 2)                     # its re-run is disturbed too: judged
    assert [r for r in runs if r[0] == 2] == [(2, 1, 0, 40.0), (2, 1, 1, 40.0)] and always.outcome().answer == 1
    standing = Search(90.0, repeats=2, budget_s=100, cap=8, reruns=1)
    runs = _drive(standing, 8, lambda p: p.n == 1)                   # a re-run disturbed too: the load stands,
    assert runs == [(1, 1, 0, 40.0), (1, 1, 1, 40.0), (1, 2, 0, 40.0)] and standing.reruns == 0   # no more re-runs
    tight = Search(90.0, repeats=1, budget_s=2.5, cap=8, reruns=1)   # 1 s runs: a re-run at 2 s would end at 4 s
    runs = _drive(tight, 8, lambda p: p.n == 2)
    assert runs == [(1, 1, 0, 99.0), (2, 1, 0, 40.0)] and tight.reran == 0
    assert (tight.outcome().answer, tight.outcome().limited_by) == (1, "storage")


def test_the_search_plan_re_runs_a_row_marked_disturbed(tmp_path):
    p = config.validate(params_dict(tmp_path, {**SMALL, "accelerators": "auto", "search_max": 2, "repeats": 1}))
    sp = emulate_plan.SearchPlan(p.section("emulate"), ["t"], rerun_disturbed=1)
    seen = []
    while (item := sp.next()) is not None:
        pt, t = item
        seen.append((pt.config.accelerators, pt.rerun))
        sp.done(pt, t, {"au_percent": 99.0, "limited_by": "none", "disturbed": "True" if not seen[1:] else "False",
                        "search_elapsed_s": pt.config.search_elapsed_before_s + 1.0})
    assert seen == [(1, 0), (1, 1), (2, 0)]
    assert sp.outcomes()[("unet3d", "t")].elapsed_s == 3.0          # the disturbed run's seconds count
