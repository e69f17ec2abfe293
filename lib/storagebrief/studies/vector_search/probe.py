"""The device's own 4 KiB random-read IOPS at a queue depth, on the index file the searches read: fio (the real
tool: direct I/O, libaio, time based), inside the run's cgroup, so an emulated profile caps it as it caps the
searches. One short probe right after each point's searches, in the point's pattern: `threads` jobs, each submitting
`beam_width` reads at once and waiting for them all (a hop), traced at the block layer where the searches were
(inflight.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from ...core.procs import Scope

BLOCK = 4096
RAMP_S = 0.2          # not counted: the throttle still owes for the searches' last reads (a 0.5 s probe right
                      # after an emulated-HDD point read at 1.6-3 IOPS, measured; 150 with the ramp)


class ProbeFailed(RuntimeError):
    """fio is missing or its job failed (fio's own words)."""


def fio_args(filename: Path, beam_width: int, seconds: float, output: Path, jobs: int = 1) -> list[str]:
    """`jobs` jobs (one per search process), each submitting `beam_width` reads at once and waiting for all of them
    before the next batch: a search hop's pattern, without the search's CPU time between hops."""
    return ["--name=vector-probe", f"--filename={filename}", "--readonly", "--direct=1", "--ioengine=libaio",
            "--rw=randread", f"--bs={BLOCK}", f"--iodepth={beam_width}", f"--iodepth_batch_submit={beam_width}",
            f"--iodepth_batch_complete_min={beam_width}", f"--numjobs={jobs}", "--group_reporting=1",
            "--time_based=1",
            f"--ramp_time={int(RAMP_S * 1000)}ms",
            f"--runtime={max(1, int(seconds * 1000))}ms", "--norandommap=1", "--randrepeat=0",
            "--output-format=json", f"--output={output}"]


def parse(doc: dict) -> dict:
    jobs = doc.get("jobs") or []
    if len(jobs) != 1 or jobs[0].get("error"):
        raise ProbeFailed(f"fio reported {len(jobs)} jobs / error {jobs[0].get('error') if jobs else None}")
    r = jobs[0]["read"]
    return {"iops": float(r["iops"]), "lat_us_mean": r["lat_ns"]["mean"] / 1e3,
            "clat_us_mean": r.get("clat_ns", r["lat_ns"])["mean"] / 1e3, "ios": int(r["total_ios"]),
            "runtime_ms": int(r["runtime"])}


def probe(filename: Path, beam_width: int, seconds: float, output: Path, group=None, name: str = "probe",
          jobs: int = 1) -> dict:
    """fio's randread IOPS on `filename` in a search's pattern (`jobs` x beams of `beam_width`), in `group` (the
    run's throttle) when given."""
    fio = shutil.which("fio")
    if fio is None:
        raise ProbeFailed("fio not found on PATH (Debian package 'fio'; `make system-deps` installs it)")
    scope = Scope(name, group)
    try:
        proc = scope.popen([fio, *fio_args(filename, beam_width, seconds, output, jobs)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=seconds * 10 + 60)
    finally:
        scope.close()
    if proc.returncode != 0:
        raise ProbeFailed(f"fio exited {proc.returncode}: {(err or out).strip()[-400:]}")
    text = output.read_text()
    return {**parse(json.loads(text[text.find("{"):])), "beam_width": beam_width, "jobs": jobs}


def within_profile(got: dict, limits) -> dict:
    """fio's IOPS, at most what an emulated profile lets through (its read IOPS cap, and its read bytes/s cap in
    4 KiB reads): a fresh throttle group grants a short burst at its start, and a 0.4 s probe on a 150-IOPS
    profile read 177 (measured), which no search can sustain. `fio_iops` keeps fio's own figure."""
    caps = [c for c in ((limits.read_iops if limits else None),
                        (limits.read_bps // BLOCK if limits and limits.read_bps else None)) if c]
    cap = min(caps) if caps else None
    return {**got, "fio_iops": got["iops"], "iops": min(got["iops"], cap) if cap else got["iops"],
            "profile_read_iops_cap": cap}

