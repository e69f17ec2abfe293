"""kit.child: a worker in a fresh interpreter speaking JSON lines (tests/kit/json_lines_child.py is the child)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from conftest import process_alive
from storagebrief.core.causes import EnvironmentFailure
from storagebrief.kit import child
from storagebrief.kit.child import Child

HERE = Path(__file__).resolve().parent
MODULE = "json_lines_child"


@pytest.fixture(autouse=True)
def _child_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def _start(tmp_path, mode: str, label: str = "worker 1") -> Child:
    return Child(MODULE, {"mode": mode}, tmp_path / f"{mode}.log", label)


def test_a_child_says_ready_answers_commands_and_exits_when_told(tmp_path):
    with _start(tmp_path, "echo") as c:
        assert c.expect("ready", 60)["pid"] == c.pid
        c.send({"cmd": "run", "n": 1})
        assert c.expect("echo", 60)["got"] == {"cmd": "run", "n": 1}     # the chatter line in between is no event
        c.send("go")
        assert c.expect("echo", 60)["got"] == "go"
        c.stop()
    assert c.proc.returncode == 0            # it exited on {"cmd": "exit"}: nothing had to be killed
    assert not process_alive(c.pid)


def test_a_child_that_dies_before_ready_says_how_and_names_its_log(tmp_path):
    c = _start(tmp_path, "die", "consumer 0")
    try:
        with pytest.raises(RuntimeError) as err:
            c.expect("ready", 60)
        assert str(err.value) == (f"consumer 0 (pid {c.pid}) exited with status 3 before 'ready'; "
                                  f"see {tmp_path / 'die.log'}")
        assert not isinstance(err.value, EnvironmentFailure)        # its own exit: not the environment's
        assert "dying before ready on purpose" in (tmp_path / "die.log").read_text()
        with pytest.raises(RuntimeError, match="exited with status 3 before 'assigned'"):
            c.expect("assigned", 30)             # a later wait says the same, not "sent no 'assigned'"
    finally:
        c.stop()


def test_a_child_killed_from_outside_is_the_environments_failure(tmp_path):
    with _start(tmp_path, "echo", "producer 2") as c:
        c.expect("ready", 60)
        os.kill(c.pid, signal.SIGKILL)
        with pytest.raises(EnvironmentFailure) as err:
            c.expect("echo", 60)
    assert str(err.value).startswith(f"producer 2 (pid {c.pid}) killed by signal 9 ")
    assert str(err.value).endswith(f"before 'echo'; see {tmp_path / 'echo.log'}")


def test_a_child_that_never_answers_times_out_naming_the_event(tmp_path):
    c = _start(tmp_path, "silent", "consumer 1")
    try:
        with pytest.raises(RuntimeError, match=rf"^consumer 1 \(pid {c.pid}\) sent no 'ready' within 1 s$"):
            c.expect("ready", 1)
    finally:
        c.stop(timeout_s=0.5)                  # it reads no command either: killed
    assert not process_alive(c.pid)


def test_an_error_event_fails_the_wait_with_the_childs_own_words(tmp_path):
    with _start(tmp_path, "error") as c:
        c.expect("ready", 60)
        c.send({"cmd": "run"})
        with pytest.raises(RuntimeError, match=r"^worker 1: no such command \{'cmd': 'run'\}$"):
            c.expect("done", 60)


def test_the_check_runs_while_waiting_and_its_error_ends_the_wait(tmp_path):
    class BrokerDied(Exception):
        pass

    def check():
        raise BrokerDied("node 1")
    c = _start(tmp_path, "silent")
    try:
        with pytest.raises(BrokerDied):
            c.expect("ready", 600, check)
    finally:
        c.stop(timeout_s=0.5)


def test_stop_kills_a_child_that_ignores_exit_and_what_it_started(tmp_path):
    c = _start(tmp_path, "deaf")
    ready = c.expect("ready", 60)
    assert process_alive(ready["grandchild"])
    c.stop(timeout_s=1)
    assert c.proc.returncode == -signal.SIGKILL
    assert not process_alive(c.pid) and not process_alive(ready["grandchild"])


def test_the_child_runs_this_storagebrief_with_the_extra_environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = child.child_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert env["PYTHONPATH"].split(os.pathsep) == [child.LIB, "/elsewhere"]
    assert Path(child.LIB, "storagebrief", "kit", "child.py").is_file() and env["TF_CPP_MIN_LOG_LEVEL"] == "3"
