"""Child cgroups under the caller's own cgroup: memory and blkio/io limits.

Supports cgroup v1 (per-controller hierarchies) and v2 (unified). A Cgroup is
always created below the cgroup this process is in (read from
/proc/self/cgroup), never at the hierarchy root, and always removed: on context
exit, at interpreter exit, and on SIGTERM/SIGINT (converted to exceptions so
`finally` blocks run). Processes join with `join(procs_files)` from inside the
child (no race with work the child starts) or `Cgroup.add(pid)`.
"""
from __future__ import annotations

import atexit
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from .cgroup_readings import CgroupReadings
from .cgroup_tree import (V1_THROTTLE_FILES, CgroupUnavailable, controller_dir, inherited_v1_limits, own_dirs,
                          read_io_max, read_v1_limit, tracking_dir)
from .pidstat import running

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "storagebrief-"
_live: dict[str, "Cgroup"] = {}


class CgroupLimitError(ValueError):
    """The kernel stored a different limit from the one written (a value it cannot hold): running
    on would measure a device other than the profile, so the run stops with the numbers."""


@dataclass(frozen=True)
class IoLimits:
    device: tuple[int, int]
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None


def join(procs_files: list[str]) -> None:
    """Move the calling process into a cgroup (call first thing in a child)."""
    for f in procs_files:
        with open(f, "w") as fh:
            fh.write(str(os.getpid()))


class Cgroup(CgroupReadings):
    """One child cgroup (across the controllers it needs), removed on exit."""

    def __init__(self, name: str, memory_limit_bytes: int | None = None, io: IoLimits | None = None):
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        self.name = f"{PREFIX}{safe}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.memory_limit_bytes = memory_limit_bytes
        self.io = io
        self.dirs: dict[str, tuple[int, Path]] = {}  # controller -> (version, dir)
        self.owner_pid = os.getpid()

    # -- lifecycle --------------------------------------------------------
    def create(self) -> "Cgroup":
        """Create the cgroup in each hierarchy its limits need; with no limits at all, one cgroup in a
        hierarchy that only holds processes (tracking_dir): a run's processes, found and killed together."""
        wanted = (["memory"] if self.memory_limit_bytes is not None else []) + (["blkio"] if self.io else [])
        try:
            for c in wanted or ["track"]:
                version, parent = tracking_dir() if c == "track" else controller_dir(c)
                if version == 2 and c != "track":
                    self._enable_v2(parent, "io" if c == "blkio" else c)
                d = parent / self.name
                if not d.exists():
                    d.mkdir()
                self.dirs[c] = (version, d)
            _live[self.name] = self
            _install_handlers()
            if self.memory_limit_bytes is not None:
                self._set_memory(self.memory_limit_bytes)
            if self.io:
                self._set_io(self.io)
        except PermissionError as exc:
            self.remove()
            raise CgroupUnavailable(f"cannot create or configure a child cgroup ({exc.filename}): "
                                    "permission denied (run as root or delegate the cgroup)") from None
        except OSError as exc:
            self.remove()
            raise CgroupUnavailable(f"cgroup setup failed: {exc}") from None
        except BaseException:          # CgroupLimitError, a signal: never leave the directory behind
            self.remove()
            raise
        return self

    def __enter__(self) -> "Cgroup":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()

    applied_memory_limit: int | None = None     # the memory limit last written (create, set_memory_limit)

    # A run's own cgroup (procs.Scope) kills what is left in it instead of moving it to the parent:
    # a process still there when the run ends is an orphan, and in the parent nothing would find it.
    kill_on_remove = False

    def kill(self, timeout_s: float = 10.0) -> int:
        """SIGKILL every process in the cgroup (never this one) until none runs; returns how many."""
        killed, deadline = set(), time.monotonic() + timeout_s
        while True:
            left = [p for p in self.pids() if p != os.getpid() and running(p)]
            if not left:
                return len(killed)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                return len(killed)
            time.sleep(0.02)

    def remove(self) -> None:
        """Move any remaining processes to the parent (kill_on_remove: kill them) and delete the cgroup."""
        if self.kill_on_remove and self.dirs:
            self.kill()
        for c, (version, d) in list(self.dirs.items()):
            if not d.exists():
                continue
            parent_procs = d.parent / "cgroup.procs"
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    pids = (d / "cgroup.procs").read_text().split()
                except OSError:
                    pids = []
                for pid in pids:
                    try:
                        parent_procs.write_text(pid)
                    except OSError:
                        pass
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
        self.dirs.clear()
        _live.pop(self.name, None)

    # -- membership -------------------------------------------------------
    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for _, d in self.dirs.values()]

    def add(self, pid: int) -> None:
        for f in self.procs_files:
            Path(f).write_text(str(pid))

    def pids(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs_files:
            try:
                out.update(int(p) for p in Path(f).read_text().split())
            except OSError:
                pass
        return sorted(out)

    # -- limits -----------------------------------------------------------
    @staticmethod
    def _enable_v2(parent: Path, controller: str) -> None:
        sub = parent / "cgroup.subtree_control"
        if controller in sub.read_text().split():
            return
        try:
            sub.write_text(f"+{controller}")
        except OSError as exc:
            raise CgroupUnavailable(
                f"cgroup v2: cannot enable '{controller}' for children of {parent} ({exc.strerror}); "
                "a v2 cgroup holding processes cannot delegate controllers") from None

    def set_io(self, io: IoLimits) -> None:
        """Throttle a live group from now on (one made with IoLimits(device) alone, or unthrottled by
        clear_io_limits): a training job's start-up reads its libraries unthrottled, its measured phase
        meets the profile; a long-lived job is throttled only while a run measures it."""
        if "blkio" not in self.dirs:
            raise CgroupUnavailable(f"cgroup {self.name} has no io controller to throttle")
        try:
            self._set_io(io)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot throttle cgroup {self.name}: {exc}") from None
        self.io = io

    def set_memory_limit(self, limit: int) -> None:
        """Change a live cgroup's memory limit (lower than its usage: the kernel reclaims to fit, or OSError)."""
        if "memory" in self.dirs:
            self._set_memory(limit)

    def clear_io_limits(self, io: IoLimits) -> None:
        """Undo set_io: the device unthrottled again (v1: an ancestor's limit copied stays)."""
        if "blkio" not in self.dirs:
            return
        version, d = self.dirs["blkio"]
        dev = f"{io.device[0]}:{io.device[1]}"
        if version == 2:
            (d / "io.max").write_text(f"{dev} rbps=max wbps=max riops=max wiops=max")
            return
        inherited = inherited_v1_limits(d.parent, io.device)
        for fname in V1_THROTTLE_FILES:
            (d / fname).write_text(f"{dev} {int(inherited.get(fname) or 0)}")

    def _set_memory(self, limit: int) -> None:
        self.applied_memory_limit = limit        # what the sampler of other work reads (core/interference.py)
        version, d = self.dirs["memory"]
        if version == 1:
            (d / "memory.limit_in_bytes").write_text(str(limit))
        else:
            (d / "memory.max").write_text(str(limit))
            try:
                (d / "memory.swap.max").write_text("0")
            except OSError:
                pass

    def _set_io(self, io: IoLimits) -> None:
        version, d = self.dirs["blkio"]
        dev = f"{io.device[0]}:{io.device[1]}"
        if version == 1:
            # v1 throttles are not inherited: a child of a throttled cgroup reads at full speed
            # (measured: 498 MB/s under a 50 MB/s parent). Copy the tightest ancestor limit.
            inherited = inherited_v1_limits(d.parent, io.device)
            self.inherited_io = {k: v for k, v in inherited.items() if v}
            for fname, value in (("blkio.throttle.read_bps_device", io.read_bps),
                                 ("blkio.throttle.write_bps_device", io.write_bps),
                                 ("blkio.throttle.read_iops_device", io.read_iops),
                                 ("blkio.throttle.write_iops_device", io.write_iops)):
                value = min(filter(None, (value, inherited.get(fname))), default=None)
                if value:
                    (d / fname).write_text(f"{dev} {int(value)}")
                    # The kernel takes some values it cannot hold without an error (IOPS are 32-bit:
                    # 4294967297 is stored as 1): what it stores is what the run gets.
                    stored = read_v1_limit(d / fname, io.device)
                    if stored != int(value):
                        raise CgroupLimitError(_mismatch(fname, dev, int(value), stored))
        else:
            parts = [(k, int(v)) for k, v in (("rbps", io.read_bps), ("wbps", io.write_bps),
                                              ("riops", io.read_iops), ("wiops", io.write_iops)) if v]
            if parts:  # no limits: an accounting-only group (io.stat still counts)
                (d / "io.max").write_text(f"{dev} {' '.join(f'{k}={v}' for k, v in parts)}")
                stored = read_io_max(d / "io.max", io.device)
                for k, v in parts:
                    if stored.get(k) != v:
                        raise CgroupLimitError(_mismatch(f"io.max {k}", dev, v, stored.get(k)))

    inherited_io: dict[str, int] = {}


def _mismatch(what: str, dev: str, wanted: int, stored: int | None) -> str:
    got = "no limit" if stored is None else f"{stored:,}"
    return (f"cgroup limit {what} on {dev}: wrote {wanted:,} but the kernel stored {got}; the profile's value "
            "is outside what the kernel can hold (see DeviceProfile: bytes/s 1..2^64-2, IOPS 1..2^32-2)")


def live_cgroups() -> list[str]:
    return list(_live)


def leftover_dirs(owner_pid: int | None = None) -> list[Path]:
    """Child cgroups of this package still present under our own cgroups (for tests).

    owner_pid limits the search to cgroups created by that process (names carry it),
    so concurrent runs of other processes do not count.
    """
    found = []
    pattern = f"{PREFIX}*-{owner_pid}-*" if owner_pid else f"{PREFIX}*"
    for d in own_dirs():       # every hierarchy: run cgroups without limits live in pids or v2
        found += [p for p in d.glob(pattern) if p.is_dir()]
    return found


def _cleanup_all() -> None:
    # Forked children inherit _live; only the creating process removes its cgroups.
    # Block traces first: switching tracing off must not wait for anything else.
    from . import blocktrace
    blocktrace.close_all()
    for group in list(_live.values()):
        if group.owner_pid == os.getpid():
            group.remove()


_handlers_installed = False
_handler_pid = os.getpid()
# Closing the terminal (SIGHUP) ends a run like SIGTERM: cgroups removed, no half row.
TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


_pending_signal: int | None = None


def _raise_on_signal(signum, frame):
    global _pending_signal
    if os.getpid() != _handler_pid:  # a forked child: default behaviour
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)
    _pending_signal = signum
    _cleanup_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    """SIGTERM/SIGHUP/SIGINT remove our cgroups before the process ends (main thread only)."""
    global _handlers_installed, _handler_pid
    if _handlers_installed:
        return
    _handler_pid = os.getpid()
    atexit.register(_cleanup_all)
    try:
        for sig in TERMINATING_SIGNALS:
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _raise_on_signal)
        # Ctrl-C stays a KeyboardInterrupt, but is remembered: one that lands inside os.fork's
        # at-fork callbacks is swallowed, and the run would go on to the end. (A Jupyter kernel's
        # own SIGINT handler is left alone.)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _raise_on_signal)
        _handlers_installed = True
    except ValueError:  # not in the main thread: atexit and context managers still apply
        pass


def raise_pending_signal() -> None:
    """Re-raise a signal whose exception Python swallowed (one that landed inside os.fork's
    at-fork callbacks is only 'ignored'), so the run still stops as the signal asked."""
    if _pending_signal is not None and os.getpid() == _handler_pid:
        if _pending_signal == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + _pending_signal)


def install_handlers() -> None:
    """Called by the sweep engine at the start of every sweep, before anything is created; a
    signal remembered from an earlier sweep in this process (one the caller caught) is forgotten."""
    global _pending_signal
    _pending_signal = None
    _install_handlers()
