"""The memory a buffered write lands in, made alike for every writer that is compared (issue 45).

On a VM with free-page reporting (virtio-balloon REPORTING; `page_reporting.page_reporting_order` on the
kernel command line) the guest hands free blocks of 2^order pages back to the host a moment after they
are freed; the next write into such a page costs a host fault per page. Measured on the development VM:
a 512 MiB buffered write() ran at 3.4-3.7 GB/s right after a cached 512 MiB file was deleted, and at
0.57-0.80 GB/s after a 5 s wait, so whichever side of a comparison reused just-freed pages won.

`prefault(folder, nbytes)` gives a writer the hot state just before its clock: a scratch file of
`nbytes` is written into the page cache in the writer's own folder and deleted (it is unlinked as soon
as it is made, so nothing outlives a killed run; its dirty pages are dropped unwritten). The next
buffered write takes those pages, still backed by the host. A same-sized anonymous allocation touched
and freed did not do it here (0.5-0.8 GB/s after it, vs 2.6-4.9 after the scratch file).

`free_page_reporting()` reads whether this machine reports free pages (for `doctor`); its paths are
arguments so that tests can point it at fixture files. A leaf: stdlib only.
"""
from __future__ import annotations

import errno
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PAGE = 4096
REPORTING_FEATURE_BIT = 5          # VIRTIO_BALLOON_F_REPORTING (include/uapi/linux/virtio_balloon.h)
CMDLINE = Path("/proc/cmdline")
BALLOON_DRIVER = Path("/sys/bus/virtio/drivers/virtio_balloon")
REPORTING_MODULE = Path("/sys/module/page_reporting/parameters")
SCRATCH_CHUNK = 8 << 20
SCRATCH_PREFIX = ".storagebrief-prefault-"
REPORTING_DELAY_S = 2.0            # the kernel's PAGE_REPORTING_DELAY: a pass this long after the frees that wake it
SETTLE_S = 2.5                     # no pass within this long: the reporter was idle
PASS_POLL_S = 0.005
DIRTY_BACKGROUND = Path("/proc/sys/vm")


@dataclass(frozen=True)
class Prepared:
    """What was done to the memory before one write: method, bytes, its own seconds, and when it ended
    (CLOCK_MONOTONIC), so that a caller can say how long before its clock it was."""
    method: str                    # "scratch file" | "none"
    bytes: int = 0
    seconds: float = 0.0           # all of it, the wait for a reporting pass included
    ended: float = 0.0
    waited_s: float = 0.0          # of which: held until a reporting pass (or SETTLE_S without one)

    def describe(self, before_s: float | None = None) -> str:
        if self.method == "none":
            return "none"
        gap = f", {before_s:.2f} s before the clock" if before_s is not None else ""
        return (f"scratch file of {self.bytes / 1e6:,.0f} MB written, held until a free-page reporting pass (at "
                f"most {SETTLE_S:g} s) where the kernel counts them, and deleted in the folder{gap}")


def unwritten_room(vm: Path = DIRTY_BACKGROUND, meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Dirty bytes the kernel holds before it starts writing back (vm.dirty_background_bytes, else
    dirty_background_ratio % of MemAvailable): a larger scratch file would reach the device."""
    try:
        fixed = int((vm / "dirty_background_bytes").read_text())
        if fixed:
            return fixed
        ratio = int((vm / "dirty_background_ratio").read_text())
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 * ratio // 100
    except (OSError, ValueError, IndexError):
        pass
    return None


def prefault(folder: Path, nbytes: int, settle_s: float | None = None) -> Prepared:
    """Write `nbytes` into a scratch file in `folder` and delete it, so that the next buffered write there
    takes pages the host still backs. At most what the kernel keeps dirty before writing back (so the
    scratch bytes never reach the device; a larger save is prepared for its first part only: `bytes` says).
    Made with mkstemp (O_EXCL, O_NOFOLLOW) and unlinked at once: its pages are freed when it is closed,
    unwritten, and a kill leaves nothing behind.

    Where the kernel counts its reporting passes, the file is held open (its pages in use, so no pass can
    take them) until the next pass, or `settle_s` without one (the reporter was idle), and only then closed:
    a pass comes about REPORTING_DELAY_S after the frees that wake it, so the write that follows has that long
    before one can hand its pages back (without the hold, 10 of 22 fio saves and 2 of 22 of the ranks' met a
    pass in benchmarks/checkpoint.py, mostly with a cold write(); with it, 1 of 31 and 0 of 31)."""
    room = unwritten_room()
    want = max(0, int(nbytes))
    if room is not None:
        want = min(want, room)
    settle_s = SETTLE_S if settle_s is None else settle_s
    t = time.perf_counter()
    waited, fd = 0.0, None
    try:
        fd, name = tempfile.mkstemp(prefix=SCRATCH_PREFIX, dir=folder)
        os.unlink(name)
        chunk = memoryview(bytes(min(SCRATCH_CHUNK, max(want, 1))))
        left = want
        while left > 0:
            try:
                left -= os.write(fd, chunk[:min(len(chunk), left)])
            except OSError as exc:     # a full target: prepared as far as it went; the save says it is full
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                break
        want -= left
        waited = _until_a_pass(settle_s)
    finally:
        if fd is not None:
            os.close(fd)               # the last reference: its page-cache pages are freed here, unwritten
    return Prepared("scratch file", want, time.perf_counter() - t, time.monotonic(), waited)


def _until_a_pass(settle_s: float) -> float:
    """Seconds spent waiting for the next reporting pass (at most settle_s); 0 where passes are not counted."""
    first = reporting_passes()
    if first is None or settle_s <= 0:
        return 0.0
    t = time.monotonic()
    while time.monotonic() - t < settle_s and reporting_passes() == first:
        time.sleep(PASS_POLL_S)
    return time.monotonic() - t


NONE = Prepared("none")


def reporting_passes(module: Path | None = None) -> int | None:
    """Free-page reporting passes since boot, where the kernel counts them (this VM's kernel has a `passes`
    parameter; upstream has none): a pass between a preparation and the end of the write it prepared may
    have handed the prepared pages back, so the write's memory state was not the one prepared."""
    return _int(_read((module or REPORTING_MODULE) / "passes"))


# --------------------------------------------------------------------------- does this machine report?
@dataclass(frozen=True)
class Reporting:
    """Whether free pages go back to the host, and the evidence."""
    reports: bool
    devices: tuple[str, ...] = ()          # virtio devices whose balloon negotiated REPORTING
    order: int | None = None               # free blocks of 2^order pages and larger are reported
    reported_kib: int | None = None        # reported since boot, where the kernel counts it
    why_not: str = ""

    def line(self) -> str:
        """doctor's plain-language line."""
        if not self.reports:
            return f"no ({self.why_not})"
        block = f"free blocks of {PAGE * 2 ** self.order / (1 << 20):g} MiB and up" if self.order is not None \
            else "free blocks"
        so_far = f" ({self.reported_kib / (1 << 20):,.1f} GiB since boot)" if self.reported_kib is not None else ""
        return (f"yes: {', '.join(self.devices)} (virtio-balloon REPORTING) hands {block} back to the host a moment "
                f"after they are freed{so_far}  -> a buffered write into them costs a host fault per page; "
                "the checkpoint study and benchmark pre-fault before every save (docs/pitfalls.md)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def free_page_reporting(cmdline: Path | None = None, balloon: Path | None = None,
                        module: Path | None = None) -> Reporting:
    """Read the machine (the module's paths unless given): a virtio-balloon device bound to its driver whose
    negotiated features (sysfs `features`, one '0'/'1' per bit) have REPORTING set; the order from the
    page_reporting module's parameter, else the kernel command line. Nothing here raises: unreadable is
    'not seen'."""
    cmdline, balloon, module = cmdline or CMDLINE, balloon or BALLOON_DRIVER, module or REPORTING_MODULE
    order = _int(_read(module / "page_reporting_order"))
    if order is None:
        m = re.search(r"(?:^|\s)page_reporting\.page_reporting_order=(\d+)", _read(cmdline) or "")
        order = int(m.group(1)) if m else None
    try:
        devices = sorted(d for d in os.listdir(balloon) if d.startswith("virtio"))
    except OSError:
        devices = []
    if not devices:
        return Reporting(False, order=order, why_not="no virtio-balloon device")
    reporting = tuple(d for d in devices
                      if len(bits := _read(balloon / d / "features") or "") > REPORTING_FEATURE_BIT
                      and bits[REPORTING_FEATURE_BIT] == "1")
    if not reporting:
        return Reporting(False, order=order, why_not=f"virtio-balloon {', '.join(devices)} without the REPORTING "
                                                     "feature")
    return Reporting(True, reporting, order, _int(_read(module / "reported_kib")))
