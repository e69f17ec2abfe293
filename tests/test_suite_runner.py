"""The suite's own machinery (tests/suite.py, tests/budget.py), run on a small made-up suite in two xdist workers
as `make test` runs the real one: a serial test has no other test beside it and runs last, a shared fixture read from two files
on two workers is built once, and an unlisted test over the budget fails the run by name while a listed one and
the shared fixture's build (a line of its own) do not."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CONFTEST = '''
import os, time
from pathlib import Path
import pytest

pytest_plugins = ["suite"]

def _build(folder):
    with open(Path(os.environ["SPANS"]).parent / "builds", "a") as fh:
        fh.write(os.environ.get("PYTEST_XDIST_WORKER", "") + "\\n")
    time.sleep(0.8)                  # over the tiny budget: a shared build is its own, listed line
    return {"worker": os.environ.get("PYTEST_XDIST_WORKER", "")}

@pytest.fixture(scope="session")
def tiny_chain(request):
    from suite import built_once
    return built_once(request, "tiny_chain", _build)

@pytest.hookimpl(hookwrapper=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):     # the controller: the order units are handed out in
    sched = (yield).get_result()
    real = sched._assign_work_unit
    def logged(node):
        with open(Path(os.environ["SPANS"]).parent / "units", "a") as fh:
            fh.write(next(iter(sched.workqueue)) + "\\n")
        real(node)
    sched._assign_work_unit = logged
'''

OTHER = '''
import pytest
from test_made_up import _span

@pytest.mark.parametrize("i", range(2))
def test_also_reads_chain(tiny_chain, i):
    assert tiny_chain["worker"]

@pytest.mark.parametrize("i", range(4))
def test_other_parallel(i):
    _span(f"other{i}")
'''

SUITE = '''
import json, os, time
from pathlib import Path
import pytest

LOG = Path(os.environ["SPANS"])

def _span(name):
    t0 = time.time(); time.sleep(0.25); t1 = time.time()
    with open(LOG / f"{name}-{os.getpid()}", "w") as fh:
        json.dump([t0, t1, os.environ.get("PYTEST_XDIST_WORKER", "")], fh)

@pytest.mark.parametrize("i", range(6))
def test_parallel(i):
    _span(f"parallel{i}")

@pytest.mark.serial("the test of serial")
def test_alone():
    _span("serial")

@pytest.mark.parametrize("i", range(3))
def test_reads_chain(tiny_chain, i):
    _span(f"chain{i}")

def test_slow_listed():
    time.sleep(0.8)

def test_slow_unlisted():
    time.sleep(0.8)
'''


def _suite(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    (root / "tests").mkdir(parents=True)
    for name in ("suite.py", "budget.py"):
        shutil.copy(HERE / name, root / "tests" / name)
    budget = (root / "tests" / "budget.py").read_text()
    (root / "tests" / "budget.py").write_text(budget.replace(
        "OVER_BUDGET: dict[str, tuple[float, str]] = {\n",
        "OVER_BUDGET: dict[str, tuple[float, str]] = {\n    'tests/test_made_up.py::test_slow_listed': (1.2, 'test'),\n"
        "    'fixture tiny_chain': (1.5, 'test'), 'fixture tiny_chain, waited for': (1.5, 'test'),\n", 1))
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_made_up.py").write_text(SUITE)
    (root / "tests" / "test_other.py").write_text(OTHER)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    return root


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
def test_serial_runs_alone_the_chain_stays_on_one_worker_and_the_budget_names_its_offender(tmp_path):
    root, spans = _suite(tmp_path), tmp_path / "spans"
    spans.mkdir()
    env = {**os.environ, "SPANS": str(spans), "STORAGEBRIEF_TEST_BUDGET_S": "0.5", "PYTHONDONTWRITEBYTECODE": "1",
           "STORAGEBRIEF_TEST_BUDGET_LOAD": "fixed"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadfile", "--no-loadscope-reorder"], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out                                   # every test passed; the budget failed the run
    assert "18 passed" in out and "over the per-test budget" in out, out
    assert "tests/test_made_up.py::test_slow_unlisted" in out and "test_slow_listed" not in out.split("budget")[-1]
    import json
    got = {p.name.rsplit("-", 1)[0]: json.loads(p.read_text()) for p in spans.iterdir()}
    assert len(got) == 14 and len({w for _, _, w in got.values()}) == 2     # both workers ran tests
    s0, s1, _ = got["serial"]
    beside = [n for n, (a, b, _) in got.items() if n != "serial" and a < s1 and b > s0]
    assert not beside, f"ran beside the serial test: {beside}"
    units = (tmp_path / "units").read_text().split("\n")[:-1]      # the serial test's own unit, handed out last
    assert units[-1] == "serial phase: tests/test_made_up.py" and len(units) == 3, units
    assert len((tmp_path / "builds").read_text().split()) == 1        # built once, whoever asked


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
def test_without_xdist_the_plugin_runs_every_test_in_one_process(tmp_path):
    root, spans = _suite(tmp_path), tmp_path / "spans"
    spans.mkdir()
    env = {**os.environ, "SPANS": str(spans), "STORAGEBRIEF_TEST_BUDGET_S": "30"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not slow and not also"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "14 passed" in res.stdout, res.stdout + res.stderr


def test_suite_costs_gives_each_study_its_folder_and_its_registry_cases(tmp_path):
    import suite_costs
    junit = tmp_path / "j.xml"
    junit.write_text("""<testsuites><testsuite>
      <testcase classname="tests.studies.checkpoint.test_checkpoint" name="test_a" time="10.5"/>
      <testcase classname="tests.studies.test_every_study" name="test_kill[checkpoint]" time="4"/>
      <testcase classname="tests.studies.test_contract" name="test_b[vector_search-local]" time="2"/>
      <testcase classname="tests.core.test_lock" name="test_c" time="1"/>
      <testcase classname="tests.studies.test_every_study" name="test_kill[not_a_study]" time="3"/>
    </testsuite></testsuites>""")
    got = suite_costs.costs(str(junit), ["checkpoint", "vector_search", "emulate"])
    assert got == {"checkpoint": (2, 14.5), "vector_search": (1, 2.0), "shared": (2, 4.0)}
    text = suite_costs.table(got, ["checkpoint", "vector_search", "emulate"])
    assert "| emulate | 0 | 0 |" in text and "| all | 5 | 20 |" in text


def test_every_over_budget_entry_names_a_test_that_exists_and_says_why():
    import ast
    import budget
    repo = HERE.parent
    for key, (seconds, why) in budget.OVER_BUDGET.items():
        assert seconds > budget.BUDGET_S * 0.5 and len(why) > 20, key
        if key.startswith("fixture "):
            continue
        path, _, name = key.partition("::")
        tree = ast.parse((repo / path).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name.split("[", 1)[0] in names, f"{key}: no such test"


def test_the_budget_grows_with_the_load_per_core_past_one():
    import budget
    b = budget.BUDGET_S
    took = {"tests/a.py::test_x": 1.3 * b, "tests/a.py::test_y": 1.3 * b, "tests/a.py::test_z": 3.3 * b}
    load = {"tests/a.py::test_x": 0.9, "tests/a.py::test_y": 1.5, "tests/a.py::test_z": 3.0}
    assert budget.allowed(0.2) == budget.allowed(1.0) == b and budget.allowed(3.0) == 3 * b
    assert budget.over(took, load) == [("tests/a.py::test_z", 3.3 * b), ("tests/a.py::test_x", 1.3 * b)]
    assert [n for n, _ in budget.over(took)] == ["tests/a.py::test_z", "tests/a.py::test_x", "tests/a.py::test_y"]
