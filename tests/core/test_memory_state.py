"""core.memory_state (issue 45): doctor says whether this machine hands free pages back to its host, read from
fixture files standing in for /proc/cmdline, the virtio-balloon driver's sysfs folder and the page_reporting
module's parameters; prefault writes and deletes a scratch file of the bytes asked (no more than the kernel
keeps dirty before writing back), leaving nothing behind."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conftest import needs_root
from storagebrief.core import inventory, memory_state

# the development VM's negotiated features: bit 5 (VIRTIO_BALLOON_F_REPORTING) set
REPORTING_FEATURES = "0110010100000000000000000000000010000000000000000000000000000000"
PLAIN_FEATURES = "0110000000000000000000000000000010000000000000000000000000000000"


def _machine(root: Path, features: str | None, cmdline: str = "console=ttyS0 quiet", module: dict | None = None):
    (root / "cmdline").write_text(cmdline + "\n")
    balloon = root / "virtio_balloon"
    balloon.mkdir()
    (balloon / "bind").write_text("")                  # the driver folder's own files are not devices
    if features is not None:
        (balloon / "virtio0").mkdir()
        (balloon / "virtio0" / "features").write_text(features + "\n")
    params = root / "page_reporting"
    params.mkdir()
    for k, v in (module or {}).items():
        (params / k).write_text(f"{v}\n")
    return {"cmdline": root / "cmdline", "balloon": balloon, "module": params}


def test_a_reporting_balloon_is_seen_with_its_order_and_total(tmp_path):
    paths = _machine(tmp_path, REPORTING_FEATURES, "quiet page_reporting.page_reporting_order=11 panic=1",
                     {"page_reporting_order": 9, "reported_kib": 105192348, "passes": 2095})
    r = memory_state.free_page_reporting(**paths)
    assert r.reports and r.devices == ("virtio0",) and r.order == 9 and r.reported_kib == 105192348
    line = r.line()
    assert line.startswith("yes: virtio0 (virtio-balloon REPORTING)") and "2 MiB and up" in line, line
    assert "100.3 GiB since boot" in line and "host fault per page" in line and "docs/pitfalls.md" in line
    assert memory_state.reporting_passes(paths["module"]) == 2095


def test_the_order_comes_from_the_command_line_when_the_module_says_nothing(tmp_path):
    paths = _machine(tmp_path, REPORTING_FEATURES, "quiet page_reporting.page_reporting_order=11")
    r = memory_state.free_page_reporting(**paths)
    assert r.reports and r.order == 11 and "8 MiB and up" in r.line() and r.reported_kib is None
    assert memory_state.reporting_passes(paths["module"]) is None


@pytest.mark.parametrize("features, why", [
    (None, "no virtio-balloon device"),
    (PLAIN_FEATURES, "virtio-balloon virtio0 without the REPORTING feature"),
    ("01", "virtio-balloon virtio0 without the REPORTING feature"),       # a short, odd features file
])
def test_no_reporting_is_said_plainly(tmp_path, features, why):
    r = memory_state.free_page_reporting(**_machine(tmp_path, features))
    assert not r.reports and r.line() == f"no ({why})"


def test_nothing_there_at_all_is_no_crash(tmp_path):
    r = memory_state.free_page_reporting(tmp_path / "none", tmp_path / "none2", tmp_path / "none3")
    assert r.line() == "no (no virtio-balloon device)" and memory_state.reporting_passes(tmp_path) is None


@pytest.mark.parametrize("features, starts", [(REPORTING_FEATURES, "yes: virtio0"), (None, "no (")])
def test_doctor_prints_the_line_both_ways(tmp_path, monkeypatch, features, starts):
    paths = _machine(tmp_path, features, module={"page_reporting_order": 9})
    monkeypatch.setattr(memory_state, "CMDLINE", paths["cmdline"])
    monkeypatch.setattr(memory_state, "BALLOON_DRIVER", paths["balloon"])
    monkeypatch.setattr(memory_state, "REPORTING_MODULE", paths["module"])
    line = next(x for x in inventory.doctor_lines() if x.startswith("free-page reporting "))
    assert line.split(" ", 3)[-1].lstrip(". ").startswith(starts), line


def test_prefault_writes_and_deletes_the_bytes_asked_in_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_state, "REPORTING_MODULE", tmp_path / "no-module")    # passes not counted: no wait
    seen = []
    real_write = memory_state.os.write

    def count(fd, data):
        seen.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(memory_state.os, "write", count)
    folder = tmp_path / "f"
    folder.mkdir()
    p = memory_state.prefault(folder, (20 << 20) + 5)
    assert p.method == "scratch file" and p.bytes == (20 << 20) + 5 and sum(seen) == p.bytes
    assert list(folder.iterdir()) == [] and p.seconds > 0 and p.waited_s == 0
    assert p.describe(0.25).startswith("scratch file of 21 MB written, held until a free-page reporting pass")
    assert p.describe(0.25).endswith("deleted in the folder, 0.25 s before the clock")


def _open_scratch() -> list[str]:
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if memory_state.SCRATCH_PREFIX in target:
            out.append(target)
    return out


def test_prefault_holds_its_pages_until_the_next_reporting_pass(tmp_path, monkeypatch):
    module = tmp_path / "page_reporting"
    module.mkdir()
    (module / "passes").write_text("41\n")
    monkeypatch.setattr(memory_state, "REPORTING_MODULE", module)
    held = []

    def a_pass_later():
        time.sleep(0.3)
        held.append(_open_scratch())              # still open (deleted) while the pass has not come
        (module / "passes").write_text("42\n")

    folder = tmp_path / "f"
    folder.mkdir()
    threading.Thread(target=a_pass_later, daemon=True).start()
    p = memory_state.prefault(folder, 1 << 20, settle_s=10)
    assert held and len(held[0]) == 1 and held[0][0].endswith("(deleted)"), held
    assert 0.25 < p.waited_s < 5 and p.seconds >= p.waited_s and _open_scratch() == []
    # the reporter idle: no pass within settle_s, then released
    p = memory_state.prefault(folder, 1 << 20, settle_s=0.2)
    assert 0.2 <= p.waited_s < 2 and list(folder.iterdir()) == []


def test_prefault_stops_at_what_the_kernel_keeps_dirty(tmp_path, monkeypatch):
    vm = tmp_path / "vm"
    vm.mkdir()
    (vm / "dirty_background_bytes").write_text("0\n")
    (vm / "dirty_background_ratio").write_text("10\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemAvailable:    40960 kB\n")
    assert memory_state.unwritten_room(vm, meminfo) == 4096 * 1024
    (vm / "dirty_background_bytes").write_text("1048576\n")
    assert memory_state.unwritten_room(vm, meminfo) == 1 << 20
    monkeypatch.setattr(memory_state, "unwritten_room", lambda: 1 << 20)
    monkeypatch.setattr(memory_state, "REPORTING_MODULE", tmp_path / "no-module")
    folder = tmp_path / "f"
    folder.mkdir()
    assert memory_state.prefault(folder, 64 << 20).bytes == 1 << 20 and list(folder.iterdir()) == []


@needs_root("mounts a small tmpfs to fill")
def test_prefault_on_a_full_filesystem_prepares_what_fits_and_raises_nothing(tmp_path, monkeypatch, small_fs):
    monkeypatch.setattr(memory_state, "REPORTING_MODULE", tmp_path / "no-module")
    st = os.statvfs(small_fs)
    room = st.f_bavail * st.f_frsize
    p = memory_state.prefault(small_fs, room + (64 << 20))
    assert 0 < p.bytes <= room and [x for x in small_fs.iterdir() if x.name.startswith(".storagebrief-")] == []
