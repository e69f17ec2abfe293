"""Workers that outlive one run, owned by the engine: started once, re-armed per run, ended with the sweep.

A LongJob is one fresh Python process (`python -c BOOT`, e.g. a TensorFlow job whose start-up is
20-30 s) that serves several runs. BOOT writes its PID into the job's cgroup first, before anything
heavy is imported, so everything it loads and reads (TensorFlow, page cache) is charged there and an
OOM kill takes only the job. It runs in its own session (our signal handling decides its end) with
PR_SET_PDEATHSIG (kill -9 of us ends it) and the owner marker (procs.py), reads one command a line on stdin (`send`) and reports JSON
lines on an inherited pipe (`wait`, `drain`: core.events). The cgroup counts memory (limit: all RAM,
or a size set at the start) and, where a target has a block device, io (unthrottled, copying an
ancestor's v1 throttle as every Cgroup does); a Run puts its own limits on it (`Run.limit_job`) and
lifts them when it closes. `stop()` asks it to quit, kills its process group and removes the cgroup,
which kills whatever is left in it (kill_on_remove).

The engine owns every job: a study gets one from `sweep.jobs` (a Jobs registry: `get` returns the live
job under a key or a fresh one, replacing a dead one; `adopt` owns one made elsewhere) and the engine
stops every job still registered after the study's close hook, however the sweep ends (an error,
Ctrl-C, SIGTERM). After kill -9 of the sweep the jobs die with it (PDEATHSIG) and the next run's
leftovers sweep removes their cgroups (their names carry our PID).
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from . import cgroups
from .events import drain_events
from .procs import OWNER_ENV, die_with_parent, group_members, kill_all, owner_token

# The job joins its cgroup before it imports anything of ours (writing its PID needs no module).
BOOT = ("import sys, os, json, importlib; a = json.loads(sys.argv[1]); "
        "[open(f, 'w').write(str(os.getpid())) for f in a['procs']]; "
        "m, _, f = a['entry'].partition(':'); getattr(importlib.import_module(m), f)(a['spec'])")
LIB = str(Path(__file__).resolve().parents[2])        # the storagebrief this process runs


class JobDied(RuntimeError):
    """The job ended (or sent nothing in time) before the event a run waited for; the message says how."""


def ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_unavailable() -> str | None:
    """None when a memory cgroup can be made and limited here, else why memory-limited runs cannot run."""
    try:
        with cgroups.Cgroup("probe", memory_limit_bytes=ram_bytes()):
            return None
    except cgroups.CgroupUnavailable as exc:
        return str(exc)


def _job_cgroup(name: str, memory_limit_bytes: int, io_device) -> tuple[cgroups.Cgroup | None, str]:
    """(cgroup, why io or the whole cgroup is missing): memory + io accounting, memory alone, or none."""
    why = ""
    for device in ([io_device, None] if io_device is not None else [None]):
        try:
            group = cgroups.Cgroup(name, memory_limit_bytes=memory_limit_bytes,
                                   io=cgroups.IoLimits(device) if device is not None else None).create()
        except cgroups.CgroupUnavailable as exc:
            why = why or str(exc)
            continue
        group.kill_on_remove = True          # nothing of the job outlives its cgroup
        return group, why
    return None, why


class LongJob:
    """One worker process that outlives runs: its process, its cgroup (None without cgroups), its events.

    entry: 'package.module:function', called with the path of the job's spec (JSON; `event_fd` added).
    memory_limit_bytes: the job's own limit from its start (None: all RAM, for its peak and OOM counters);
    io_device: (major, minor) its io is counted on, so a run may throttle it; need_cgroup: raise
    CgroupUnavailable instead of running without one (a memory-limited job cannot); title: how messages
    name it (default: its name)."""

    def __init__(self, name: str, entry: str, spec: dict, log_path: Path, *, spec_path: Path | None = None,
                 env: dict | None = None, memory_limit_bytes: int | None = None, io_device=None,
                 need_cgroup: bool = False, quit_command: str | dict | None = None, title: str = ""):
        self.name, self.entry, self.spec, self.title = name, entry, spec, title or name
        self.ready: dict | None = None          # its last "ready" event (wait_ready)
        self.log_path = Path(log_path)
        self.spec_path = Path(spec_path) if spec_path is not None else self.log_path.with_suffix(".json")
        self.env = dict(env or {})
        self.quit_command = quit_command
        self.base_memory_bytes = memory_limit_bytes or ram_bytes()
        self.events: queue.Queue = queue.Queue()
        self.proc: subprocess.Popen | None = None
        self.group, self.why_no_cgroup = _job_cgroup(name, self.base_memory_bytes, io_device)
        if self.group is None and need_cgroup:
            raise cgroups.CgroupUnavailable(self.why_no_cgroup)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "LongJob":
        rfd, wfd = os.pipe()
        self.spec["event_fd"] = wfd
        self.spec_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(json.dumps(self.spec))
        arg = json.dumps({"procs": self.group.procs_files if self.group else [], "entry": self.entry,
                          "spec": str(self.spec_path)})
        # The owner marker finds what the job started, after kill -9 of us, where there is no cgroup (procs.py).
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join([LIB, *filter(None, [os.environ.get("PYTHONPATH")])]),
               OWNER_ENV: f"{owner_token()}:job-{self.name}", **self.env}
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen([sys.executable, "-c", BOOT, arg], stdin=subprocess.PIPE, stdout=log,
                                             stderr=subprocess.STDOUT, pass_fds=(wfd,), env=env,
                                             start_new_session=True,       # our signal handling decides its end
                                             preexec_fn=die_with_parent)   # ... and kill -9 of us ends it too
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)
        drain_events(rfd, self.events)          # JSON lines, then {"event": "eof"}
        return self

    @property
    def started(self) -> bool:
        return self.proc is not None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def send(self, command: str | dict) -> None:
        """One command line on the job's stdin (a dict goes as JSON)."""
        line = command if isinstance(command, str) else json.dumps(command)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float) -> int | None:
        """End a job that is told nothing more (EOF on stdin) and wait for it; its cgroup stays until stop()."""
        if self.proc is None:
            return None
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL the job's session (the job and anything it started) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            kill_all([self.proc.pid, *group_members(self.proc.pid)])
            self.proc.wait()

    def stop(self) -> None:
        """Ask the job to quit (quit_command), kill its process group if it does not, remove its cgroup."""
        try:
            if self.alive and self.quit_command is not None:
                try:
                    self.send(self.quit_command)
                    self.proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self.kill()
        finally:
            if self.group is not None:
                self.group.remove()
            if self.proc is not None and self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

    # -- events ------------------------------------------------------------------------------
    def drain(self) -> list[dict]:
        """Every event the job sent so far, without waiting (the last is {'event': 'eof'} once it ended)."""
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def wait(self, name: str, timeout_s: float, seen: list | None = None) -> dict:
        """The next `name` event (others go to `seen`); JobDied when the job ends or times out first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ev = self.events.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise JobDied(f"{self.title} sent no '{name}' in {timeout_s:.0f} s") from None
                continue
            if ev.get("event") == name:
                return ev
            if ev.get("event") == "eof":
                code = self.proc.wait(timeout=30) if self.proc else None
                tail = self.log_tail(800)
                raise JobDied(f"{self.title} ended (exit {code}) before '{name}'" + (f": {tail}" if tail else ""))
            if seen is not None:
                seen.append(ev)

    def wait_ready(self, timeout_s: float) -> dict:
        """Its "ready" event (kept as .ready): started, or re-armed for a run."""
        self.ready = self.wait("ready", timeout_s)
        return self.ready

    def log_tail(self, n: int = 1500, skip: tuple[str, ...] = ("WARNING", "I0000")) -> str:
        """The end of the job's log, without blank lines and TensorFlow's warnings."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(ln for ln in text.splitlines() if ln.strip() and not any(s in ln for s in skip))[-n:]

    # -- a run's limits (Run.limit_job puts them on, Run.close lifts them) ----------------------
    def throttle(self, io: cgroups.IoLimits) -> None:
        """The target's emulated profile on the job's io group (CgroupUnavailable / CgroupLimitError)."""
        if self.group is None or "blkio" not in self.group.dirs:
            raise cgroups.CgroupUnavailable(f"{self.title} has no io cgroup"
                                            + (f" ({self.why_no_cgroup})" if self.why_no_cgroup else ""))
        self.group.set_io(io)

    def limit_memory(self, limit: int) -> None:
        """A run's memory limit on the job (lower than its usage: the kernel reclaims, or OSError)."""
        if self.group is None or "memory" not in self.group.dirs:
            raise cgroups.CgroupUnavailable(f"{self.title} has no memory cgroup"
                                            + (f" ({self.why_no_cgroup})" if self.why_no_cgroup else ""))
        self.group.set_memory_limit(limit)

    def lift_limits(self) -> None:
        """Back to the job's own limits: memory as at its start, the device unthrottled."""
        g = self.group
        if g is None or not g.dirs:
            return                          # no cgroup, or removed with a job that ended
        try:
            if "memory" in g.dirs:
                g.set_memory_limit(self.base_memory_bytes)
            io = g.io
            if io is not None and any((io.read_bps, io.write_bps, io.read_iops, io.write_iops)):
                g.clear_io_limits(io)
                g.io = cgroups.IoLimits(io.device)
        except OSError:
            pass                            # the cgroup went with its job meanwhile


class Jobs:
    """The sweep's long-lived jobs (sweep.jobs), and cgroups held for them: the engine stops (removes) every one
    still here when the sweep ends."""

    def __init__(self):
        self._jobs: dict = {}

    def get(self, key, make: Callable[[], LongJob]) -> LongJob:
        """The live job under `key`, else a fresh one from make() (not yet started: the caller starts it);
        a job that was started and ended is stopped (its cgroup removed) and replaced."""
        job = self._jobs.get(key)
        if job is not None and (not job.started or job.alive):
            return job
        if job is not None:
            self.end(job)
        job = self._jobs[key] = make()
        return job

    def adopt(self, job: LongJob) -> LongJob:
        """Own a job made elsewhere (under its own identity as key)."""
        self._jobs[id(job)] = job
        return job

    def hold(self, group: cgroups.Cgroup) -> cgroups.Cgroup:
        """Own a cgroup that outlives a run (Run.lasting_throttle): removed with the jobs at the sweep's end."""
        self._jobs[id(group)] = group
        return group

    def find(self, key) -> LongJob | None:
        return self._jobs.get(key)

    def end(self, job: LongJob) -> None:
        """Stop the job (its cgroup removed) and forget it."""
        for k in [k for k, j in self._jobs.items() if j is job]:
            del self._jobs[k]
        job.stop()

    def end_all(self) -> None:
        """Stop every job (the engine, after the study's close hook); every one is tried."""
        errors = []
        while self._jobs:
            _, job = self._jobs.popitem()
            try:
                job.stop() if isinstance(job, LongJob) else job.remove()
            except Exception as exc:        # the others still end; the first error is raised after
                errors.append(exc)
        if errors:
            raise errors[0]

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self):
        return iter(list(self._jobs.values()))

