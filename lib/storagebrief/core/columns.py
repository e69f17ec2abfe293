"""The run table's schema: every runs.csv column declared once, with its unit and meaning.

runs.csv is tidy (fio's rule: one row per measured run, units in the names). Its columns come
from three places, each declaring its own: the engine (ENGINE_COLUMNS: who ran what, and whether
it measured), the device/CPU monitor (MONITOR_COLUMNS: averages and maxima over the run) and the
study (`COLUMNS` in its metrics room). The engine writes `runs.schema.json` beside runs.csv with
RUNS_SCHEMA_VERSION and all three lists, so a reader can refuse a table it cannot read and a
person can look a column up without this package.

Versions: 1 = before the sidecar (status / failure_reason written by some studies only);
2 = the engine writes status and failure_reason for every study, and the sidecar.
"""
from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass

from .engine_outputs import RUNS_SCHEMA as SCHEMA_FILE

RUNS_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Column:
    """One runs.csv column (or a family of them: `name` may hold a * wildcard)."""
    name: str
    unit: str          # "" for text, counts and ratios; else "s", "MB/s", "µs", "%", "bytes", ...
    meaning: str
    kind: str = "number"   # number | text | bool

    def matches(self, column: str) -> bool:
        return fnmatch.fnmatchcase(column, self.name)


ENGINE_COLUMNS: tuple[Column, ...] = (
    Column("study", "", "the study (params section) that ran", "text"),
    Column("run_id", "", "the run's id: study, configuration, target, repeat; names its time series and trace", "text"),
    Column("target", "", "the storage target's name (params targets)", "text"),
    Column("profile", "", "the emulated device profile on that target; empty: the device as it is", "text"),
    Column("repeat", "", "repeat number of this configuration (0-based)"),
    Column("started_at", "", "UTC ISO-8601 time the run started", "text"),
    Column("cache_method", "", "how the page cache was made cold before the run (drop_caches, evict, none...)", "text"),
    Column("emulated", "", "True when a device profile throttled this run (cgroup blkio / io.max)", "bool"),
    Column("rerun_of", "", "the run id of the disturbed run this run re-ran (core/reruns.py; readers leave that one "
           "out); empty for a first run", "text"),
    Column("status", "", "ok: the run measured; failed: it did not (failure_reason says why)", "text"),
    Column("failure_reason", "", "why a run failed or was not run; empty for ok runs", "text"),
)

# The engine columns every run table has had since schema 1: what a reader may require of any runs.csv.
REQUIRED_COLUMNS: tuple[str, ...] = ("study", "run_id", "target", "repeat", "started_at", "cache_method")


def kinds(names, declared: tuple[Column, ...] = ENGINE_COLUMNS, may_be_absent=()) -> dict[str, str]:
    """name -> kind ("text" | "number" | "bool") for `names`, from their declarations; a name in
    `may_be_absent` gets "?" after its kind (the brief's gate: absent when every run failed, else that kind).
    A metrics room's RUNS_COLUMNS is kinds(REQUIRED, COLUMNS): an undeclared name is a KeyError."""
    by_name = {c.name: c.kind for c in declared}
    return {**{n: by_name[n] for n in names}, **{n: by_name[n] + "?" for n in may_be_absent}}


MONITOR_COLUMNS: tuple[Column, ...] = (
    Column("monitor_interval_s", "s", "sampling interval of the device/CPU monitor"),
    Column("monitor_samples", "", "monitor intervals in the run"),
    Column("device_read_mb_per_s_*", "MB/s", "device read throughput (/proc/diskstats): _avg from the run's "
           "start/end totals, _max over monitor intervals; device-wide"),
    Column("device_write_mb_per_s_*", "MB/s", "device write throughput, as above"),
    Column("device_read_iops_*", "IO/s", "device completed reads per second, as above"),
    Column("device_write_iops_*", "IO/s", "device completed writes per second, as above"),
    Column("device_util_percent_*", "%", "share of time the device had I/O in flight, as above"),
    Column("device_avg_read_kib", "KiB", "mean read request size over the run"),
    Column("device_avg_write_kib", "KiB", "mean write request size over the run"),
    Column("device_read_latency_us", "µs", "mean time a read spent in the device queue and service"),
    Column("device_write_latency_us", "µs", "mean time a write spent in the device queue and service"),
    Column("device_read_bytes", "bytes", "bytes read from the device during the run"),
    Column("device_write_bytes", "bytes", "bytes written to the device during the run"),
    Column("cpu_user_percent", "%", "whole-machine CPU in user mode during the run"),
    Column("cpu_system_percent", "%", "whole-machine CPU in the kernel during the run"),
    Column("cpu_iowait_percent", "%", "whole-machine CPU idle while waiting for I/O"),
    Column("cpu_busy_percent", "%", "whole-machine CPU not idle (user + system + irq + ...)"),
    # what else the machine did (core/interference.py; the thresholds of `disturbed` are there)
    Column("run_cpu_cores_avg", "cores", "CPU of the run's own processes (this process, its descendants, its "
           "cgroups, its marked processes), in cores on average over the run"),
    Column("kernel_cpu_cores_avg", "cores", "CPU of kernel threads (writeback, reclaim: often the run's own work)"),
    Column("other_cpu_cores_avg", "cores", "other work: the machine's user + system CPU (/proc/stat) not the run's "
           "nor kernel threads', in cores on average over the run"),
    Column("run_io_bytes", "bytes", "bytes the run's processes caused to be read or written on storage "
           "(/proc/<pid>/io, every device)"),
    Column("other_device_bytes", "bytes", "the target device's bytes (read + written) beyond the run's own: "
           "others' I/O, or writeback of data dirtied before the run"),
    Column("memory_stall_some_percent", "%", "share of the run some task waited on memory (PSI "
           "/proc/pressure/memory, machine-wide); absent without PSI"),
    Column("memory_stall_full_percent", "%", "share of the run every runnable task waited on memory (PSI)"),
    Column("vm_pgscan_pages", "pages", "pages reclaim scanned during the run (/proc/vmstat, machine-wide)"),
    Column("vm_pgsteal_pages", "pages", "pages reclaim freed during the run (/proc/vmstat)"),
    Column("vm_pgmajfault", "", "major page faults during the run (/proc/vmstat, machine-wide)"),
    Column("disturbed", "", "True when other work passed a stated threshold during the run (other CPU > 0.25 "
           "cores, others' device bytes > 10 % of the run's, memory stalls > 10 % of the run)", "bool"),
    Column("disturbed_reason", "", "which thresholds a disturbed run passed, in one line; empty otherwise", "text"),
)


def undeclared(columns, *declared: tuple[Column, ...]) -> list[str]:
    """The columns no declaration covers (a test keeps every study's list complete)."""
    decl = [c for group in declared for c in group]
    return [name for name in columns if not any(c.matches(name) for c in decl)]


def schema(study: str, study_columns: tuple[Column, ...]) -> dict:
    """runs.schema.json: the version and every declared column, engine first."""
    return {"schema_version": RUNS_SCHEMA_VERSION, "study": study,
            "columns": [{**asdict(c), "source": source}
                        for source, group in (("engine", ENGINE_COLUMNS), ("monitor", MONITOR_COLUMNS),
                                              ("study", study_columns))
                        for c in group]}
