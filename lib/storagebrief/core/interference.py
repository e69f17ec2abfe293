"""What else the machine did while a run ran (issue 61: interference detected, not suffered).

Other work on this machine moved every bandwidth 17–38 % and derived answers ×2–4, and a run never said so. The
monitor (core/monitor.py) takes one `Sample` with each of its snapshots, and a run's row gets, from its first and
last sample and the ones between:

  run_cpu_cores_avg        CPU of the run's own processes, in cores on average over the run: this process and
                           its descendants (with the children they reaped: /proc/<pid>/stat utime + stime + cutime +
                           cstime), every process in a cgroup this process holds (a run's, a gateway's, brokers'),
                           and every process carrying this process's owner marker (core/procs.Scope: fio's jobs
                           that called setsid, ranks started through ssh)
  kernel_cpu_cores_avg     CPU of kernel threads (writeback, reclaim, I/O completion: often the run's own work)
  other_cpu_cores_avg      the rest of the machine's user + system CPU (/proc/stat), cores on average: other work
  run_io_bytes             bytes the run's processes caused to be read from or written to storage
                           (/proc/<pid>/io read_bytes + write_bytes - cancelled_write_bytes, reaped children
                           included); every device, not the target's alone
  other_device_bytes       the target device's bytes (/proc/diskstats, read + written) beyond run_io_bytes, read
                           and write counted apart: another process's I/O, or writeback of data dirtied before the
                           run
  memory_stall_some_percent  share of the run during which some task waited on memory (PSI, /proc/pressure/memory;
  memory_stall_full_percent  full: every runnable task); absent where the kernel has no PSI
  vm_pgscan_pages, vm_pgsteal_pages, vm_pgmajfault   /proc/vmstat deltas (reclaim scanned / reclaimed pages,
                           major faults), machine-wide, recorded for a reader where there is no PSI too

A run is `disturbed` (with a one-line `disturbed_reason`) when any of THRESHOLDS is passed: other work used more
than a quarter of a core on average (and at least 0.2 CPU seconds: a clock tick is 10 ms), the device moved more
than 10 % of the run's own bytes for others (and at least 16 MB), or some task stalled on memory for more than
10 % of the run (PSI; not judged on a run with a memory-limited cgroup, whose stalls are its own, nor without PSI).
Irq and softirq time is left out of the machine's CPU (it serves the run's own I/O as much as anyone's), and steal
(the host taking the CPU) is not other work on this machine.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import cgroups
from .procs import OWNER_ENV, owner_token

HZ = os.sysconf("SC_CLK_TCK")
PF_KTHREAD = 0x00200000
PSI_MEMORY = Path("/proc/pressure/memory")
VMSTAT = Path("/proc/vmstat")
VM_KEYS = {"vm_pgscan_pages": ("pgscan_kswapd", "pgscan_direct", "pgscan_khugepaged"),
           "vm_pgsteal_pages": ("pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged"),
           "vm_pgmajfault": ("pgmajfault",)}

# The stated thresholds (docs/run-table.md): past any one of them a run is disturbed.
OTHER_CPU_CORES = 0.25          # other work's CPU, cores on average over the run
OTHER_CPU_MIN_S = 0.2           # ... and at least this many CPU seconds in all (below: tick noise of a short run)
OTHER_DEVICE_SHARE = 0.10       # the device's bytes for others, as a share of the run's own bytes
OTHER_DEVICE_MIN_BYTES = 16e6   # ... and at least this many (a journal commit, a log line's writeback)
MEMORY_STALL_PERCENT = 10.0     # some task stalled on memory this share of the run (PSI)


@dataclass(frozen=True)
class Proc:
    """One process's counters: CPU ticks (its own and the children it reaped), bytes it caused to be read and
    written on storage (the same), its parent."""
    ppid: int
    ticks: int
    read: int = 0
    write: int = 0


@dataclass(frozen=True)
class Sample:
    """The machine at one moment: the run's own processes, kernel threads' ticks, memory pressure."""
    own: dict = field(default_factory=dict)          # (pid, start ticks) -> Proc
    kernel: dict = field(default_factory=dict)       # (pid, start ticks) -> ticks
    stall_us: tuple | None = None                   # PSI memory (some, full) totals in µs; None without PSI
    vm: dict = field(default_factory=dict)           # VM_KEYS name -> count
    memory_limited: bool = False                     # a cgroup of ours had a memory limit below the RAM
    pids: frozenset = frozenset()                    # (pid, start) of every process: one that left ours is not ended


_MARKED: dict[tuple[str, int, int], bool] = {}    # (owner token, pid, start) -> marked: environ does not change


class Owner:
    """Which processes are the run's: this process and its descendants, those in the cgroups it holds, those
    carrying its owner marker (read once per process and remembered for every later run)."""

    def __init__(self, pid: int | None = None):
        self.pid = pid or os.getpid()
        self.token = owner_token(self.pid) + ":"

    def groups(self) -> tuple[set[int], bool]:
        """(pids in the cgroups this process holds, whether one of them has a memory limit below the RAM)."""
        out, limited = set(), False
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for g in list(cgroups._live.values()):
            if g.owner_pid == self.pid:
                out.update(g.pids())
                limited = limited or (g.applied_memory_limit or ram) < 0.9 * ram
        return out, limited

    def marked(self, key: tuple[int, int]) -> bool:
        k = (self.token, *key)
        if k not in _MARKED:
            if len(_MARKED) > 100_000:
                _MARKED.clear()
            try:
                env = Path(f"/proc/{key[0]}/environ").read_bytes()
            except OSError:
                env = b""
            _MARKED[k] = f"{OWNER_ENV}={self.token}".encode() in env
        return _MARKED[k]


def _stat(pid: str) -> list[bytes] | None:
    """/proc/<pid>/stat's fields after the command name (pidstat.stat_fields, read as bytes: this runs for every
    process twice a second)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2:].split()


def _io(pid: int) -> tuple[int, int]:
    try:
        vals = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        return int(vals["read_bytes"]), max(0, int(vals["write_bytes"]) - int(vals["cancelled_write_bytes"]))
    except (OSError, KeyError, ValueError):
        return 0, 0


def read_psi(path: Path = PSI_MEMORY) -> tuple[int, int] | None:
    """(some, full) stall totals in µs, or None where the kernel has no PSI (or it is switched off)."""
    try:
        lines = path.read_text().splitlines()
        tot = {ln.split()[0]: int(ln.rsplit("total=", 1)[1]) for ln in lines}
        return tot["some"], tot.get("full", 0)
    except (OSError, IndexError, KeyError, ValueError):
        return None


def read_vm(path: Path = VMSTAT) -> dict[str, int]:
    try:
        raw = dict(line.split() for line in path.read_text().splitlines())
    except (OSError, ValueError):
        return {}
    return {name: sum(int(raw.get(k, 0)) for k in keys) for name, keys in VM_KEYS.items()}


def sample(owner: Owner) -> Sample | None:
    """Every process's /proc/<pid>/stat read once: the run's own (with /proc/<pid>/io) and kernel threads; None
    where /proc cannot be read so (the run's row then has no interference columns: nothing made up)."""
    try:
        return _sample(owner)
    except (OSError, ValueError, IndexError):
        return None


def _sample(owner: Owner) -> Sample:
    tree: dict[int, tuple[int, int, list[bytes]]] = {}      # pid -> (ppid, start, fields)
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat(name)
            if f and len(f) > 19:
                tree[int(name)] = (int(f[1]), int(f[19]), f)
    in_groups, limited = owner.groups()
    own_pids: set[int] = set()

    def ours(pid: int, seen: int = 0) -> bool:
        if pid in own_pids or pid == owner.pid or pid in in_groups:
            return True
        if pid not in tree or seen > 64:
            return False
        ppid, start, _ = tree[pid]
        return ppid > 1 and ours(ppid, seen + 1) or owner.marked((pid, start))

    own, kernel = {}, {}
    for pid, (ppid, start, f) in tree.items():
        ticks = int(f[11]) + int(f[12])
        if int(f[6]) & PF_KTHREAD:
            kernel[(pid, start)] = ticks
        elif ours(pid):
            own_pids.add(pid)
            own[(pid, start)] = Proc(ppid, ticks + int(f[13]) + int(f[14]), *_io(pid))
    return Sample(own, kernel, read_psi(), read_vm(), limited, frozenset((p, v[1]) for p, v in tree.items()))


def own_delta(a: Sample, b: Sample) -> tuple[int, int, int]:
    """(CPU ticks, read bytes, written bytes) of the run's processes between two samples. A process that ended was
    reaped into its parent's children's counters when that parent is one of ours and still there (its whole count
    moves there: take out what was already counted); else what it did since `a` is lost (counted as other work).
    One still running that is no longer ours (orphaned to init, unmarked) keeps what was counted."""
    ticks = rd = wr = 0
    alive, ppid_of = {k[0] for k in b.own}, {k[0]: p.ppid for k, p in a.own.items()}
    for key, p in b.own.items():
        before = a.own.get(key, Proc(0, 0))
        ticks, rd, wr = ticks + p.ticks - before.ticks, rd + p.read - before.read, wr + p.write - before.write
    for key, p in a.own.items():
        if key not in b.own and key not in b.pids and _reaped_by_ours(p.ppid, ppid_of, alive):
            ticks, rd, wr = ticks - p.ticks, rd - p.read, wr - p.write
    return ticks, rd, wr


def _reaped_by_ours(ppid: int, ppid_of: dict[int, int], alive: set[int]) -> bool:
    """An ended process's count reached one of ours still there: its parent, or (the parent ended too, having
    reaped it) the nearest ancestor of ours still there."""
    for _ in range(64):
        if ppid in alive:
            return True
        if ppid not in ppid_of:
            return False
        ppid = ppid_of[ppid]
    return False


def kernel_delta(a: Sample, b: Sample) -> int:
    return sum(t - a.kernel[k] for k, t in b.kernel.items() if k in a.kernel)


def totals(samples: list[Sample], cpu: tuple[tuple, tuple], span_s: float,
           device_bytes: tuple[int, int] | None) -> dict:
    """The run's interference columns from its samples (first to last, in order), the machine's CPU counters
    (/proc/stat first and last) and the device's (read, written) bytes over the run (None: no device)."""
    if len(samples) < 2 or span_s <= 0:
        return {}
    ticks = rd = wr = 0
    for a, b in zip(samples, samples[1:]):        # each interval on its own: processes come and go between
        t, r, w = own_delta(a, b)
        ticks, rd, wr = ticks + max(t, 0), rd + max(r, 0), wr + max(w, 0)
    kern = sum(max(kernel_delta(a, b), 0) for a, b in zip(samples, samples[1:]))
    out = {"run_cpu_cores_avg": ticks / HZ / span_s, "kernel_cpu_cores_avg": kern / HZ / span_s,
           "run_io_bytes": rd + wr}
    if cpu[0] and cpu[1]:
        d = [y - x for x, y in zip(cpu[0], cpu[1])]
        machine = d[0] + d[1] + d[2]               # user + nice + system (guest time is inside user)
        out["other_cpu_cores_avg"] = max(0, machine - ticks - kern) / HZ / span_s
    if device_bytes is not None:
        out["other_device_bytes"] = max(0, device_bytes[0] - rd) + max(0, device_bytes[1] - wr)
    first, last = samples[0], samples[-1]
    if first.stall_us is not None and last.stall_us is not None:
        out["memory_stall_some_percent"] = (last.stall_us[0] - first.stall_us[0]) / 1e6 / span_s * 100
        out["memory_stall_full_percent"] = (last.stall_us[1] - first.stall_us[1]) / 1e6 / span_s * 100
    for k in VM_KEYS:
        if k in first.vm and k in last.vm:
            out[k] = last.vm[k] - first.vm[k]
    return out


def judge(cols: dict, span_s: float, memory_limited: bool = False) -> tuple[bool, str]:
    """(disturbed, reason) of a run's interference columns against THRESHOLDS; reason '' when not disturbed."""
    why = []
    other = cols.get("other_cpu_cores_avg")
    if _num(other) and other > OTHER_CPU_CORES and other * span_s >= OTHER_CPU_MIN_S:
        why.append(f"other work used {other:.2f} cores on average (> {OTHER_CPU_CORES:g})")
    foreign, own = cols.get("other_device_bytes"), cols.get("run_io_bytes") or 0
    if _num(foreign) and foreign > OTHER_DEVICE_MIN_BYTES and foreign > OTHER_DEVICE_SHARE * own:
        why.append(f"the device moved {foreign / 1e6:,.0f} MB for others against the run's own {own / 1e6:,.0f} MB")
    stall = cols.get("memory_stall_some_percent")
    if not memory_limited and _num(stall) and stall > MEMORY_STALL_PERCENT:
        why.append(f"tasks stalled on memory {stall:.0f} % of the run (> {MEMORY_STALL_PERCENT:g} %)")
    return bool(why), "; ".join(why)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and x == x
