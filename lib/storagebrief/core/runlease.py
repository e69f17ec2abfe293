"""Whether a run folder on a shared store (an external S3 bucket) belongs to a run that is gone.

A hostname and a PID prove nothing there: two hosts share a name, a container takes its host's name, a
process in another PID namespace (or hidden by hidepid) is invisible in this /proc while it runs. So the
live run renews a lease (it rewrites its marker every RENEW_S), and a folder is a dead run's only when
  * its lease expired by the store's own clock: the marker's LastModified against the Date of a fresh
    response from the store (no host's clock is compared with another's), or
  * its marker was written on this machine, in this boot and this PID namespace (machine-id, boot_id,
    the /proc/self/ns/pid inode) and that process is provably gone: kill(pid, 0) finds no such process,
    or the PID now names a process started later.
A marker without that identity (written before it existed) is judged by its lease alone.
"""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from .pidstat import start_ticks

LEASE_S = 600       # a killed run's folder is left this long (by the store's clock), then a later run removes it
RENEW_S = 30        # the live run rewrites its marker this often: 20 renewals a lease, so a slow store survives


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def identity() -> dict:
    """This process's machine, boot and PID namespace (empty strings where unknown: then never 'the same')."""
    try:
        st = os.stat("/proc/self/ns/pid")
        pid_ns = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        pid_ns = ""
    return {"machine_id": _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id"),
            "boot_id": _read("/proc/sys/kernel/random/boot_id"), "pid_ns": pid_ns}


def marker_doc(owner: str) -> dict:
    """What a run's marker says: who wrote it (`owner`: '<pid>:<start ticks>'), where, and its lease."""
    return {"host": socket.gethostname(), "owner": owner, "tool": "storagebrief", **identity(), "lease_s": LEASE_S}


def same_namespace(doc: dict) -> bool:
    """The marker was written on this machine, in this boot and this PID namespace."""
    mine = identity()
    return all(mine[k] and doc.get(k) == mine[k] for k in ("machine_id", "boot_id", "pid_ns"))


def process_gone(owner: str) -> bool:
    """The '<pid>:<ticks>' process (of this PID namespace) has provably ended; unsure is alive."""
    pid, _, ticks = str(owner).partition(":")
    if not pid.isdigit() or int(pid) <= 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass             # another user's process: running (hidepid may hide its /proc entry)
    now = start_ticks(int(pid))
    return now is not None and ticks.split(":", 1)[0].isdigit() and now != int(ticks.split(":", 1)[0])


def lease_of(doc: dict) -> float:
    """The marker's lease, never shorter than ours (a run with a longer lease is not cut short)."""
    try:
        lease = float(doc.get("lease_s", LEASE_S))
    except (TypeError, ValueError):
        lease = LEASE_S
    return max(LEASE_S, lease) if lease == lease else LEASE_S      # NaN: ours


def why_dead(doc: dict, age_s: float | None) -> str | None:
    """Why the run that wrote `doc` is gone, or None when it may be running. `age_s`: seconds since the marker
    was last written, by the store's clock (None: unknown)."""
    if age_s is not None and age_s > lease_of(doc):
        return f"its lease expired ({age_s:.0f} s since its marker was renewed; lease {lease_of(doc):.0f} s)"
    if same_namespace(doc) and process_gone(doc.get("owner", "")):
        return f"its process {doc.get('owner', '').split(':')[0]} on this machine has ended"
    return None


class Renewal:
    """Calls `renew()` every `every_s` seconds on a daemon thread until stop(), which waits for it: the lease is
    never renewed after its run closed (nor after the process ended: a daemon thread dies with it, and a forked
    child has no copy of it)."""

    def __init__(self, renew, every_s: float | None = None):
        self._renew, self.every_s = renew, RENEW_S if every_s is None else every_s
        self._stop = threading.Event()
        self.failures = 0
        self._thread = threading.Thread(target=self._loop, name="storagebrief-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._renew()
            except Exception:   # noqa: BLE001 -- a failed renewal is retried at the next tick; the run's calls say why
                self.failures += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
