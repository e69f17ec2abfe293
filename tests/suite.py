"""How the suite runs on a 2-core machine (issue 56): three xdist workers (`make test` passes `-n 3 --dist
loadfile`), whole test files kept together, the longest work first, `serial` tests alone, what many tests
read built once per run, and every test held to a time budget.

- **Files.** Each test file is one unit of work, so its module fixtures (a JupyterLab server, a Kafka
  cluster, a rendered brief) are built once.
- **Built once.** A fixture many files read (the tiny DVC chain) is built with `built_once`: under xdist the
  first worker to need it builds it in the run's shared folder while the other, if it needs it too, waits
  for that build and reads it; without xdist it is a plain session fixture.
- **Order.** Files go out longest first (the seconds `budget.OVER_BUDGET` lists, one second for any other
  test; a shared fixture's seconds go to the first file that reads it), so the workers finish together
  instead of one waiting out a long file at the end.
- **Serial.** `@pytest.mark.serial("why")` runs a test with the other workers idle: every test holds a
  shared lock for its set-up, call and tear-down; a serial one takes a turnstile first (so no new test
  starts beside it), then the lock exclusively. The serial tests are the run's last phase (`SerialLast`),
  so what they wait for is the other workers' last short tests, not a long file.
- **Budget.** A test whose set-up, call and tear-down take over `budget.BUDGET_S` and that is not on
  `budget.OVER_BUDGET` fails the run at its end, with the list of offenders; a shared fixture's build is a
  line of its own (`fixture <name>`), not part of whichever test needed it first.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import budget

RUN_DIR_KEY = "storagebrief_suite_dir"
SHARED_FIXTURES = ("tiny_chain",)      # built by built_once: their seconds go to the first file that reads each


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Files longest first, then every serial test (its file's order kept), so the serial phase comes last; inside a
    file, collection order is kept."""
    files: dict[str, list] = {}
    for item in items:
        mark = item.get_closest_marker("serial")
        if mark is not None and not (mark.args and str(mark.args[0]).strip()):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.serial needs its reason, serial(\"why\")")
        files.setdefault(_file_of(item), []).append(item)
    weight = {f: sum(budget.seconds(m.nodeid) or 1.0 for m in members) for f, members in files.items()}
    for name in SHARED_FIXTURES:
        first = next((_file_of(m) for m in items if name in getattr(m, "fixturenames", ())), None)
        if first:
            weight[first] += budget.seconds(f"fixture {name}") or 0.0
    ordered = sorted(files, key=lambda f: -weight[f])
    serial = [m for f in ordered for m in files[f] if m.get_closest_marker("serial") is not None]
    items[:] = [m for f in ordered for m in files[f] if m.get_closest_marker("serial") is None] + serial
    shared = _run_dir(config)
    if shared is not None:              # for the controller's scheduler (SerialLast): which tests are serial
        tmp = shared / f"serial.json.{os.getpid()}"
        tmp.write_text(json.dumps([m.nodeid for m in serial]))
        os.replace(tmp, shared / "serial.json")


SERIAL_PHASE = "serial phase: "


@pytest.hookimpl(optionalhook=True)     # xdist's hook (see pytest_configure_node)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the serial tests last: each file's serial tests are a unit of their own, handed out
    after every other file, so a serial test waits only for the last short tests beside it to end, not for
    whatever long file the other worker is in (the DVC chain, the notebook walk), and the other worker's idle
    time is the serial tests' own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SerialLast(LoadFileScheduling):
        serial: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.serial is None:     # first asked in schedule(), once every worker has collected (and written it)
                record = Path(config.stash[_RUN_DIR]) / "serial.json"
                self.serial = set(json.loads(record.read_text())) if record.exists() else set()
            scope = super()._split_scope(nodeid)
            return SERIAL_PHASE + scope if nodeid in self.serial else scope

    return SerialLast(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "serial(why): runs with no other test beside it (a measurement, or a "
                                       "check of a machine-wide state such as /dev/shm or every process)")
    if not hasattr(config, "workerinput"):          # the controller, or the one process without xdist
        config.pluginmanager.register(Budget(), "storagebrief-budget")


def _run_dir(config) -> Path | None:
    """The folder this run's workers share (made by the controller, 0700), or None without xdist."""
    d = getattr(config, "workerinput", {}).get(RUN_DIR_KEY)
    return Path(d) if d else None


def built_once(request, name: str, build):
    """build(folder) -> a JSON-able result, run once per test run however many workers ask (see the module's
    doc). A build that failed fails every later asker with its message, instead of being tried again."""
    shared = _run_dir(request.config)
    if shared is None:
        with shared_setup(name):
            return build(request.getfixturevalue("tmp_path_factory").mktemp(name))
    fd = _open_lock(request.config, name)
    record = shared / f"{name}.json"
    try:
        t0 = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_EX)
        if record.exists():
            _record_setup(f"{name}, waited for", time.monotonic() - t0)
            data = json.loads(record.read_text())
        else:
            try:
                with shared_setup(name):
                    (shared / name).mkdir()
                    data = {"result": build(shared / name)}
            except BaseException as exc:
                data = {"error": f"{type(exc).__name__}: {str(exc)[-3000:]}"}
                raise
            finally:
                record.write_text(json.dumps(data))
    finally:
        os.close(fd)
    if "error" in data:
        pytest.fail(f"the shared fixture {name} failed to build in the other worker: {data['error']}")
    return data["result"]


# ----------------------------------------------------------------------- serial tests under xdist

_RUN_DIR = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)     # xdist's hook: pytest without xdist (-p no:xdist) runs too
def pytest_configure_node(node):          # the controller, once per worker: the run's shared folder
    node.workerinput[RUN_DIR_KEY] = node.config.stash[_RUN_DIR]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    if session.config.pluginmanager.hasplugin("dsession"):     # the xdist controller: a folder of its own
        session.config.stash[_RUN_DIR] = tempfile.mkdtemp(prefix="storagebrief-suite-")


def pytest_unconfigure(config):
    lock_dir = config.stash.get(_RUN_DIR, None)
    if lock_dir:
        shutil.rmtree(lock_dir, ignore_errors=True)


def _open_lock(config, name: str):
    shared = _run_dir(config)
    if shared is None:
        return None
    return os.open(shared / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING[:] = [item]
    shared = _open_lock(item.config, "run")
    if shared is None:                  # not under xdist: nothing runs beside this test
        yield
        return
    turnstile = _open_lock(item.config, "turnstile")
    serial = item.get_closest_marker("serial") is not None
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(shared, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
    finally:
        os.close(shared)
        os.close(turnstile)


# ----------------------------------------------------------------------- the per-test budget

SHARED_SETUP = "shared set-up"
_RUNNING: list = []


@contextlib.contextmanager
def shared_setup(name: str):
    """Around the expensive part of a fixture many tests share (the tiny DVC chain, a JupyterLab server): its
    seconds count as `fixture <name>` in the budget, not as the set-up of whichever test happened to need it
    first (which depends on the order and on -k)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        _record_setup(name, time.monotonic() - t0)


def _record_setup(name: str, seconds: float) -> None:
    if _RUNNING:
        _RUNNING[0].user_properties.append((SHARED_SETUP, (name, seconds)))


class Budget:
    """Adds up each test's set-up, call and tear-down (the workers' reports reach the controller) and fails the
    run when one is over budget.BUDGET_S without being listed."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.load: dict[str, float] = {}        # the machine's load per core when each test ended (budget.allowed)
        self.counted: dict[str, int] = {}       # shared set-ups already counted, per test (every later report
                                                # of the test carries its user_properties again)

    def pytest_runtest_logreport(self, report):
        took = report.duration
        shared = [value for key, value in report.user_properties if key == SHARED_SETUP]
        for name, seconds in shared[self.counted.get(report.nodeid, 0):]:
            self.seconds[f"fixture {name}"] = self.seconds.get(f"fixture {name}", 0.0) + seconds
            took -= seconds                     # a fixture many tests share: its own line, off this test
        self.counted[report.nodeid] = len(shared)
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + took
        self.load[report.nodeid] = max(self.load.get(report.nodeid, 0.0), os.getloadavg()[0] / (os.cpu_count() or 1))

    def pytest_sessionfinish(self, session):
        if budget.over(self.seconds, self.load) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        over = budget.over(self.seconds, self.load)
        if over:
            terminalreporter.section("over the per-test budget", red=True)
            terminalreporter.write_line(
                f"{len(over)} test(s) took over {budget.BUDGET_S:.0f} s (more where the machine was loaded) and are "
                f"not on tests/budget.py's OVER_BUDGET list (make them faster, or list them there with why):")
            for nodeid, seconds in over:
                terminalreporter.write_line(f"  {seconds:6.1f} s  {nodeid} (allowed "
                                            f"{budget.allowed(self.load.get(nodeid, 0.0)):.0f} s)")
