"""Children never outlive the run that started them, even after kill -9 of the parent.

A run's external processes (fio, the busy load, mpirun) start through a Scope, which gives
them three nets, strongest first:

  * a cgroup, where the machine allows one (root): the child joins it before exec and
    everything it forks stays inside, fio's job processes included; Scope.kill() empties it and
    the leftovers sweep empties a dead owner's cgroup (its name carries the owner's PID);
  * an owner marker in the environment, STORAGEBRIEF_OWNER=<pid>:<start ticks>:<scope>,
    inherited by every descendant and readable in /proc/<pid>/environ by the same user: without
    cgroups the sweep still finds a dead run's processes, even those that left the process group
    (fio's job process calls setsid(), so killing fio's group misses it); the sweep kills only
    processes of this user (another user can put any marker in their own environment);
  * PR_SET_PDEATHSIG on the direct child and a session of its own (the engine decides its end).
    PDEATHSIG alone is not enough: it is not inherited across fork, and a fio job forked just
    before fio was killed waits on fio's start-up futex forever (issue 20).

Scratch folders (`.storagebrief-tmp-<what>-<pid>-<nonce>`) keep a run's temporary files in its
own output or target folder; they are removed when the run ends (also on SIGTERM / Ctrl-C, via
atexit) and, after kill -9, by the next run (remove_dead_scratch) once the owner is gone.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from .pidstat import running, start_ticks, stat_fields  # noqa: F401  (procs.running: the old name stays)

PR_SET_PDEATHSIG = 1
OWNER_ENV = "STORAGEBRIEF_OWNER"
SCRATCH_PREFIX = ".storagebrief-tmp-"


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux prctl).

    Call first thing in a forked child, or as a subprocess preexec_fn. Returns False where
    prctl is unavailable (the run's cgroup sweep still catches leftovers). If the parent is
    already gone when this runs, exit at once. Not inherited by the child's own children:
    start external tools through a Scope."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and os.getppid() != parent:   # the parent died before prctl took effect
        os._exit(128 + int(sig))
    return ok


def reap(procs, timeout_s: float) -> None:
    """Join every multiprocessing child, killing any that outlive `timeout_s`."""
    for pr in procs:
        pr.join(timeout=timeout_s)
        if pr.is_alive():
            pr.kill()
            pr.join()


# --------------------------------------------------------------------------- /proc
def owner_token(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{pid}:{start_ticks(pid)}"


def owner_alive(token: str) -> bool:
    """The process a '<pid>:<ticks>' token names is still running (the same one, not a reuse)."""
    pid, _, ticks = token.partition(":")
    if not pid.isdigit():
        return True                       # not ours to judge: leave it alone
    return running(int(pid)) and str(start_ticks(int(pid))) == ticks.split(":", 1)[0]


def marker(pid: int) -> str | None:
    """The STORAGEBRIEF_OWNER value a process was started with, or None."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = OWNER_ENV.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode(errors="replace")
    return None


def marked_processes() -> dict[int, str]:
    """Every running process (other than this one) that carries an owner marker."""
    out, me = {}, os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        m = marker(int(d.name))
        if m is not None and running(int(d.name)):
            out[int(d.name)] = m
    return out


def group_members(pgid: int) -> list[int]:
    """Running processes in process group pgid."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            f = stat_fields(int(d.name))
            if f and len(f) > 2 and f[0] not in ("Z", "X") and int(f[2]) == pgid:
                out.append(int(d.name))
    return out


def kill_all(pids) -> int:
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except OSError:
            pass
    return n


def _same_user(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        return False


def kill_orphans() -> list[str]:
    """Kill processes whose owner marker names a run that is gone (kill -9, crash): they were
    started by that run, so nothing else will end them. One line per process, for notes."""
    lines = []
    for pid, token in marked_processes().items():
        if owner_alive(token) or not _same_user(pid):
            continue              # a live run's, or another user's (who can set any environment)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            cmd = "?"
        if kill_all([pid]):
            lines.append(f"killed orphaned process {pid} ({cmd.strip()}) of dead process "
                         f"{token.split(':', 1)[0]}")
    return lines


# --------------------------------------------------------------------------- scopes
class Scope:
    """The external processes one part of a run starts, ended together by kill()."""

    def __init__(self, name: str, group=None, own_group: bool = False, join: list[str] | None = None):
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80]
        self.token = f"{owner_token()}:{safe}-{time.monotonic_ns() % 10**9}"
        self.group, self._own_group = group, own_group
        self.join = list(join or [])     # cgroups its processes also join that it does not own (a run's throttle)
        self.why_no_cgroup: str | None = None
        self.procs: list[subprocess.Popen] = []
        self.pgids: set[int] = set()

    @classmethod
    def tracked(cls, name: str) -> "Scope":
        """A scope with a cgroup of its own (no limits: it only holds the processes) where the
        machine allows one; otherwise the marker and the process group alone (why_no_cgroup says why)."""
        from . import cgroups
        try:
            group = cgroups.Cgroup(name).create()
        except cgroups.CgroupUnavailable as exc:
            scope = cls(name)
            scope.why_no_cgroup = str(exc)
            return scope
        group.kill_on_remove = True
        return cls(name, group, own_group=True)

    def env(self, base: dict | None = None) -> dict:
        return {**(os.environ if base is None else base), OWNER_ENV: self.token}

    def preexec(self, sig: int = signal.SIGKILL):
        """For Popen(preexec_fn=...): die with the parent, then join the scope's cgroup before exec."""
        from . import cgroups
        files = (list(self.group.procs_files) if self.group is not None else []) + self.join

        def inside():
            die_with_parent(sig)
            if files:
                cgroups.join(files)
        return inside

    def popen(self, argv: list[str], pdeathsig: int = signal.SIGKILL, env: dict | None = None,
              **kw) -> subprocess.Popen:
        """Popen in its own session (a terminal's Ctrl-C reaches the run, which stops it), marked,
        in the cgroup, dying with us."""
        kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(argv, env=self.env(env), preexec_fn=self.preexec(pdeathsig), **kw)
        self.procs.append(proc)
        if kw["start_new_session"]:
            self.pgids.add(proc.pid)
        return proc

    def members(self) -> list[int]:
        """Running processes of this scope: its cgroup, its marker, its process groups."""
        pids: set[int] = set()
        if self.group is not None:
            pids.update(self.group.pids())
        pids.update(pid for pid, m in marked_processes().items() if m == self.token)
        for pg in self.pgids:
            pids.update(group_members(pg))
        pids.discard(os.getpid())
        return sorted(p for p in pids if running(p))

    def kill(self, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL everything in the scope until nothing is left; reap our direct children.
        Returns the PIDs that were still there."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.members()
            if not left:
                break
            killed.update(left)
            kill_all(left)
            for p in self.procs:
                p.poll()          # reap, so a killed child does not linger as a zombie
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {left} survived SIGKILL")
            time.sleep(0.02)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        return sorted(killed)

    def close(self) -> None:
        try:
            self.kill()
        finally:
            if self._own_group and self.group is not None:
                self.group.remove()

    def __enter__(self) -> "Scope":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------- scratch folders
_scratch: dict[Path, int] = {}    # scratch folder -> creating PID


def _name_owner(name: str) -> int | None:
    parts = name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def scratch_dir(parent: Path, what: str) -> Path:
    """A new empty folder below `parent` for one run's temporary files, removed at exit (also after
    SIGTERM / Ctrl-C, which end the process through SystemExit / KeyboardInterrupt) or by remove_scratch;
    its name carries our PID so the next run removes it after a kill -9 (remove_dead_scratch)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    safe = "".join(ch if ch.isalnum() or ch in "_." else "_" for ch in what)
    d = parent / f"{SCRATCH_PREFIX}{safe}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    d.mkdir(mode=0o700)
    _scratch[d] = os.getpid()
    _install_atexit()
    return d


def remove_scratch(d: Path | None) -> None:
    if d is None:
        return
    shutil.rmtree(d, ignore_errors=True)
    _scratch.pop(Path(d), None)


def _own_folder(d: Path) -> bool:
    """A real folder (not a symlink) of this user: in a shared parent (/dev/shm) a name of our shape may be
    another user's."""
    try:
        st = d.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def remove_dead_scratch(parent: Path) -> list[str]:
    """Remove the scratch folders below `parent` whose creating process is gone (kill -9): only real
    folders owned by this user."""
    lines = []
    try:
        entries = list(Path(parent).glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return lines
    for d in sorted(entries):
        pid = _name_owner(d.name)
        if pid is None or running(pid) or not _own_folder(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        lines.append(f"removed leftover temporary folder {d} of dead process {pid}")
    return lines


_atexit_done = False


def _remove_own_scratch() -> None:
    for d, pid in list(_scratch.items()):
        if pid == os.getpid():            # forked children inherit the table; the creator removes
            remove_scratch(d)


def _install_atexit() -> None:
    global _atexit_done
    if not _atexit_done:
        atexit.register(_remove_own_scratch)
        _atexit_done = True
