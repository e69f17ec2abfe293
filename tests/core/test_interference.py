"""core/interference.py: what else the machine did while a run ran: the accounting on synthetic counters, the
thresholds, and the run's own work counted as its own on a real process tree."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from storagebrief.core import interference as itf, monitor
from storagebrief.core.interference import Proc, Sample

HZ = itf.HZ


def _s(own=None, kernel=None, stall=None, vm=None) -> Sample:
    return Sample(own or {}, kernel or {}, stall, vm or {})


def test_a_child_reaped_by_its_parent_is_counted_once():
    parent, child = (10, 1), (11, 5)
    a = _s({parent: Proc(1, 100, 0, 0), child: Proc(10, 40, 1000, 0)})
    # the child used 10 more ticks and wrote 500 bytes, ended, and the parent reaped it: its whole 50 ticks moved
    # into the parent's children's counters (cutime) beside the parent's own 5 more
    b = _s({parent: Proc(1, 100 + 5 + 50, 1500, 0)})
    assert itf.own_delta(a, b) == (15, 500, 0)


def test_a_child_whose_parent_ended_too_is_counted_through_the_nearest_ancestor_left():
    top, mid, leaf = (10, 1), (11, 2), (12, 3)
    a = _s({top: Proc(1, 100), mid: Proc(10, 20), leaf: Proc(11, 30)})
    b = _s({top: Proc(1, 100 + 22 + 33)})     # mid reaped leaf (20 + 33), then top reaped mid (+2 of its own)
    assert itf.own_delta(a, b)[0] == 2 + 3


def test_an_orphan_reaped_elsewhere_keeps_what_was_counted_and_a_new_process_counts_from_zero():
    a = _s({(10, 1): Proc(1, 100), (20, 2): Proc(1, 30)})           # 20: reparented to init, then ended
    b = _s({(10, 1): Proc(1, 104), (30, 9): Proc(10, 7, 4096, 8192)})
    assert itf.own_delta(a, b) == (4 + 7, 4096, 8192)


def test_a_process_that_left_ours_still_running_keeps_what_was_counted():
    a = _s({(10, 1): Proc(1, 100), (11, 2): Proc(10, 30), (12, 3): Proc(11, 40)})
    # 11 (a shell) ended, reaped by 10; 12, started in the background by it, runs on under init, not ours
    b = Sample({(10, 1): Proc(1, 100 + 35)}, {}, pids=frozenset({(10, 1), (12, 3)}))
    assert itf.own_delta(a, b)[0] == 5


def test_a_reused_pid_is_another_process():
    a = _s({(10, 1): Proc(1, 500)})
    b = _s({(10, 77): Proc(1, 3)})            # same pid, a later start: the first ended unreaped by ours
    assert itf.own_delta(a, b)[0] == 3


def test_totals_split_the_machines_cpu_device_and_memory_pressure():
    own, kern = (10, 1), (2, 0)
    samples = [_s({own: Proc(1, 0)}, {kern: 0}, (1_000_000, 0), {"vm_pgscan_pages": 10, "vm_pgmajfault": 3}),
               _s({own: Proc(1, 100, 50_000_000, 0)}, {kern: 20}, (1_500_000, 200_000),
                  {"vm_pgscan_pages": 60, "vm_pgmajfault": 4})]
    # over 2 s: user 150 + nice 10 + system 60 = 220 ticks busy; irq/softirq (30) and steal (40) not other work
    cpu = ((0, 0, 0, 0, 0, 0, 0, 0), (150, 10, 60, 130, 0, 20, 10, 40))
    cols = itf.totals(samples, cpu, 2.0, (60_000_000, 30_000_000))
    assert cols["run_cpu_cores_avg"] == pytest.approx(100 / HZ / 2)
    assert cols["kernel_cpu_cores_avg"] == pytest.approx(20 / HZ / 2)
    assert cols["other_cpu_cores_avg"] == pytest.approx((220 - 100 - 20) / HZ / 2)
    assert cols["run_io_bytes"] == 50_000_000
    assert cols["other_device_bytes"] == 10_000_000 + 30_000_000     # reads and writes counted apart
    assert cols["memory_stall_some_percent"] == pytest.approx(25.0)
    assert cols["memory_stall_full_percent"] == pytest.approx(10.0)
    assert cols["vm_pgscan_pages"] == 50 and cols["vm_pgmajfault"] == 1
    assert "memory_stall_some_percent" not in itf.totals([_s(), _s()], cpu, 2.0, None)   # no PSI: no column


@pytest.mark.parametrize("cols, span, limited, why", [
    ({"other_cpu_cores_avg": 0.30}, 2.0, False, "other work used 0.30 cores"),
    ({"other_cpu_cores_avg": 0.30}, 0.5, False, ""),              # 0.15 CPU-s: under the tick-noise floor
    ({"other_cpu_cores_avg": 0.20}, 10.0, False, ""),
    ({"other_device_bytes": 40e6, "run_io_bytes": 100e6}, 2.0, False, "the device moved 40 MB for others"),
    ({"other_device_bytes": 40e6, "run_io_bytes": 1e9}, 2.0, False, ""),       # 4 % of the run's own
    ({"other_device_bytes": 10e6, "run_io_bytes": 0}, 2.0, False, ""),         # under 16 MB
    ({"memory_stall_some_percent": 12.0}, 2.0, False, "tasks stalled on memory 12 %"),
    ({"memory_stall_some_percent": 12.0}, 2.0, True, ""),          # a memory-limited run's stalls are its own
    ({}, 2.0, False, ""),
])
def test_thresholds(cols, span, limited, why):
    disturbed, reason = itf.judge(cols, span, limited)
    assert disturbed == bool(why) and (why in reason if why else reason == "")


def test_every_threshold_passed_is_named_in_one_line():
    disturbed, reason = itf.judge({"other_cpu_cores_avg": 1.0, "other_device_bytes": 50e6, "run_io_bytes": 0,
                                   "memory_stall_some_percent": 50.0}, 3.0)
    assert disturbed and reason.count(";") == 2 and "\n" not in reason


def test_psi_and_vmstat_readers(tmp_path):
    psi = tmp_path / "memory"
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 "
                   "total=56\n")
    assert itf.read_psi(psi) == (1234, 56)
    assert itf.read_psi(tmp_path / "absent") is None
    vm = tmp_path / "vmstat"
    vm.write_text("pgscan_kswapd 5\npgscan_direct 2\npgsteal_kswapd 4\npgmajfault 9\nnr_free_pages 1\n")
    assert itf.read_vm(vm) == {"vm_pgscan_pages": 7, "vm_pgsteal_pages": 4, "vm_pgmajfault": 9}


def test_the_runs_own_process_tree_counts_as_its_own_cpu_and_io(tmp_path):
    """A child shell runs a grandchild that burns 0.3 CPU-s and writes 8 MB (fsynced), both reaped before the run
    ends: the monitor counts that CPU and those bytes as the run's (whatever else this machine does meanwhile:
    only the run's own figures are asserted, against what the kernel charged to its children)."""
    burn = ("import os, time\nwhile time.process_time() < 0.3: pass\n"
            f"fd = os.open({str(tmp_path / 'f')!r}, os.O_WRONLY | os.O_CREAT)\n"
            "os.write(fd, os.urandom(8 << 20)); os.fsync(fd); os.close(fd)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with monitor.Monitor(None, 0.1) as mon:
        subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0"; exit 0', burn], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    charged = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    s = mon.summary()
    assert s["run_cpu_cores_avg"] * mon.span_s >= 0.8 * charged - 2 / HZ
    assert s["run_io_bytes"] >= 8 << 20
    assert s["other_cpu_cores_avg"] >= 0 and s["kernel_cpu_cores_avg"] >= 0


def test_standing_load_names_the_load_average_and_the_busy_cores():
    line = monitor.standing_load(0.1)
    assert line.startswith("load average ") and f"of {os.cpu_count()} cores busy over 0.1 s" in line


def test_a_process_in_a_cgroup_this_process_holds_is_the_runs_and_a_memory_cap_is_seen(monkeypatch):
    """Processes of a held cgroup (a gateway's, brokers') count as the run's though no descendant (pid 1 stands in
    for one here), and a memory limit below the RAM there exempts the run from the memory-stall threshold."""
    from types import SimpleNamespace
    from storagebrief.core import cgroups, measured_run
    held = SimpleNamespace(owner_pid=os.getpid(), pids=lambda: [1], applied_memory_limit=64 << 20)
    monkeypatch.setitem(cgroups._live, "storagebrief-test-held", held)
    s = itf.sample(itf.Owner())
    assert any(pid == 1 for pid, _ in s.own) and s.memory_limited
    held.applied_memory_limit = None
    assert not itf.sample(itf.Owner()).memory_limited
    mon = monitor.Monitor(None)
    mon.snapshots = [monitor.Snapshot(t=0.0, machine=_s()),
                     monitor.Snapshot(t=2.0, machine=Sample({}, {}, None, {}, memory_limited=True))]
    stalled = {"memory_stall_some_percent": 40.0}
    run = SimpleNamespace(memory_limited=False, monitor=mon)
    assert measured_run.Run.disturbance(run, stalled) == {"disturbed": False, "disturbed_reason": ""}
    mon.snapshots[1] = monitor.Snapshot(t=2.0, machine=_s())
    assert measured_run.Run.disturbance(run, stalled)["disturbed"]
