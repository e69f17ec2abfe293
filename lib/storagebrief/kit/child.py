"""A worker in a fresh interpreter speaking JSON lines (`Child`), for workers whose libraries do not survive a
fork (TensorFlow, librdkafka): kit.ranks forks its workers from the launcher, these start from nothing.

`python -m <module> '<json arg>'`, with this process's storagebrief first on its PYTHONPATH, starts through a
core.procs.Scope: a session of its own (a terminal's Ctrl-C reaches the study, which stops it), the owner marker
(the leftovers sweep finds it after kill -9 of us) and PR_SET_PDEATHSIG (it dies with us). Its stderr goes to a
log file; `join` puts it in cgroups the run holds too (a target's throttle), which its stop() never
empties. Every JSON object it writes a line on stdout is an event (core.events: other lines are passed over;
"eof" is reserved for its end); `send` writes one command a line on its stdin.

`expect(event, timeout_s, check)` waits for the next such event and raises with the child's own words on
{"event": "error", "error": ...}, with how it ended (exit status, or the signal that killed it, as kit.ranks
says it) and its log when it ends first, or naming the event when the time is up. `stop()` asks it to exit
({"cmd": "exit"}, then EOF on stdin) and kills it, and whatever it started, after a grace.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..core.causes import EnvironmentFailure
from ..core.events import EOF_EVENT, drain_events
from ..core.procs import Scope
from . import budget
from .ranks import how_ended

LIB = str(Path(__file__).resolve().parents[2])        # .../lib: the storagebrief this process runs
EXIT_COMMAND = {"cmd": "exit"}
POLL_S = 0.2                  # how often a wait runs its check
EXIT_WAIT_S = 5.0             # after its stdout closed, how long the child may take to end before we say so


def child_env(extra: dict | None = None) -> dict:
    """Our environment with this storagebrief first on PYTHONPATH, and `extra` over it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([LIB, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return {**env, **(extra or {})}


class Child:
    """One `python -m module` worker (or `argv`, a compiled one speaking the same lines): label names it in every
    message ("consumer 0")."""

    def __init__(self, module: str, arg: Any, log_file: Path, label: str = "worker", env: dict | None = None,
                 join: list[str] | None = None, argv: list[str] | None = None):
        self.label, self.log_path = label, Path(log_file)
        self.events: queue.Queue = queue.Queue()
        self.ended: str | None = None             # how it ended, once its stdout closed
        self.scope = Scope(f"child-{label}", join=join)   # join: the run's cgroup (its throttle), not ours to kill
        self.oom_before = budget.oom_kills()
        rfd, wfd = os.pipe()
        try:
            with open(self.log_path, "ab") as log:    # the child holds its own copy of the descriptor
                cmd = [*(argv or [sys.executable, "-m", module]), json.dumps(arg)]   # argv: a compiled worker
                self.proc = self.scope.popen(cmd, env=child_env(env),
                                             stdin=subprocess.PIPE, stdout=wfd, stderr=log, text=True)
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        drain_events(rfd, self.events)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, command: str | dict) -> None:
        """One command line on the child's stdin (a dict goes as JSON)."""
        self.proc.stdin.write((command if isinstance(command, str) else json.dumps(command)) + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout_s: float, check: Callable[[], None] | None = None) -> dict:
        """The child's next `event` (other events are passed over); `check` runs between waits and may raise (a
        broker that died fails the run at once)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if check is not None:
                check()
            if self.ended is not None:
                raise self._ended_before(event)
            try:
                msg = self.events.get(timeout=POLL_S)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.label} (pid {self.pid}) sent no '{event}' within {timeout_s:.0f} s"
                                       ) from None
                continue
            if not isinstance(msg, dict):
                continue
            if msg == EOF_EVENT:
                self.ended = self._how_ended()
            elif msg.get("event") == "error":
                raise RuntimeError(f"{self.label}: {msg.get('error')}")
            elif msg.get("event") == event:
                return msg

    def _how_ended(self) -> str:
        try:
            code = self.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "closed its stdout and still runs"
        return how_ended(code, budget.oom_cause(self.oom_before) if code == -signal.SIGKILL else None)

    def _ended_before(self, event: str) -> RuntimeError:
        # killed from outside (kill -9, the OOM killer) is the environment's failure, as for kit.ranks's workers
        kind = EnvironmentFailure if self.ended.startswith("killed") else RuntimeError
        return kind(f"{self.label} (pid {self.pid}) {self.ended} before '{event}'; see {self.log_path}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the child to exit; kill it, and whatever it started, when it has not within `timeout_s`."""
        try:
            if self.proc.poll() is None:
                try:
                    self.send(EXIT_COMMAND)
                    self.proc.stdin.close()
                except (OSError, ValueError):          # it closed its stdin, or died meanwhile
                    pass
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            try:
                self.scope.kill()
            finally:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
