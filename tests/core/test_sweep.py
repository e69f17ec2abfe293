"""The one sweep engine (core.sweep) on a tiny in-test study: order, rows, cleanup, progress."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import types
from dataclasses import dataclass

import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroups, columns, config, results, sweep
from storagebrief.core.progress import Progress
from storagebrief.core.study import Study
from conftest import needs_blkio


@dataclass(frozen=True)
class FakeStudy(Study):
    """A study whose rooms are objects made by the test; its params section is registered by the
    `params` fixture (core knows no study: the registry registers sections)."""
    hooks: object = None

    def room(self, name):
        return self.hooks

    def metrics(self, frame, names):
        return {"runs": len(frame)}


def _study(**hooks) -> FakeStudy:
    defaults = dict(
        prepare=lambda sw: sw.state.setdefault("prepared", True),
        plan=lambda sw: [sweep.Point(c, r, f"config {c}") for c in ("a", "b") for r in (1, 2)],
        run_id=lambda c, t, r: f"fake-{c}-{t.name}-r{r}",
        run_one=lambda run, c: sweep.Measurement({"config": c, "value_s": 1.0}),
        configure=None, skip=None, finish=None, close=None,      # optional hooks: declared (core/contract.py)
        COLUMNS=(),                                              # the metrics room's (the same object here)
    )
    defaults.update(hooks)
    return FakeStudy(name="fake", command="fake", title="Fake", notebook="", outputs=(), brief_inputs=(),
                     hooks=types.SimpleNamespace(**defaults))


class FakeParams(config.Strict):
    pass


@pytest.fixture
def params(tmp_path):
    config.register_section("fake", lambda: FakeParams)
    data = {"targets": [{"name": "one", "path": str(tmp_path / "one")},
                        {"name": "two", "path": str(tmp_path / "two"), "profile": "hdd_7200"}],
            "run": {"cold_cache": False, "monitor_interval_s": 0.05}, "fake": {}}
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    yield config.load(f)
    config._SECTIONS.pop("fake", None)


def _quiet(**kw):
    return dict(log=lambda *_: None, progress="off", **kw)


def test_targets_interleave_inside_each_point_and_common_columns(params, tmp_path):
    frame = sweep.run(_study(), params, tmp_path / "out", log=lambda *_: None, progress="off")
    assert list(zip(frame.config, frame.repeat, frame.target)) == [
        ("a", 1, "one"), ("a", 1, "two"), ("a", 2, "one"), ("a", 2, "two"),
        ("b", 1, "one"), ("b", 1, "two"), ("b", 2, "one"), ("b", 2, "two")]
    for col in ("study", "run_id", "target", "profile", "repeat", "started_at", "cache_method", "emulated"):
        assert col in frame
    assert set(frame.profile) == {"", "hdd_7200"} and not frame.emulated.any()
    out = tmp_path / "out"
    assert json.loads((out / "metrics.json").read_text()) == {"runs": 8}
    assert (out / "inventory.json").exists() and pd.read_csv(out / "runs.csv").shape[0] == 8


def test_configure_skip_tables_series_and_notes_once(params, tmp_path):
    def run_one(run, c):
        run.sweep.note("said once")
        run.sweep.note("said once")
        run.start_clock()
        run.stop_clock()
        return sweep.Measurement({"config": c}, tables={"extra.csv": [{"run_id": run.run_id}]},
                                 series={"-x": [{"t_s": 0.0, "v": 1}]})
    study = _study(configure=lambda sw, c, t: c.upper(), skip=lambda sw, pt, t: t.name == "two",
                   run_one=run_one)
    said = []
    frame = sweep.run(study, params, tmp_path / "out", log=said.append, progress="off")
    out = tmp_path / "out"
    assert set(frame.config) == {"A", "B"} and set(frame.target) == {"one"} and len(frame) == 4
    # the plan counted 8: the count run says why it is 4 (issue 62: "18 runs" planned, "15 runs complete")
    assert f"4 runs complete (4 of the 8 planned left out by the study's plan, as its docs say): {out}" in said, said
    assert len(pd.read_csv(out / "extra.csv")) == 4
    assert (out / "timeseries" / "fake-A-one-r1-x.csv").exists()
    assert (out / "timeseries" / "fake-A-one-r1.csv").exists()          # the monitor's series
    assert "device_read_mb_per_s_avg" in frame or "cpu_busy_percent" in frame
    assert json.loads((out / "notes.json").read_text())["warnings"].count("said once") == 1


def test_failed_measurement_gets_no_monitor_columns(params, tmp_path):
    def run_one(run, c):
        run.start_clock()
        return sweep.Measurement({"status": "failed"}, ok=False)
    frame = sweep.run(_study(run_one=run_one), params, tmp_path / "out", log=lambda *_: None, progress="off")
    assert "cpu_busy_percent" not in frame and not list((tmp_path / "out" / "timeseries").glob("*.csv"))


def test_the_engine_writes_status_failure_reason_and_the_schema_sidecar(params, tmp_path):
    def run_one(run, c):
        if c == "b":
            return sweep.Measurement({"config": c}, ok=False, failure_reason="out of memory")
        return sweep.Measurement({"config": c})
    frame = sweep.run(_study(run_one=run_one), params, tmp_path / "out", log=lambda *_: None, progress="off")
    rows = pd.read_csv(tmp_path / "out" / "runs.csv", keep_default_na=False)
    assert list(rows.status) == ["ok"] * 4 + ["failed"] * 4
    assert list(rows.failure_reason) == [""] * 4 + ["out of memory"] * 4
    schema = json.loads((tmp_path / "out" / "runs.schema.json").read_text())
    names = [c["name"] for c in schema["columns"]]
    assert schema["schema_version"] == columns.RUNS_SCHEMA_VERSION and schema["study"] == "fake"
    assert {"status", "failure_reason", "run_id", "device_read_bytes"} <= set(names)
    assert columns.undeclared(frame.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS) == ["config"]
    assert results.check_schema_version(tmp_path / "out" / "runs.csv") == columns.RUNS_SCHEMA_VERSION


def test_an_ok_run_with_a_failure_reason_is_a_bug(params, tmp_path):
    bad = _study(run_one=lambda run, c: sweep.Measurement({"config": c}, failure_reason="?"))
    with pytest.raises(ValueError, match="failure_reason"):
        sweep.run(bad, params, tmp_path / "out", log=lambda *_: None, progress="off")


def test_an_exception_mid_run_leaves_earlier_rows_only(params, tmp_path):
    def run_one(run, c):
        if c == "b":
            raise KeyboardInterrupt
        return sweep.Measurement({"config": c})
    with pytest.raises(KeyboardInterrupt):
        sweep.run(_study(run_one=run_one), params, tmp_path / "out", log=lambda *_: None, progress="off")
    rows = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(rows.config) == {"a"} and len(rows) == 4


@needs_blkio()
def test_cgroups_of_a_run_are_removed_when_it_fails(params, tmp_path):
    made = []

    def run_one(run, c):
        group = run.throttle()
        made.append(group)
        assert group is not None and run.emulated == (run.target.name == "two")
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        sweep.run(_study(run_one=run_one, skip=lambda sw, pt, t: t.name == "one"), params, tmp_path / "out",
                  log=lambda *_: None, progress="off")
    assert made and not cgroups.leftover_dirs(os.getpid())


def test_progress_lines_show_run_of_total_target_and_eta():
    buf = io.StringIO()
    bar = Progress(3, "fake", mode="lines", stream=buf)
    bar.begin("one", "4 accelerators", 1)
    bar.end()
    bar.skip()
    bar.begin("two", "8 accelerators", 1)
    bar.end()
    bar.close()
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("[fake] run 1/3 one: 4 accelerators, repeat 1 (elapsed 00:00, ETA ?)")
    assert lines[1].startswith("[fake] run 2/2 two: 8 accelerators") and "ETA 00:00" in lines[1]   # one left out
    assert lines[2].startswith("[fake] 2/2 runs in")
    with pytest.raises(ValueError, match="progress mode"):
        Progress(1, "x", mode="fancy")


class _CountingPlan:
    """An adaptive plan (core/plans.py): per target, configs 1, 2, 3, ... until a row's value passes 2."""
    kind = "search"

    def __init__(self, names):
        self.next_c, self.stopped, self.seen = {n: 1 for n in names}, set(), []

    def next(self):
        for name, c in self.next_c.items():
            if name not in self.stopped and c <= 10:
                return sweep.Point(c, 1, f"config {c}", targets=(name,)), name
        return None

    def done(self, point, target, row):
        self.seen.append((target, row["config"], row["status"]))
        self.next_c[target] += 1
        if row["value"] > 2:
            self.stopped.add(target)

    def runs_left(self):
        return sum(10 - c + 1 for n, c in self.next_c.items() if n not in self.stopped)


def test_an_adaptive_plan_gets_each_recorded_row_and_decides_the_next_run(params, tmp_path):
    plans = []

    def plan(sw):
        plans.append(_CountingPlan(sw.target_names))
        return plans[0]

    skipped = []
    study = _study(plan=plan, run_one=lambda run, c: sweep.Measurement({"config": c, "value": c}),
                   skip=lambda sw, pt, t: skipped.append(pt) or True)      # asked for fixed plans only
    frame = sweep.run(study, params, tmp_path / "out", log=lambda *_: None, progress="off")
    assert list(zip(frame.target, frame.config)) == [("one", 1), ("one", 2), ("one", 3), ("two", 1), ("two", 2),
                                                     ("two", 3)]
    assert plans[0].seen == [(t, c, "ok") for t, c in zip(frame.target, frame.config)] and skipped == []
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["runs_done"] == 6 and status["runs_planned"] == 6     # done + what the plan said was left


class SubsetParams(config.OnSomeTargets):
    pass


def test_a_section_with_targets_runs_on_those_only_narrowed_by_the_engine(params, tmp_path):
    """config.OnSomeTargets: the engine narrows the targets before prepare; an unknown name is a ParamsError."""
    config.register_section("fake", lambda: SubsetParams)
    data = yaml.safe_load((tmp_path / "params.yaml").read_text())
    for names, want in ((["two"], {"two"}), ([], {"one", "two"})):
        data["fake"] = {"targets": names}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
        frame = sweep.run(_study(), config.load(tmp_path / "params.yaml"), tmp_path / f"out{len(names)}",
                          log=lambda *_: None, progress="off")
        assert set(frame.target) == want
    data["fake"] = {"targets": ["nope"]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(config.ParamsError, match="unknown target 'nope'; allowed: one, two"):
        sweep.run(_study(), config.load(tmp_path / "params.yaml"), tmp_path / "out9", log=lambda *_: None,
                  progress="off")


def test_the_engine_shows_the_runs_after_one_and_a_run_ahead_of_it(params, tmp_path):
    """sweep.runs_after / sweep.ahead: the fixed plan's order as the engine runs it, not rebuilt by a study."""
    study = _study()
    sw = sweep.Sweep(study, params, tmp_path / "out", log=lambda *_: None)
    assert sw.planned() == [] and sw.runs_after("fake-a-one-r1") == []          # no plan yet
    sw.set_plan(study.room("run").plan(sw))
    assert [r.run_id for r in sw.runs_after("fake-a-two-r2")] == ["fake-b-one-r1", "fake-b-two-r1",
                                                                   "fake-b-one-r2", "fake-b-two-r2"]
    assert sw.runs_after("fake-b-two-r2") == [] and sw.runs_after("not-planned") == []
    nxt = sw.runs_after("fake-a-one-r1")[0]
    ahead = sw.ahead(nxt)
    assert (nxt.config, nxt.target.name, nxt.repeat, ahead.run_id) == ("a", "two", 1, "fake-a-two-r1")
    ahead.close()


def test_a_held_cgroup_with_the_targets_profile_makes_its_runs_emulated(params, tmp_path):
    """A sweep-scoped cgroup holding a target's profile (an S3 gateway's, brokers') makes every run on that
    target `emulated` while it lives: the engine records it, the study does not."""
    sw = sweep.Sweep(_study(), params, tmp_path / "out", log=lambda *_: None)
    one, two = sw.targets
    group = types.SimpleNamespace(dirs={"blkio": (1, tmp_path)}, remove=lambda: group.dirs.clear())
    sw.hold(group, two)
    assert sweep.Run(sw, two, 1, "r1").emulated and not sweep.Run(sw, one, 1, "r2").emulated
    group.remove()
    assert not sweep.Run(sw, two, 1, "r3").emulated
    sw.jobs.end_all()


# --------------------------------------------------------------------------- a run id is a name (issue 36)
def test_a_run_id_that_is_a_path_is_refused(params, tmp_path):
    with pytest.raises(ValueError, match="run id"):
        sweep.run(_study(run_id=lambda c, t, r: f"../../{c}"), params, tmp_path / "out", **_quiet())
    assert not (tmp_path.parent / "a.csv").exists()


def _ticks(pid: int) -> int:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def _sleeping_run(seen: dict, seconds: float):
    """run_one: the clock runs while the run only sleeps; what its monitor saw is kept in `seen`."""
    def run_one(run, c):
        run.start_clock()
        seen["t0"] = {pid: _ticks(pid) for pid in seen.get("pids", ())}
        time.sleep(seconds)
        run.stop_clock()
        seen["used_s"] = sum(_ticks(p) - t for p, t in seen["t0"].items()) / os.sysconf("SC_CLK_TCK")
        seen["span_s"] = run.monitor.span_s
        return sweep.Measurement({"config": c})
    return run_one


def _one_run(**hooks):
    return _study(plan=lambda sw: [sweep.Point("a", 0, "config a")], skip=lambda sw, pt, t: t.name != "one", **hooks)


def test_a_monitored_run_records_what_else_the_machine_did(params, tmp_path):
    """Issue 61: every monitored row says what else the machine did and whether that disturbed it. This machine
    is shared, so the row's own consistency is asserted, not that it was quiet (the threshold arithmetic is
    tests/core/test_interference.py's, on synthetic counters)."""
    frame = sweep.run(_one_run(run_one=_sleeping_run({}, 0.6)), params, tmp_path / "out", **_quiet())
    row = pd.read_csv(tmp_path / "out" / "runs.csv", keep_default_na=False).iloc[0]
    for col in ("run_cpu_cores_avg", "kernel_cpu_cores_avg", "other_cpu_cores_avg", "run_io_bytes",
                "vm_pgmajfault", "disturbed", "disturbed_reason"):
        assert col in row.index, col
    assert str(row.disturbed) in ("True", "False") and (row.disturbed_reason == "") == (str(row.disturbed) == "False")
    cores = os.cpu_count()
    parts = row.run_cpu_cores_avg + row.kernel_cpu_cores_avg + row.other_cpu_cores_avg
    assert 0 <= parts <= cores * row.cpu_busy_percent / 100 + 0.1      # irq and steal are in busy, not in parts
    assert columns.undeclared(frame.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS) == ["config"]


def test_a_busy_loop_beside_a_run_marks_its_row_disturbed(params, tmp_path):
    """A real competing load: a busy loop started by a shell that exits at once (no descendant of this process,
    no owner marker, in no cgroup of ours) beside a run that only sleeps. Load beside the test only adds other
    work, so the assertions hold on a busy machine too."""
    env = {k: v for k, v in os.environ.items() if k != "STORAGEBRIEF_OWNER"}
    loop = (f'"{sys.executable}" -c "import time; t = time.time()\nwhile time.time() - t < 8: pass" '
            '>/dev/null 2>&1 & echo $!')
    pid = int(subprocess.run(["sh", "-c", loop], capture_output=True, text=True, env=env, check=True).stdout)
    seen = {"pids": [pid]}
    try:
        time.sleep(0.2)
        sweep.run(_one_run(run_one=_sleeping_run(seen, 1.5)), params, tmp_path / "out", **_quiet())
    finally:
        os.kill(pid, 9)
    row = pd.read_csv(tmp_path / "out" / "runs.csv", keep_default_na=False).iloc[0]
    used, span = seen["used_s"], seen["span_s"]
    if used <= 0.3:     # a machine this loaded (other tests, other users) gives the loop too little to judge
        pytest.skip(f"the loop got {used:.2f} CPU s in {span:.1f} s: too loaded to tell its share from noise")
    assert row.run_cpu_cores_avg < 0.2 * used / span + 0.05            # the loop is not the run's
    assert row.other_cpu_cores_avg * span >= 0.8 * used - 0.03
    assert str(row.disturbed) == "True" and "other work used" in row.disturbed_reason


# --------------------------------------------------------------------------- disturbed runs re-run (issue 61)
def _disturbed_when(monkeypatch, disturbed):
    """Run.disturbance judged by the test: `disturbed(run_id)` says whether other work disturbed that run."""
    monkeypatch.setattr(sweep.Run, "disturbance",
                        lambda self, summary: {"disturbed": disturbed(self.run_id), "disturbed_reason":
                                               "test: other work" if disturbed(self.run_id) else ""})


def _clocked(run, c):
    run.start_clock()
    run.stop_clock()
    return sweep.Measurement({"config": c})


def _two_points(**hooks):
    return _study(plan=lambda sw: [sweep.Point(c, 1, f"config {c}") for c in ("a", "b")], run_one=_clocked, **hooks)


def test_a_disturbed_run_is_re_run_once_and_readers_take_the_re_run(params, tmp_path, monkeypatch):
    """Fake rows marked disturbed: a-one-r1 the first time only; b-two-r1 always, so its re-run is disturbed too and
    stays (once only). runs.csv keeps both rows of each, the re-run names the run it replaces."""
    _disturbed_when(monkeypatch, lambda rid: rid == "fake-a-one-r1" or rid.startswith("fake-b-two-r1"))
    once = params.model_copy(update={"run": params.run.model_copy(update={"rerun_disturbed": 1})})
    frame = sweep.run(_two_points(), once, tmp_path / "out", **_quiet())
    rows = pd.read_csv(tmp_path / "out" / "runs.csv", keep_default_na=False)
    assert list(rows.run_id) == ["fake-a-one-r1", "fake-a-one-r1-rerun1", "fake-a-two-r1", "fake-b-one-r1",
                                 "fake-b-two-r1", "fake-b-two-r1-rerun1"]
    assert list(rows.rerun_of) == ["", "fake-a-one-r1", "", "", "", "fake-b-two-r1"]
    # what every reader gets: the superseded runs left out, the disturbed re-run kept (the brief names it)
    for read in (frame, results.read_runs(tmp_path / "out" / "runs.csv")):
        assert len(read) == 4 and {"fake-a-one-r1", "fake-b-two-r1"}.isdisjoint(read.run_id)
        assert list(read.run_id[read.disturbed.astype(str) == "True"]) == ["fake-b-two-r1-rerun1"]
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == {"runs": 4}


def test_no_re_run_when_rerun_disturbed_is_0_the_default(params, tmp_path, monkeypatch):
    _disturbed_when(monkeypatch, lambda rid: True)
    assert params.run.rerun_disturbed == 0             # a params file without it (a test's): row counts stay fixed
    frame = sweep.run(_two_points(skip=lambda sw, pt, t: t.name != "one"), params, tmp_path / "out", **_quiet())
    assert list(frame.run_id) == ["fake-a-one-r1", "fake-b-one-r1"] and frame.disturbed.all()
