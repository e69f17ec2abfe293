"""fio, run and parsed, never re-implemented: one job per point, JSON+ output kept beside runs.csv.

Percentiles from histogram bins follow fio's own rule (stat.c, calc_clat_percentiles):
the bins are fio's log-linear latency buckets, keyed in JSON+ by the bucket's value in ns
(plat_idx_to_val); walking the buckets in ascending order, the p-th percentile is the
first bucket whose cumulative count reaches p/100 x total. fio reports exactly these
values for one run; merging the bins of several repeats (adding counts bucket by bucket)
and applying the same rule gives the percentiles of all their I/Os together, exact to
fio's bucket resolution (about 1.6 % relative error), not an average of percentiles.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from ...core.procs import Scope

PERCENTILES = ("50", "90", "99", "99.9", "99.99")
PERCENTILE_LIST = ":".join(PERCENTILES)
SYNC_ENGINES = {"psync", "sync", "pvsync", "pvsync2"}
IODEPTH_BUCKETS = ("1", "2", "4", "8", "16", "32", ">=64")


class FioError(RuntimeError):
    """fio is missing, lacks an engine, or a job failed (the message has fio's own words)."""


def fio_binary() -> str | None:
    return shutil.which("fio")


def engines(fio: str | None = None) -> list[str]:
    """The I/O engines this fio build lists in `fio --enghelp`."""
    fio = fio or fio_binary()
    if fio is None:
        return []
    out = subprocess.run([fio, "--enghelp"], capture_output=True, text=True, timeout=30).stdout
    return [ln.strip() for ln in out.splitlines()[1:] if ln.strip()]


def fio_version(fio: str | None = None) -> str:
    fio = fio or fio_binary()
    return subprocess.run([fio, "--version"], capture_output=True, text=True, timeout=30).stdout.strip() if fio else ""


def split_queue_depth(queue_depth: int, numjobs: int, engine: str) -> tuple[int, int]:
    """(iodepth, numjobs) for a total queue depth: synchronous engines keep one I/O in flight per job,
    so their queue depth is all jobs; the others split it as iodepth x numjobs."""
    if engine in SYNC_ENGINES:
        return 1, queue_depth
    if queue_depth % numjobs:
        raise ValueError(f"queue depth {queue_depth} is not a multiple of numjobs {numjobs}")
    return queue_depth // numjobs, numjobs


_CODE: dict[str, list[str]] = {}


def code_files(fio: str | None = None) -> list[str]:
    """fio's binary and the shared libraries it loads (ldd), once per process."""
    fio = fio or fio_binary()
    if fio and fio not in _CODE:
        out = subprocess.run(["ldd", fio], capture_output=True, text=True, timeout=30).stdout if shutil.which("ldd") else ""
        libs = [w for ln in out.splitlines() for w in ln.split() if w.startswith("/")]
        extra = [f for f in ("/etc/ld.so.cache", "/etc/localtime") if os.path.exists(f)]
        _CODE[fio] = [fio, *dict.fromkeys(libs), *extra]
    return _CODE.get(fio, [])


def warm_code(fio: str | None = None, data: Path | None = None) -> int:
    """Read fio's code into the page cache before it starts inside a throttle.

    A cold cache (drop_caches) also evicts fio's binary and libraries; a throttled fio would
    page them in through the blkio cap (measured: 2-3 s of start-up at the hdd profile's 150
    IOPS) before its first I/O. Read here, outside the cgroup, they cost the run nothing."""
    total = 0
    for f in code_files(fio):
        try:
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
        except OSError:
            continue
    if data is not None:   # the file's inode and extent map (metadata, outside the throttle too)
        fd = os.open(data, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        try:
            import mmap
            buf = mmap.mmap(-1, 4096)
            size = os.fstat(fd).st_size
            for off in range(0, size, max(4096, size // 64 // 4096 * 4096)):
                os.preadv(fd, [buf], off)
        finally:
            os.close(fd)
    return total


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(":", "\\:")   # fio splits filename lists on ':'


@dataclass(frozen=True)
class FioJob:
    """One point's fio job: the file, the pattern and depth, the timing and where the JSON goes."""
    filename: Path
    rw: str
    bs: int
    iodepth: int
    numjobs: int
    engine: str
    ramp_s: float
    runtime_s: float
    size_bytes: int
    output: Path
    extra: tuple[str, ...] = ()


def job_args(job: FioJob) -> list[str]:
    """The fio command line of one point (direct I/O, time based, JSON+)."""
    args = [f"--name=point", f"--filename={_escape(str(job.filename))}", "--direct=1", f"--ioengine={job.engine}",
            f"--rw={job.rw}", f"--bs={job.bs}", f"--iodepth={job.iodepth}", f"--numjobs={job.numjobs}",
            "--group_reporting=1", f"--ramp_time={int(round(job.ramp_s * 1000))}ms",
            f"--runtime={max(1, int(round(job.runtime_s * 1000)))}ms",
            "--time_based=1", f"--size={job.size_bytes}", "--norandommap=1", "--randrepeat=0",
            "--output-format=json+", f"--percentile_list={PERCENTILE_LIST}", f"--output={job.output}"]
    if job.rw in ("read", "randread"):
        args.append("--readonly")
    return args + list(job.extra)


def run_job(args: list[str], timeout_s: float, scope: Scope | None = None, fio: str | None = None) -> dict:
    """Run one fio job; returns its parsed JSON (the file named by --output).

    fio starts through `scope` (its cgroup, owner marker, own session; a scope of its own when None)
    and nothing of it outlives this call: fio forks one process per job, which PR_SET_PDEATHSIG
    does not cover and which calls setsid(), so after fio exits or is stopped the scope kills
    whatever of it is left (a job forked just before fio died would wait on fio's start-up futex
    forever)."""
    fio = fio or fio_binary()
    if fio is None:
        raise FioError("fio not found on PATH (Debian package 'fio'; `make system-deps` installs it)")
    out = Path(next(a.split("=", 1)[1] for a in args if a.startswith("--output=")))
    own = scope is None
    scope = scope or Scope("fio")
    try:
        proc = scope.popen([fio, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except BaseException:
            _stop(proc)
            raise
    finally:
        if own:
            scope.close()
    if proc.returncode != 0:
        raise FioError(f"fio exited {proc.returncode}: {(stderr or stdout).strip()[-800:]}")
    try:
        return json.loads(_json_part(out.read_text()))
    except (OSError, ValueError) as exc:
        raise FioError(f"fio wrote no JSON to {out}: {exc}; stderr: {stderr.strip()[-400:]}") from None


def _stop(proc) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _json_part(text: str) -> str:
    """fio may print notes before the JSON document; keep the document."""
    start = text.find("{")
    return text[start:] if start > 0 else text


# --------------------------------------------------------------------------- parsing
def direction(rw: str) -> str:
    return "write" if "write" in rw else "read"


def percentile_key(p: str) -> str:
    return p.replace(".", "_")


def parse(doc: dict, rw: str) -> dict:
    """One row's worth of fio's own numbers (group_reporting: one job entry)."""
    jobs = doc.get("jobs") or []
    if len(jobs) != 1:
        raise FioError(f"expected one (grouped) fio job in the JSON, found {len(jobs)}")
    job = jobs[0]
    if job.get("error"):
        raise FioError(f"fio job error {job['error']}")
    d = job[direction(rw)]
    clat, lat = d["clat_ns"], d["lat_ns"]
    row = {"fio_bw_bytes": int(d["bw_bytes"]), "throughput_mb_per_s": d["bw_bytes"] / 1e6,
           "throughput_mib_per_s": d["bw_bytes"] / 2**20, "iops": float(d["iops"]),
           "io_bytes": int(d["io_bytes"]), "total_ios": int(d.get("total_ios", clat.get("N", 0))),
           "fio_runtime_ms": int(d["runtime"]),
           "lat_us_mean": lat["mean"] / 1e3, "lat_us_stddev": lat["stddev"] / 1e3,
           "lat_us_min": lat["min"] / 1e3, "lat_us_max": lat["max"] / 1e3,
           "clat_us_mean": clat["mean"] / 1e3, "clat_us_stddev": clat["stddev"] / 1e3,
           "slat_us_mean": d.get("slat_ns", {}).get("mean", 0) / 1e3,
           "fio_usr_cpu_percent": float(job["usr_cpu"]), "fio_sys_cpu_percent": float(job["sys_cpu"])}
    pct = {f"{float(k):g}": v for k, v in (clat.get("percentile") or {}).items()}
    for p in PERCENTILES:
        row[f"clat_us_p{percentile_key(p)}"] = pct[p] / 1e3 if p in pct else None
    levels = job.get("iodepth_level") or {}
    for b in IODEPTH_BUCKETS:
        name = "ge64" if b.startswith(">=") else b
        row[f"iodepth_level_{name}_percent"] = float(levels.get(b, 0.0))
    row["iodepth_reached"] = max(IODEPTH_BUCKETS, key=lambda b: float(levels.get(b, 0.0))) if levels else None
    return row


def bins(doc: dict, rw: str) -> dict[int, int]:
    """The completion-latency histogram: bucket value in ns -> count (JSON+ only)."""
    b = doc["jobs"][0][direction(rw)]["clat_ns"].get("bins")
    if b is None:
        raise FioError("fio JSON has no clat_ns bins: run it with --output-format=json+")
    return {int(k): int(v) for k, v in b.items()}


def merge_bins(many) -> dict[int, int]:
    out: dict[int, int] = {}
    for b in many:
        for k, v in b.items():
            out[k] = out.get(k, 0) + v
    return out


def percentiles_from_bins(b: dict[int, int], percentiles=PERCENTILES) -> dict[str, int | None]:
    """fio's rule: first bucket (ascending) whose cumulative count >= p/100 x total, in ns.

    Exact rational arithmetic (p as written, e.g. 99.9 = 999/10), so no float rounding moves
    a percentile across a bucket edge."""
    total = sum(b.values())
    out: dict[str, int | None] = {}
    keys = sorted(b)
    for p in percentiles:
        if total == 0:
            out[p] = None
            continue
        need = Fraction(Decimal(str(p))) / 100 * total
        acc = 0
        for k in keys:
            acc += b[k]
            if acc >= need:
                out[p] = k
                break
    return out


def mean_from_bins(b: dict[int, int]) -> float | None:
    total = sum(b.values())
    return sum(k * v for k, v in b.items()) / total if total else None


def raw_json_dir(out_dir: Path) -> Path:
    d = Path(out_dir) / "fio"
    d.mkdir(parents=True, exist_ok=True)
    return d


def same_file(path: Path, root: Path) -> bool:
    """fio is only ever pointed at files below a target's directory (never a device)."""
    p = Path(os.path.realpath(path))
    return p.is_file() and p.is_relative_to(Path(os.path.realpath(root)))
