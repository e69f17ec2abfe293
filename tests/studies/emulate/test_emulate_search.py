"""accelerators: auto (issue 24): the search for the largest N as a pure unit (doubling, bisection, client,
budget, cap, repeats), the same answer from runs.csv's rows, the adaptive plan, validation, and real runs."""
from __future__ import annotations

import io
import json
import os

import pandas as pd
import pytest

from storagebrief.core import config, reruns
from storagebrief.core.progress import Progress
from storagebrief.studies.emulate import STUDY, brief, limits, plan as emulate_plan
from storagebrief.studies.emulate.search import Search
from conftest import needs_blkio
from test_emulate import SMALL, params_dict


def fake_au(boundary: int, client_at: int | None = None):
    """AU of a fake target that passes up to `boundary` accelerators (storage fails beyond it); the client
    fails from `client_at` on."""
    def au(n: int) -> tuple[float, str]:
        if client_at is not None and n >= client_at:
            return 50.0, "client"
        return (99.0, "none") if n <= boundary else (60.0, "storage")
    return au


def drive(search: Search, au, seconds=lambda n: 1.0) -> list[dict]:
    """Run a search to its end against `au`; the rows it would have written (as run.py writes them)."""
    rows = []
    while (probe := search.next()) is not None:
        a, by = au(probe.n)
        before = search.elapsed_s
        search.record(probe, a, by, seconds(probe.n))
        rows.append({"workload": "w", "target": "t", "au_threshold_percent": search.threshold,
                     "accelerators": probe.n, "repeat": probe.repeat, "au_percent": a, "limited_by": by,
                     "search_step": probe.step, "search_phase": probe.phase, "search_elapsed_s": before + seconds(probe.n),
                     "search_budget_s": search.budget_s, "search_max": search.cap})
    return rows


# --------------------------------------------------------------------------- the search, pure
@pytest.mark.parametrize("boundary", [*range(0, 20), 31, 32, 33, 47, 63, 64])
def test_doubling_then_bisection_finds_the_exact_boundary(boundary):
    s = Search(90.0, repeats=1, budget_s=1e9, cap=64)
    drive(s, fake_au(boundary))
    out = s.outcome()
    if boundary >= 64:
        assert (out.answer, out.limited_by) == (64, "cap")
    else:
        assert (out.answer, out.limited_by, out.first_fail) == (boundary, "storage", boundary + 1)
    assert len(out.probes) == len(set(out.probes))          # no count probed twice


def test_probe_order_and_phases():
    s = Search(90.0, repeats=1, budget_s=1e9, cap=64)
    rows = drive(s, fake_au(13))
    assert [(r["accelerators"], r["search_phase"]) for r in rows] == [
        (1, "doubling"), (2, "doubling"), (4, "doubling"), (8, "doubling"), (16, "doubling"),
        (12, "bisect"), (14, "bisect"), (13, "bisect")]
    assert s.outcome().text == "13 (storage-limited)"
    # the cap is probed itself when the next doubling would pass it
    s = Search(90.0, repeats=1, budget_s=1e9, cap=10)
    assert [r["accelerators"] for r in drive(s, fake_au(100))] == [1, 2, 4, 8, 10]
    assert s.outcome().text == "≥ 10 (the largest count the search may try)"


def test_client_limited_failure_stops_the_search():
    s = Search(90.0, repeats=1, budget_s=1e9, cap=64)
    rows = drive(s, fake_au(100, client_at=8))
    assert [r["accelerators"] for r in rows] == [1, 2, 4, 8]
    out = s.outcome()
    assert (out.answer, out.limited_by, out.text) == (None, "client", "client-limited at 8")
    # in the bisection too: 16 fails on storage, 12 on the client
    s = Search(90.0, repeats=1, budget_s=1e9, cap=64)
    rows = drive(s, lambda n: (99.0, "none") if n <= 8 else (50.0, "client") if n == 12 else (60.0, "storage"))
    assert [r["accelerators"] for r in rows] == [1, 2, 4, 8, 16, 12] and s.outcome().text == "client-limited at 12"


def test_budget_stops_with_a_floor_and_says_why():
    # 1 s per run, 5.5 s budget: 1, 2, 4, 8, 16 take 5 s; a sixth would end past the budget
    s = Search(90.0, repeats=1, budget_s=5.5, cap=64)
    rows = drive(s, fake_au(40))
    assert [r["accelerators"] for r in rows] == [1, 2, 4, 8, 16]
    out = s.outcome()
    assert (out.answer, out.limited_by, out.first_fail) == (16, "budget", None)
    assert out.text == "≥ 16 (search budget reached after 5 s)"
    # stopped inside the bisection: the failing count found is said too
    s = Search(90.0, repeats=1, budget_s=8.5, cap=64)
    drive(s, fake_au(40))
    assert s.outcome().text == "≥ 32 (search budget reached after 8 s; fails at 48)"
    # a probe starts only when its repeats are expected to fit: 2 repeats of 3 s, budget 10 s
    s = Search(90.0, repeats=2, budget_s=10.0, cap=64)
    rows = drive(s, fake_au(40), seconds=lambda n: 3.0)
    assert [r["accelerators"] for r in rows] == [1, 1] and s.outcome().limited_by == "budget"
    assert s.elapsed_s <= 10.0
    # the time a probe is expected to take is that of the largest count probed below it: compute-bound runs
    # get shorter as N grows (10 s / N + 1 s here), so 4 .. 16 still fit a budget that 2 x the N = 1 runs'
    # 11 s would have closed after N = 2
    s = Search(90.0, repeats=2, budget_s=50.0, cap=64)
    rows = drive(s, fake_au(40), seconds=lambda n: 10.0 / n + 1.0)
    assert [r["accelerators"] for r in rows] == [1, 1, 2, 2, 4, 4, 8, 8, 16, 16]
    assert s.outcome().text == "≥ 16 (search budget reached after 49 s)" and s.elapsed_s <= 50.0
    with pytest.raises(ValueError, match="budget > 0"):
        Search(90.0, repeats=1, budget_s=0, cap=4)


def test_each_count_runs_every_repeat_and_is_judged_on_the_mean():
    """Near the threshold one run's spread must not steer the search: N = 4's repeats straddle 90 %."""
    aus = {1: [99, 99, 99], 2: [98, 97, 99], 4: [95, 85, 92], 8: [95, 80, 88], 6: [85, 88, 91], 5: [93, 86, 88]}
    s = Search(90.0, repeats=3, budget_s=1e9, cap=64)
    seen = []
    while (probe := s.next()) is not None:
        seen.append((probe.n, probe.repeat))
        a = aus[probe.n][probe.repeat - 1]
        s.record(probe, a, "none" if a >= 90 else "storage", 1.0)
    assert seen == [(n, r) for n in (1, 2, 4, 8, 6, 5) for r in (1, 2, 3)]
    # 4: mean 90.7 passes (one run at 85); 8: 87.7, 6: 88, 5: 89 fail (one run each at or above 90)
    assert s.outcome().text == "4 (storage-limited)"
    # what limited a failing count is the majority of its repeats; a tie counts as client
    assert limits.judge([80, 80], ["client", "storage"], 90) == "client"
    assert limits.judge([80, 80, 80], ["client", "storage", "storage"], 90) == "storage"
    assert limits.judge([95, 84], ["none", "client"], 90) == "client"
    assert limits.judge([95, 86], ["none", "client"], 90) == "pass"


def test_runs_are_asked_and_recorded_in_turn_and_runs_left_is_an_upper_bound():
    s = Search(90.0, repeats=2, budget_s=1e9, cap=64)
    p = s.next()
    with pytest.raises(RuntimeError, match="record the last run"):
        s.next()
    s.record(p, 99.0, "none", 1.0)
    au = fake_au(21)
    left = [s.runs_left()]
    while (probe := s.next()) is not None:
        s.record(probe, *au(probe.n), 1.0)
        left.append(s.runs_left())
    done = len(left) - 1
    assert all(bound >= done - i for i, bound in enumerate(left)), left
    assert left[-1] == 0


@pytest.mark.parametrize("boundary, client_at, budget, cap", [
    (13, None, 1e9, 64), (0, None, 1e9, 64), (100, None, 1e9, 16), (100, 8, 1e9, 64), (40, None, 8.5, 64),
    (40, None, 5.5, 64), (2, 3, 1e9, 64)])
def test_the_rows_alone_give_the_answer_the_search_reached(boundary, client_at, budget, cap):
    s = Search(90.0, repeats=2, budget_s=budget, cap=cap)
    frame = pd.DataFrame(drive(s, fake_au(boundary, client_at)))
    out, sup = s.outcome(), limits.supported(frame).iloc[0]
    n = None if pd.isna(sup.accelerators_supported) else int(sup.accelerators_supported)
    assert (n, sup.supported_limited_by, sup.accelerators_supported_text) == (out.answer, out.limited_by, out.text)
    assert sup.search_probes == ",".join(map(str, out.probes)) and bool(sup.searched)
    # page 1 says the same
    answer = brief.answers(None, frame, ["t"])[0]
    assert answer["answer"] == out.text and f"limited by {out.limited_by}" in answer["basis"]


# --------------------------------------------------------------------------- the adaptive plan
def test_search_plan_interleaves_targets_and_drops_finished_ones(tmp_path):
    p = config.validate(params_dict(tmp_path, {**SMALL, "accelerators": "auto", "search_max": 8, "repeats": 1}))
    sp = emulate_plan.SearchPlan(p.section("emulate"), ["a", "b"])
    bounds = {"a": 1, "b": 5}
    order = []
    while (item := sp.next()) is not None:
        pt, t = item
        assert pt.targets == (t,) and "search step" in pt.label
        order.append((t, pt.config.accelerators))
        au, by = fake_au(bounds[t])(pt.config.accelerators)
        sp.done(pt, t, {"au_percent": au, "limited_by": by,
                        "search_elapsed_s": pt.config.search_elapsed_before_s + 1.0})
    assert order == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("b", 4), ("b", 8), ("b", 6), ("b", 5)]
    assert {k: o.text for k, o in sp.outcomes().items()} == {("unet3d", "a"): "1 (storage-limited)",
                                                             ("unet3d", "b"): "5 (storage-limited)"}
    assert sp.runs_left() == 0


def test_progress_line_says_it_is_a_search():
    buf = io.StringIO()
    bar = Progress(None, "emulate", mode="lines", stream=buf)
    bar.start(12, "search")
    bar.begin("local", "1 accelerator(s), search step 1 (doubling)", 1)
    bar.end(runs_left=3)
    bar.begin("local", "2 accelerator(s), search step 2 (doubling)", 1)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("[emulate] search run 1/at most 12 local: 1 accelerator(s), search step 1")
    assert lines[1].startswith("[emulate] search run 2/at most 4 ") and "ETA at most" in lines[1]


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("change, message", [
    ({"accelerators": "autoo"}, r"emulate.accelerators = \"autoo\": must be auto .* or a non-empty list"),
    ({"accelerators": []}, r"emulate.accelerators = \[\]: must be auto"),
    ({"accelerators": "auto", "search_budget_s": -5}, r"emulate.search_budget_s = -5: Input should be greater than 0"),
    ({"accelerators": "auto", "search_budget_s": 0}, r"emulate.search_budget_s = 0: Input should be greater than 0"),
    ({"accelerators": "auto", "search_max": 0}, r"emulate.search_max = 0: Input should be greater than or equal to 1"),
    ({"accelerators": "auto", "search_max": 64}, r"fewer than one batch.*or lower emulate.search_max"),
    ({"accelerators": "auto", "search_budget_s": "soon"}, r"emulate.search_budget_s = \"soon\""),
])
def test_bad_search_params_fail_before_work(tmp_path, change, message):
    with pytest.raises(config.ParamsError, match=message):
        config.validate(params_dict(tmp_path, {**SMALL, **change}))
    assert not (tmp_path / "fast").exists()


def test_fixed_list_stays_a_fixed_plan(tmp_path):
    p = config.validate(params_dict(tmp_path, {**SMALL, "accelerators": [2, 1]})).section("emulate")
    assert not p.search and p.max_accelerators == 2
    pts = emulate_plan.fixed_plan(p)
    assert [(x.config.accelerators, x.repeat, x.config.search_step) for x in pts] == [(1, 1, None), (2, 1, None)]


# --------------------------------------------------------------------------- real runs
@pytest.mark.e2e
def test_real_search_on_a_fast_target_stops_at_its_cap(tmp_path):
    """Page cache, no throttle: 1 and 2 accelerators pass, the cap (search_max 2) ends it: '≥ 2'."""
    section = {**SMALL, "accelerators": "auto", "search_max": 2, "repeats": 2}
    p = config.validate(params_dict(tmp_path, section, cold_cache=False))
    out = tmp_path / "out"
    full = STUDY.run(p, out, log=lambda *_: None, progress="off")
    frame = emulate_plan.measured(full)
    rows = frame.sort_values(["search_step", "repeat"])
    m = json.loads((out / "metrics.json").read_text())["unet3d"]["fast"]
    if list(rows.accelerators) == [1, 1] and m["supported_limited_by"] in ("client", "scale"):
        # a machine loaded by other work can starve the emulator's own client at N = 1 (the suite saw it once, 3
        # workers beside it): the search then stops there naming the client (never the page cache as storage)
        pytest.skip(f"N = 1 missed AU with the client named ({m['accelerators_supported_text']}): the cap cannot "
                    f"be judged on this loaded machine; AU {rows.au_percent.round(1).tolist()}")
    assert list(zip(rows.accelerators, rows.search_step, rows.repeat)) == [(1, 1, 1), (1, 1, 2), (2, 2, 1), (2, 2, 2)]
    at_two = rows[rows.accelerators == 2]
    if m["supported_limited_by"] != "cap" and at_two.apply(reruns.is_disturbed, axis=1).any():
        # other work took the CPUs while N = 2 ran (core/interference marks the row; CI saw it once with 3 workers):
        # AU below the threshold then says nothing about the page cache, and the study says so beside the row
        pytest.skip(f"N = 2 missed AU while disturbed ({at_two.disturbed_reason.tolist()}): the cap cannot be judged "
                    f"on this loaded machine; AU {rows.au_percent.round(1).tolist()}")
    check = emulate_plan.checks(full)      # the answer's point (N = 2) re-run on half the CPUs, after the search
    assert list(check.accelerators) == [2] and check.search_step.isna().all() and (check.cpus_confined >= 1).all()
    assert set(rows.search_phase) == {"doubling"} and rows.search_elapsed_s.is_monotonic_increasing
    assert (rows.search_budget_s == 60.0).all() and (rows.search_max == 2).all()
    # each N passed on its mean (the search's rule); a single run held to 90 % only where nothing ran beside it
    # (CI-like load once took one repeat to 87.8 % with 1.77 cores of other work: marked disturbed)
    assert (frame.groupby("accelerators").au_percent.mean() >= 90).all(), frame[["accelerators", "au_percent"]]
    quiet = frame[~frame.apply(reruns.is_disturbed, axis=1)]
    assert quiet.empty or quiet.au_percent.min() >= 90, quiet[["accelerators", "au_percent"]]
    on_disk = emulate_plan.measured(pd.read_csv(out / "runs.csv"))
    assert on_disk.search_step.tolist() == frame.search_step.tolist()
    assert (m["accelerators_supported"], m["supported_limited_by"]) == (2, "cap")
    assert m["accelerators_supported_text"] == "≥ 2 (the largest count the search may try)"
    assert m["search_probes"] == "1,2" and m["search_elapsed_s"] == pytest.approx(frame.search_elapsed_s.max())
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    assert not [n for n in notes if n.startswith("search of ")], notes    # the live search agreed with the rows
    assert brief.answers(out, frame, ["fast"])[0]["answer"] == "≥ 2 (the largest count the search may try)"
    # the client check's verdict is in metrics.json and next to the page-1 answer
    assert m["client_check"]["accelerators"] == 2 and isinstance(m["client_check"]["client_bound"], bool)
    basis = brief.answers(out, full, ["fast"])[0]["basis"]
    assert "client check at N = 2, rerun on " in basis
    assert any(w in basis for w in ("client-bound", "client-sensitive", "inconclusive"))


@pytest.mark.e2e
@pytest.mark.slow
@needs_blkio()
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (blkio throttle)")
def test_real_search_bisects_to_the_throttled_targets_boundary(tmp_path):
    """40 MB/s throttle, 16 MB/s per accelerator, O_DIRECT: 2 accelerators pass (bound 100 %), 3 do not
    (bound 83 %), 4 do not (62 %): probes 1, 2, 4, then 3 by bisection; the answer is 2, storage-limited."""
    section = {**SMALL, "accelerators": "auto", "search_max": 8, "search_budget_s": 120, "num_files": 160,
               "odirect": True, "workload_overrides": {"unet3d": {
                   "record_bytes": 262144, "record_bytes_stdev": 0, "batch_size_by_accelerator": {"v100": 2},
                   "compute_s": {"v100": 0.0328}}}}
    p = config.validate(params_dict(tmp_path, section,
                                    targets=[{"name": "slow", "path": str(tmp_path / "slow"), "profile": "cap40"}],
                                    profiles={"cap40": {"read_mb_per_s": 40}}))
    out = tmp_path / "out"
    frame = emulate_plan.measured(STUDY.run(p, out, log=lambda *_: None, progress="off"))   # the search's own rows
    steps = list(zip(frame.accelerators, frame.search_step, frame.search_phase))
    by_n = frame.set_index("accelerators")
    m = json.loads((out / "metrics.json").read_text())["unet3d"]["slow"]
    if 4 not in by_n.index:
        # the search stopped below 4 (run21, three workers beside it): only a client-limited count may stop it
        # there (40 MB/s feeds 2 accelerators at 16 MB/s); the run says so, and the boundary cannot be judged
        stop = frame[~frame.au_pass].iloc[0]
        assert stop.limited_by == "client" and m["supported_limited_by"] == "client", stop.limited_by_reason
        pytest.skip(f"N = {stop.accelerators} missed AU with the client named on this loaded machine "
                    f"({stop.limited_by_reason}); the bisection was not reached")
    assert by_n.loc[2].au_percent >= 90 > by_n.loc[4].au_percent, frame[["accelerators", "au_percent"]]
    if by_n.loc[4].limited_by == "client":
        # other work on this shared machine kept its CPU busy: the run says so, and the search stops there
        assert "machine CPU busy" in by_n.loc[4].limited_by_reason, by_n.loc[4].limited_by_reason
        assert steps == [(1, 1, "doubling"), (2, 2, "doubling"), (4, 3, "doubling")]
        assert (m["accelerators_supported"], m["supported_limited_by"]) == ("client-limited at 4", "client")
        pytest.skip("the machine was busy with other work during N = 4 (client-limited, handled as such); "
                    "the bisection was not reached")
    assert steps == [(1, 1, "doubling"), (2, 2, "doubling"), (4, 3, "doubling"), (3, 4, "bisect")], steps
    assert 90 > by_n.loc[3].au_percent and by_n.loc[3].limited_by in ("storage", "client")
    if by_n.loc[3].limited_by == "client":
        assert m["accelerators_supported_text"] == "client-limited at 3"
        return
    assert (m["accelerators_supported"], m["supported_limited_by"], m["accelerators_supported_text"]) == (
        2, "storage", "2 (storage-limited)")
    assert m["search_probes"] == "1,2,4,3"
    ml = json.loads((out / "mlperf_results.json").read_text())["accelerators_supported"][0]
    assert ml["supported_limited_by"] == "storage" and ml["search_probes"] == "1,2,4,3"
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    assert not [n for n in notes if n.startswith("search of ")], notes    # the live search agreed with the rows


def test_finish_notes_a_search_whose_rows_give_another_answer(tmp_path):
    """finish() compares the live search's outcome with the answer runs.csv's rows give; a row edited after
    the fact (here: N = 2's AU) makes them differ, and the run says so."""
    from types import SimpleNamespace

    from storagebrief.studies.emulate import run as emulate_run

    p = config.validate(params_dict(tmp_path, {**SMALL, "accelerators": "auto", "search_max": 8, "repeats": 1}))
    sp = emulate_plan.SearchPlan(p.section("emulate"), ["t"])
    rows = []
    while (item := sp.next()) is not None:
        pt, t = item
        au, by = fake_au(2)(pt.config.accelerators)
        row = {"au_percent": au, "limited_by": by, "search_elapsed_s": pt.config.search_elapsed_before_s + 1.0}
        sp.done(pt, t, row)
        rows.append({"workload": "unet3d", "target": t, "accelerators": pt.config.accelerators, "repeat": 1,
                     "au_threshold_percent": 90.0, "search_step": pt.config.search_step,
                     "search_phase": pt.config.search_phase, "search_budget_s": 60.0, "search_max": 8, **row})
    frame = pd.DataFrame(rows)
    for col, v in {"accelerator_type": "v100", "launcher": "fork", "hosts": 1, "samples_per_s": 1.0,
                   "demand_samples_per_s": 1.0, "loader_read_mib_per_s": 1.0, "loader_read_mb_per_s": 1.0,
                   "client_cpu_s_per_gb": 1.0, "num_files": 48, "sample_bytes_mean": 1.0, "batch_size": 2,
                   "compute_s": 0.02, "epochs": 2, "dataset_sizing": "fixed", "steps": 10, "au_warmup_steps": 1,
                   "au_drain_steps": 1, "read_threads": 2, "prefetch": 1, "odirect": False,   # what the MLPerf
                   "read_block_bytes": 65536}.items():                                          # tree writes
        frame[col] = v
    notes: list[str] = []
    sweep = SimpleNamespace(targets=[], out_dir=tmp_path, state=SimpleNamespace(search=sp), note=notes.append)
    emulate_run.finish(sweep, frame)
    assert notes == [] and sp.outcomes()[("unet3d", "t")].text == "2 (storage-limited)"
    frame.loc[frame.accelerators == 2, "au_percent"] = 60.0           # rows that no longer say what the search saw
    emulate_run.finish(sweep, frame)
    assert notes == ["search of unet3d on 't' ended at 2 (storage-limited), but its rows give 1 (storage-limited): "
                     "the rows' answer is reported"]
