"""Block-event capture for a measured run: a tracefs instance of our own, one device only.

    trace = BlockTrace((254, 0), Path("traces/run.tracefs-raw.gz"), buffer_kib=8192).start()
    ... the measured work ...
    result = trace.stop()      # TraceResult: path, lost events, ...

start() creates /sys/kernel/tracing/instances/storagebrief-trace-<pid>-<nonce> (never the
global buffer), sizes its per-CPU buffer, filters block:block_rq_issue, block_rq_complete
and block_rq_requeue on the device's dev_t and enables them; a reader child copies the
instance's binary ring-buffer pages (per_cpu/cpu*/trace_pipe_raw) into a gzip file (format
below; decoded by characterize --format tracefs-raw). stop() switches the instance off, lets the
reader drain what is buffered, counts lost events (per-CPU `overrun` + `dropped events`)
and removes the instance.

Nothing outlives the run:
  * the Run closes its trace in its close path (also on exceptions);
  * the cgroups signal handlers (SIGTERM/SIGHUP) and atexit call close_all();
  * the reader child watches its parent: when the parent dies (kill -9) it switches the
    instance off and removes it itself;
  * leftovers.remove_leftovers() removes `storagebrief-*` instances whose owner PID is dead
    (both killed), after killing a reader still holding the instance open.

The reader is `python -m storagebrief.core.blocktrace read INSTANCE OUT` (stdlib only, so it
starts in ~50 ms and loads nothing heavy).
"""
from __future__ import annotations

import gzip
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .machine import device_capacity_sectors, host_identity
from .traceformat import EVENTS, dev_t, dev_tuple, file_start, pages_record, sync_record

TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
PREFIX = "storagebrief-trace-"
DRAIN_INTERVAL_S = 0.2       # the reader empties the buffer this often (size the buffer for it)
_live: dict[str, "BlockTrace"] = {}


class TraceUnavailable(RuntimeError):
    """Block tracing cannot run here; the message says why (goes to the notes and the brief)."""


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _mounted_tracefs() -> Path | None:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "tracefs" and os.path.isdir(os.path.join(parts[1], "instances")):
            return Path(parts[1])
    return None


def tracefs_root(mount: bool = True) -> Path:
    """The tracefs mount with block events; as root, mounts tracefs at /sys/kernel/tracing when
    nothing is mounted (the kernel's standard place; what systemd does at boot). Raises
    TraceUnavailable with the reason otherwise."""
    if os.geteuid() != 0:
        raise TraceUnavailable("not root: tracefs block events need root")
    root = _mounted_tracefs()
    if root is None and mount and TRACEFS_DIRS[0].is_dir():
        try:
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS_DIRS[0])], check=True,
                           capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError) as exc:
            raise TraceUnavailable(f"tracefs is not mounted and mounting it failed ({exc})") from None
        root = _mounted_tracefs()
    if root is None:
        raise TraceUnavailable("tracefs is not available (kernel without CONFIG_FTRACE, or not mounted)")
    if not (root / "events" / "block" / "block_rq_issue").is_dir():
        raise TraceUnavailable(f"{root} has no block:block_rq_issue event (kernel without block tracepoints)")
    return root


def availability() -> tuple[bool, str]:
    """(usable, 'yes: <root>' or the reason), without mounting anything (for doctor)."""
    try:
        root = tracefs_root(mount=False)
    except TraceUnavailable as exc:
        if os.geteuid() == 0 and _mounted_tracefs() is None and TRACEFS_DIRS[0].is_dir():
            return True, (f"not mounted yet; runs mount tracefs at {TRACEFS_DIRS[0]} as root "
                          "(or: mount -t tracefs nodev /sys/kernel/tracing)")
        return False, str(exc)
    return True, f"yes: {root} (instances, block_rq_issue/complete)"


@dataclass
class TraceResult:
    path: Path
    lost_events: int
    instance: str
    seconds: float
    bytes_written: int
    reader_rc: int | None


# The reader child imports this module (stdlib only) without the package's __init__, which loads the
# study registry (pydantic, …): 0.25 s of start-up before every traced run, measured, becomes ~0.05 s.
_READER_BOOT = """\
import sys, types
pkg = types.ModuleType("storagebrief"); pkg.__path__ = [sys.argv[1]]; sys.modules["storagebrief"] = pkg
from storagebrief.core import blocktrace
sys.argv = sys.argv[:1] + sys.argv[2:]
sys.exit(blocktrace.main(sys.argv))
"""


class BlockTrace:
    """One capture on one device; start() / stop() / close() (idempotent)."""

    def __init__(self, device: tuple[int, int], out_path: Path, buffer_kib: int = 8192):
        self.device, self.out_path, self.buffer_kib = device, Path(out_path), int(buffer_kib)
        self.owner_pid = os.getpid()
        self.name = f"{PREFIX}{self.owner_pid}-{secrets.token_hex(4)}"
        self.root: Path | None = None
        self.instance: Path | None = None
        self._reader: subprocess.Popen | None = None
        self._t0 = 0.0

    def start(self) -> "BlockTrace":
        self.root = tracefs_root()
        self.instance = self.root / "instances" / self.name
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.instance.mkdir()
        except OSError as exc:
            raise TraceUnavailable(f"cannot create tracefs instance {self.instance}: {exc.strerror}") from None
        _live[self.name] = self
        try:
            _write(self.instance / "tracing_on", "0")
            _write(self.instance / "buffer_size_kb", str(self.buffer_kib))
            for ev in EVENTS:
                d = self.instance / "events" / "block" / ev
                _write(d / "filter", f"dev == {dev_t(*self.device)}")
                _write(d / "enable", "1")
            self._reader = subprocess.Popen(
                [sys.executable, "-S", "-c", _READER_BOOT, str(Path(__file__).resolve().parents[1]),
                 "read", str(self.instance), str(self.out_path), str(self.owner_pid)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True)      # Ctrl-C of the terminal reaches the run, not the reader
            self._wait_reader_ready()
            _write(self.instance / "tracing_on", "1")
            self._t0 = time.monotonic()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_reader_ready(self, timeout_s: float = 10.0) -> None:
        """The reader says 'ready' on stderr once the per-CPU pipes are open and the file has its header."""
        line = b""
        deadline = time.monotonic() + timeout_s
        fd = self._reader.stderr.fileno()
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                line = self._reader.stderr.readline()
                break
            if self._reader.poll() is not None:
                break
        if not line.startswith(b"ready"):
            err = (line + (self._reader.stderr.read() if self._reader.poll() is not None else b"")).decode(errors="replace")
            raise TraceUnavailable(f"block-trace reader did not start: {err.strip() or 'timeout'}")

    def _switch_off(self) -> None:
        if self.instance is not None:
            switch_off(self.instance)

    def lost_events(self) -> int:
        lost = 0
        if self.instance is None:
            return 0
        for stats in sorted((self.instance / "per_cpu").glob("cpu*/stats")):
            try:
                for line in stats.read_text().splitlines():
                    key, _, val = line.partition(":")
                    if key.strip() in ("overrun", "dropped events") and val.strip().isdigit():
                        lost += int(val.strip())
            except OSError:
                continue
        return lost

    def stop(self) -> TraceResult:
        """Switch off, drain, count lost events, remove the instance; the trace file is complete."""
        self._switch_off()
        rc = self._stop_reader()
        lost = self.lost_events()
        self._remove_instance()
        size = self.out_path.stat().st_size if self.out_path.exists() else 0
        return TraceResult(self.out_path, lost, self.name, time.monotonic() - self._t0, size, rc)

    def _stop_reader(self, timeout_s: float = 30.0) -> int | None:
        r, self._reader = self._reader, None
        if r is None:
            return None
        try:
            r.stdin.write(b"stop\n")
            r.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            rc = r.wait(timeout_s)
        except subprocess.TimeoutExpired:
            r.kill()
            rc = r.wait()
        if r.stderr:
            r.stderr.close()
        return rc

    def _remove_instance(self) -> None:
        if self.instance is not None:
            rmdir_instance(self.instance)
        _live.pop(self.name, None)

    def close(self) -> None:
        """Always safe: tracing off, reader stopped, instance removed (keeps the file)."""
        if os.getpid() != self.owner_pid:   # a forked child never touches its parent's trace
            return
        self._switch_off()
        if self._reader is not None:
            self._stop_reader(timeout_s=5.0)
        self._remove_instance()


def close_all() -> None:
    """Signal handlers and atexit: switch off and remove every live trace of this process."""
    for t in list(_live.values()):
        try:
            t.close()
        except Exception:
            pass


def instances(root: Path | None = None) -> list[Path]:
    """Our instances present on this machine (any owner)."""
    root = root or _mounted_tracefs()
    if root is None:
        return []
    try:
        return sorted(p for p in (root / "instances").glob(f"{PREFIX}*") if p.is_dir())
    except OSError:      # not root: tracefs is not readable, and nothing of ours can be there
        return []


def owner_pid(name: str) -> int | None:
    parts = name[len(PREFIX):].split("-") if name.startswith(PREFIX) else []
    return int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None


def switch_off(inst: Path) -> None:
    """Stop recording in an instance and disable its events (missing files are fine)."""
    for f in [inst / "tracing_on"] + [inst / "events" / "block" / ev / "enable" for ev in EVENTS]:
        try:
            _write(f, "0")
        except OSError:
            pass


def rmdir_instance(inst: Path, tries: int = 50) -> str | None:
    """Remove an instance (retrying while a reader closes it); None when gone, else the error."""
    err = None
    for _ in range(tries):
        try:
            inst.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:      # EBUSY: a reader still has a pipe of it open
            err = exc.strerror
            time.sleep(0.02)
    return err


def remove_instance(inst: Path) -> str:
    """Switch a (leftover) instance off, kill any process still reading it, remove it."""
    switch_off(inst)
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if str(inst).encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except OSError:
            continue
    err = rmdir_instance(inst, tries=100)
    if err:
        return f"could not remove leftover tracefs instance {inst}: {err}"
    return f"removed leftover tracefs instance {inst}" + (f" (killed {killed} reader(s))" if killed else "")


# -- the raw trace file (its format: core/traceformat.py) ---------------------------------------

def _now_ns(instance: Path) -> int | None:
    """The instance's trace clock now (per_cpu/cpu0/stats 'now ts', microseconds)."""
    try:
        for line in (instance / "per_cpu" / "cpu0" / "stats").read_text().splitlines():
            if line.startswith("now ts:"):
                sec, _, usec = line.split(":", 1)[1].strip().partition(".")
                return int(sec) * 1_000_000_000 + int(usec.ljust(6, "0")[:6]) * 1000
    except (OSError, ValueError):
        pass
    return None


def traced_device(instance: Path) -> tuple[int, int] | None:
    """The device an instance's block events are filtered on ('dev == <dev_t>'), if any."""
    try:
        m = re.search(r"\bdev == (\d+)", (instance / "events" / "block" / EVENTS[0] / "filter").read_text())
    except OSError:
        return None
    return dev_tuple(int(m.group(1))) if m else None


def raw_header(instance: Path) -> dict:
    """What a decoder needs to read the pages (sizes, clock and the event formats) and to place
    requests in the device's address space anywhere (device, capacity, host)."""
    root = instance.parent.parent
    sub = instance / "buffer_subbuf_size_kb"        # kernels >= 6.8 may use sub-buffers > 1 page
    try:
        page = int(sub.read_text()) * 1024 if sub.exists() else os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        page = os.sysconf("SC_PAGE_SIZE")
    clock = "local"
    try:
        clock = next(w.strip("[]") for w in (instance / "trace_clock").read_text().split() if w.startswith("["))
    except (OSError, StopIteration):
        pass
    events = {}
    for ev in EVENTS:
        fmt = (instance / "events" / "block" / ev / "format")
        if not fmt.exists():
            fmt = root / "events" / "block" / ev / "format"
        try:
            events[ev] = fmt.read_text()
        except OSError:
            continue
    hp = instance / "events" / "header_page"
    device = traced_device(instance)
    extra = {"host": host_identity()}
    if device is not None:
        extra["device"] = list(device)
        cap = device_capacity_sectors(device)
        if cap:
            extra["capacity_sectors"] = cap
    return {"page_size": page, "clock": clock, "kernel": os.uname().release,
            "header_page": (hp if hp.exists() else root / "events" / "header_page").read_text(),
            "events": events, **extra}


# -- the reader child ------------------------------------------------------------------------

def _read_loop(instance: Path, out: Path, parent: int) -> int:
    stop = {"flag": False}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    header = raw_header(instance)
    page = header["page_size"]
    cpus = sorted(int(d.name[3:]) for d in (instance / "per_cpu").glob("cpu*") if d.name[3:].isdigit())
    fds = {c: os.open(instance / "per_cpu" / f"cpu{c}" / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
           for c in cpus}
    header["cpus"] = cpus
    orphan = False
    with gzip.open(out, "wb", compresslevel=1) as gz:
        gz.write(file_start(header))
        gz.flush()          # the magic on disk at once: a killed run's trace is still recognised as ours (outdir)
        sys.stderr.write("ready\n")
        sys.stderr.flush()
        stdin_open = True
        while True:
            # wake 5 times a second, not per event: a wake-up per event costs the traced run
            if stdin_open:
                r, _, _ = select.select([0], [], [], DRAIN_INTERVAL_S)
            else:
                r = []
                time.sleep(DRAIN_INTERVAL_S)
            if 0 in r:
                msg = os.read(0, 64)
                if not msg.startswith(b"stop"):
                    orphan = True           # stdin closed without 'stop': the run died
                stdin_open = False
                stop["flag"] = True
            if os.getppid() != parent:
                orphan = stop["flag"] = True
            now = _now_ns(instance)
            if now is not None:
                gz.write(sync_record(now))
            for cpu, fd in fds.items():
                pages = []
                while True:
                    try:
                        chunk = os.read(fd, page)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    pages.append(chunk)
                if pages:
                    data = b"".join(pages)
                    gz.write(pages_record(cpu, data))
            if stop["flag"]:
                break
    for fd in fds.values():
        os.close(fd)
    if orphan:      # the run is gone: nobody else will switch the instance off and remove it
        switch_off(instance)
        rmdir_instance(instance)
    return 0


def main(argv: list[str]) -> int | str:
    if len(argv) == 5 and argv[1] == "read":
        return _read_loop(Path(argv[2]), Path(argv[3]), int(argv[4]))
    return "usage: python -m storagebrief.core.blocktrace read INSTANCE OUT PARENT_PID"


if __name__ == "__main__":
    sys.exit(main(sys.argv))
