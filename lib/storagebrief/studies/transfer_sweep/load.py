"""The busy system: a measured CPU + memory-bandwidth load beside fio ("emulated AI preprocessing").

Micron's GDS brief loaded 86 % of the CPUs and ~50 % of memory bandwidth with stressapptest. Here:

  stress-ng (default)  `--memrate W --memrate-rd-mbs R --memrate-wr-mbs R` (W = CPUs workers, each
                       rate-limited so together they move share x peak MB/s) plus `--cpu W --cpu-load L`
                       topping the CPU up; L is calibrated once per study run against /proc/stat so the
                       whole load reaches the CPU target with fio not running.
  stressapptest        `-m` copy threads and `-C` CPU threads (counts from the shares, whole threads
                       only: it has no rate limit), reported as it runs.

Peak memory bandwidth is measured once per study run with the same tool, unthrottled, one
worker per CPU (stress-ng memrate: bytes moved / time over all its read and write methods;
stressapptest: its "Memory Copy" MB/s). During each busy point the load's own report gives
its memory MB/s (share = that ÷ peak) and its CPU seconds (stress-ng's usr+sys); the machine's
CPU % over the point comes from /proc/stat (the engine's monitor, `cpu_busy_percent`).

Safety: the load starts through a procs.Scope of its own: its own session, die_with_parent
(PR_SET_PDEATHSIG), the owner marker and, where the machine allows, a cgroup that only holds it
(no limits: it is never placed in fio's throttled cgroup), with a hard `-t` timeout as a last net;
it is stopped (SIGINT, then SIGKILL to everything in the scope) and reaped after every busy point,
on exceptions and on SIGTERM/SIGHUP (the engine turns those into exceptions); after a kill -9 the
next run's leftovers sweep finds it by its cgroup or marker. Its log and stress-ng's YAML report go
in `tmp_dir`, a scratch folder of the study's out folder that the study removes (never the system
temp folder, where a killed run would leave them).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import yaml

from ...core import procs

TOOLS = ("stress-ng", "stressapptest")
SAT_COPY = re.compile(r"Memory Copy:\s*([\d.]+)M at ([\d.]+)MB/s")


class LoadError(RuntimeError):
    """The load tool is missing or failed; the message says which and why."""


def ncpu() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def tool_binary(tool: str) -> str | None:
    return shutil.which(tool)


# --------------------------------------------------------------------------- /proc/stat
def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    total = sum(f[:8])
    return total - idle, total


def busy_percent(a: tuple[int, int], b: tuple[int, int]) -> float:
    dt = b[1] - a[1]
    return 100.0 * (b[0] - a[0]) / dt if dt > 0 else float("nan")


# --------------------------------------------------------------------------- processes
def _group_members(pgid: int) -> list[int]:
    return procs.group_members(pgid)


_names = iter(range(1, 1 << 62))


def _tmp_file(tmp_dir: Path, suffix: str) -> Path:
    """A fresh name in the study's scratch folder (storagebrief-load-<pid>-<n><suffix>)."""
    return Path(tmp_dir) / f"storagebrief-load-{os.getpid()}-{next(_names)}{suffix}"


class Load:
    """One running load; stop() always leaves no process of it behind."""

    def __init__(self, argv: list[str], tool: str, report: Path | None, tmp_dir: Path):
        self.tool, self.report, self.argv = tool, report, argv
        self.log_path = _tmp_file(tmp_dir, ".log")
        self.log = open(self.log_path, "w+")
        self.t0 = time.monotonic()
        self.scope = procs.Scope.tracked("load")
        try:
            self.proc = self.scope.popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except BaseException:
            self.scope.close()
            self.log.close()
            raise
        self.pgid = self.proc.pid
        self.wall_s = 0.0
        self._stopped = False

    @property
    def pids(self) -> list[int]:
        return self.scope.members()

    def stop(self) -> None:
        """SIGINT (the tools report and exit), SIGKILL to the scope after 5 s; reaped; nothing left.
        A second call does nothing."""
        if self._stopped:
            return
        try:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.pgid, signal.SIGINT)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            try:
                self.scope.close()
            except RuntimeError as exc:
                raise LoadError(f"load processes survived SIGKILL: {exc}") from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.wall_s = time.monotonic() - self.t0
            self.log.close()
            self._stopped = True

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def cleanup_files(self) -> None:
        for f in (self.log_path, self.report):
            if f:
                try:
                    os.unlink(f)
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --------------------------------------------------------------------------- stress-ng
def _sn_metrics(path: Path | None) -> list[dict]:
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError, TypeError):
        return []
    return doc.get("metrics") or []


def memrate_mb_per_s(metrics: list[dict], instances: int) -> float | None:
    """Bytes moved per second by `instances` memrate workers: each method moves the same buffer, so
    the worker's average rate is the harmonic mean of its per-method MB/s (stress-ng reports the
    geometric mean over instances per method; x instances for all of them)."""
    for m in metrics:
        if m.get("stressor") == "memrate":
            rates = [float(v) for k, v in m.items() if k.endswith("-mb-per-sec") and float(v) > 0]
            if rates:
                return instances * len(rates) / sum(1.0 / r for r in rates)
    return None


def stressor_cpu_s(metrics: list[dict]) -> float:
    return float(sum((m.get("user-time") or 0) + (m.get("system-time") or 0) for m in metrics))


def stress_ng_argv(report: Path, duration_s: float, mem_workers: int, rate_mb_per_s: float | None,
                   cpu_workers: int, cpu_load: float | None, buffer_mib: int = 64) -> list[str]:
    argv = [tool_binary("stress-ng") or "stress-ng", "--timeout", f"{max(1, math.ceil(duration_s))}s",
            "--metrics", "--yaml", str(report)]
    if mem_workers:
        argv += ["--memrate", str(mem_workers), "--memrate-bytes", f"{buffer_mib}M"]
        if rate_mb_per_s:
            r = str(max(1, int(rate_mb_per_s)))
            argv += ["--memrate-rd-mbs", r, "--memrate-wr-mbs", r]
    if cpu_workers and cpu_load:
        argv += ["--cpu", str(cpu_workers), "--cpu-load", str(int(round(cpu_load))), "--cpu-method", "int64"]
    return argv


def _report_path(tmp_dir: Path) -> Path:
    return _tmp_file(tmp_dir, ".yaml")   # stress-ng writes it


# --------------------------------------------------------------------------- stressapptest
def sat_argv(duration_s: float, copy_threads: int, cpu_threads: int, memory_mib: int = 256) -> list[str]:
    return [tool_binary("stressapptest") or "stressapptest", "-s", str(max(1, math.ceil(duration_s))),
            "-M", str(memory_mib), "-m", str(copy_threads), "-C", str(cpu_threads)]


def sat_copy_mb_per_s(text: str) -> float | None:
    m = SAT_COPY.search(text)
    return float(m.group(2)) if m else None


# --------------------------------------------------------------------------- calibration
def _stress_ng_peak(seconds: float, n: int, tool: str, tmp_dir: Path) -> float | None:
    report = _report_path(tmp_dir)
    load = Load(stress_ng_argv(report, seconds + 5, n, None, 0, None), tool, report, tmp_dir)
    try:
        time.sleep(seconds)
        load.stop()
        return memrate_mb_per_s(_sn_metrics(report), n)
    finally:
        load.stop()
        load.cleanup_files()


def measure_peak(tool: str, seconds: float, tmp_dir: Path) -> dict:
    """Peak memory bandwidth of this machine with the load's own tool (unthrottled, a worker per CPU).
    Its files go in tmp_dir and are removed here, also when a signal ends the measurement."""
    n = ncpu()
    if tool == "stress-ng":
        # memrate reports a rate only for loops it finished over its buffer: a short window on a busy or
        # slow machine can end before the first (seen in CI at 0.5 s), so the window doubles, up to 3 times.
        mb, tried = None, seconds
        for tried in (seconds, seconds * 2, seconds * 4):
            mb = _stress_ng_peak(tried, n, tool, tmp_dir)
            if mb:
                break
        method = f"stress-ng memrate, {n} unthrottled workers, {tried:g} s"
    else:
        load = Load(sat_argv(seconds, n, 0), tool, None, tmp_dir)
        try:
            try:
                load.proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                pass
            load.stop()
            mb = sat_copy_mb_per_s(load.output())
        finally:
            load.stop()
            load.cleanup_files()
        method = f"stressapptest -m {n} (memory copy), {seconds:g} s"
    if not mb:
        raise LoadError(f"{tool} reported no memory bandwidth while measuring the peak")
    return {"peak_memory_mb_per_s": mb, "peak_method": method}


def calibrate(tool: str, cpu_percent: float, memory_percent: float, peak_mb_per_s: float,
              seconds: float, tmp_dir: Path, rounds: int = 3) -> dict:
    """Settings that reach the CPU and memory targets with fio not running (measured, /proc/stat)."""
    n = ncpu()
    rate = memory_percent / 100 * peak_mb_per_s / n
    if tool == "stressapptest":
        threads = max(1, round(cpu_percent / 100 * n))
        copy = 1 if memory_percent > 0 else 0
        settings = {"copy_threads": copy, "cpu_threads": max(0, threads - copy)}
        return {**settings, "calibrated_cpu_percent": None, "calibration": "thread counts from the shares"}
    load_setting, best = cpu_percent, None
    for _ in range(rounds):
        report = _report_path(tmp_dir)
        a = cpu_times()
        load = Load(stress_ng_argv(report, seconds + 5, n if memory_percent > 0 else 0, rate, n, load_setting),
                    tool, report, tmp_dir)
        try:
            time.sleep(seconds)
            b = cpu_times()
        finally:
            load.stop()
            load.cleanup_files()
        got = busy_percent(a, b)
        if best is None or abs(got - cpu_percent) < abs(best[1] - cpu_percent):
            best = (load_setting, got)
        if abs(got - cpu_percent) <= 2:
            break
        load_setting = min(100.0, max(1.0, load_setting + (cpu_percent - got)))
    load_setting, measured = best
    return {"mem_workers": n if memory_percent > 0 else 0, "rate_mb_per_s_per_worker": rate, "cpu_workers": n,
            "cpu_load": load_setting, "calibrated_cpu_percent": measured,
            "calibration": f"stress-ng --cpu-load adjusted against /proc/stat ({rounds} x {seconds:g} s at most)"}


def start(tool: str, settings: dict, duration_s: float, tmp_dir: Path) -> Load:
    """Start the calibrated load (returns once its processes exist); its files go in tmp_dir."""
    if tool == "stress-ng":
        report = _report_path(tmp_dir)
        load = Load(stress_ng_argv(report, duration_s, settings["mem_workers"], settings["rate_mb_per_s_per_worker"],
                                   settings["cpu_workers"], settings["cpu_load"]), tool, report, tmp_dir)
    else:
        load = Load(sat_argv(duration_s, settings["copy_threads"], settings["cpu_threads"]), tool, None, tmp_dir)
    return load


def measured(load: Load, peak_mb_per_s: float) -> dict:
    """The load's own report after stop(): memory MB/s, its share of the peak, its CPU %."""
    n = ncpu()
    if load.tool == "stress-ng":
        metrics = _sn_metrics(load.report)
        mb = memrate_mb_per_s(metrics, _instances(load.argv, "--memrate"))
        cpu = 100.0 * stressor_cpu_s(metrics) / (load.wall_s * n) if metrics and load.wall_s > 0 else None
    else:
        mb = sat_copy_mb_per_s(load.output())
        cpu = None
    return {"load_memory_mb_per_s": mb,
            "load_memory_share_percent": 100.0 * mb / peak_mb_per_s if mb and peak_mb_per_s else None,
            "load_cpu_percent": cpu, "load_wall_s": load.wall_s}


def _instances(argv: list[str], flag: str) -> int:
    return int(argv[argv.index(flag) + 1]) if flag in argv else 0
