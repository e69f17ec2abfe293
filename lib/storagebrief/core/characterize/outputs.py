"""The summary of a trace file (characterize), its output files and its one-line description, and
the `storagebrief characterize` command."""
from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..machine import device_capacity_sectors
from .definitions import DEFINITIONS
from .fast import FastCharacterizer
from .model import A_ISSUE, ISSUE, Devices, ParseCounts, TraceError, check_format
from .readers import batches, events
from .sanity import Screen
from .stats import SAMPLE_POINTS, Characterizer
from .tracefs_raw import header_info

CAPACITY_SOURCES = {"cli": "given with --capacity-sectors", "header": "from the trace's header",
                    "sysfs": "from this machine's sysfs", "highest_sector": "the highest sector in the trace"}


@dataclass
class CapacityPlan:
    """Where each device's capacity comes from (source: a key of CAPACITY_SOURCES)."""
    source: str
    capacities: dict = field(default_factory=dict)      # device -> sectors (cli: the override instead)
    device: tuple[int, int] | None = None               # the traced device a raw header names
    why_unknown: str = ""                               # highest_sector: why nothing better was known


def characterize(path: str | Path, fmt: str, capacity_sectors: int | None = None,
                 sample_points: int = SAMPLE_POINTS, require_requests: bool = True,
                 reference: bool = False) -> tuple[dict, dict, ParseCounts]:
    """(summary row, distributions, parse counts) of a trace file. Raises TraceError on a
    missing, unreadable or damaged file, an unknown format, or (require_requests) a trace
    without any request.

    The fast path (numpy, whole chunks) gives the same statistics as the reference
    (reference=True: event by event through Characterizer.feed, the definitions as code); the
    plot sample is a uniform sample of the data requests either way, not the same one. Both
    read events through sanity.Screen: impossible records and events out of time order are
    malformed, never counted.

    The address space (capacity_source): --capacity-sectors (cli); else a raw trace's header
    (header); else sysfs, only for a raw trace recorded on this machine in this boot (sysfs: a
    device number names another disk elsewhere); else the highest end sector of each device in
    the trace, found by a first pass over the file (highest_sector, said in `warning`)."""
    if capacity_sectors is not None and capacity_sectors <= 0:
        raise TraceError(f"--capacity-sectors must be > 0, got {capacity_sectors}")
    check_format(fmt)
    plan = _capacity_plan(path, fmt, capacity_sectors, reference)
    counts = ParseCounts()
    if reference:
        ch = Characterizer(capacity_sectors, sample_points, plan.capacities)
        feed = ch.feed
        for ev in Screen(counts, ch.capacity, plan.device).events(events(path, fmt, counts)):
            feed(ev)
    else:
        ch = FastCharacterizer(capacity_sectors, sample_points, capacities=plan.capacities)
        screen = Screen(counts, ch.capacity, plan.device)
        was = gc.isenabled()
        gc.disable()          # the parser makes no cycles; collections would rescan big lists for nothing
        try:
            for b in screen.batches(batches(path, fmt, counts, ch.devices), ch.devices):
                ch.feed_batch(b)
        finally:
            if was:
                gc.enable()
    row = ch.summary(counts)
    if row["events"] == 0 and require_requests:
        examples = counts.malformed_examples + counts.impossible_examples
        why = (f"{counts.malformed} malformed line(s) or record(s), e.g. {examples[0]!r}"
               if counts.malformed else f"{counts.lines} line(s), none a block request")
        raise TraceError(f"trace '{path}' holds no block requests ({fmt} format): {why}; "
                         + ("is --format right?" if counts.malformed else "the traced device had no I/O"))
    row["capacity_source"] = plan.source
    row["warning"] = _warning(row, plan, counts)
    row["format"] = fmt
    return row, ch.distributions(), counts


def _capacity_plan(path, fmt: str, capacity_sectors: int | None, reference: bool) -> CapacityPlan:
    device, why = None, f"{fmt} text carries no device capacity"
    if fmt == "tracefs-raw":
        info = header_info(path)
        device = info["device"]
        if capacity_sectors:
            return CapacityPlan("cli", device=device)
        if device is not None and info["capacity_sectors"]:
            return CapacityPlan("header", {device: info["capacity_sectors"]}, device)
        if device is not None and info["same_host"]:
            cap = device_capacity_sectors(device)
            if cap:
                return CapacityPlan("sysfs", {device: cap}, device)
        why = ("the raw trace's header has no capacity" + ("" if info["same_host"] else
               " and it was recorded on another machine or before the last boot"))
    elif capacity_sectors:
        return CapacityPlan("cli")
    return CapacityPlan("highest_sector", _highest_sectors(path, fmt, device, reference), device, why)


def _highest_sectors(path, fmt: str, device, reference: bool) -> dict:
    """device -> the highest end sector (start + sectors) of its issued requests: a first pass."""
    tops: dict = {}
    counts = ParseCounts()
    screen = Screen(counts, lambda dev: None, device)
    if reference:
        for ev in screen.events(events(path, fmt, counts)):
            if ev.action == ISSUE and ev.sector + ev.sectors > tops.get(ev.dev, 0):
                tops[ev.dev] = ev.sector + ev.sectors
        return tops
    import numpy as np      # inside: importing the package (the CLI) stays light
    devices = Devices()
    for b in screen.batches(batches(path, fmt, counts, devices), devices):
        iss = b.act == A_ISSUE
        if iss.any():
            end, dev = b.sector[iss] + b.n[iss], b.dev[iss]
            for d in np.unique(dev).tolist():
                top = int(end[dev == d].max())
                if top > tops.get(devices.devs[d], 0):
                    tops[devices.devs[d]] = top
    return tops


def _warning(row: dict, plan: CapacityPlan, counts: ParseCounts) -> str:
    """What the reader must know before trusting the locality figures (and the trace length)."""
    parts = []
    cap = row.get("capacity_sectors")
    beyond = row.get("requests_beyond_capacity") or 0
    if plan.source == "highest_sector" and cap:
        parts.append(f"capacity unknown ({plan.why_unknown}): the address space is the highest sector the trace "
                     f"reached ({cap:,} sectors), so locality is relative to the part of the device it touched; "
                     "give --capacity-sectors for the device's whole address space")
    if beyond:
        parts.append(f"{beyond:,} of {row['read_ops'] + row['write_ops']:,} requests end beyond the capacity "
                     f"({cap:,} sectors, {CAPACITY_SOURCES[plan.source]}): the trace is of another device or the "
                     "capacity is wrong, so the locality figures are not reliable; give the traced device's "
                     "--capacity-sectors")
    if counts.clock_restarts:
        parts.append(f"{counts.clock_restarts + 1} blkparse outputs appended in one file: each one's clock is "
                     "continued from where the one before ended")
    return "; ".join(parts)


# The Samsung SDC 2023 study's "Summary statistics" columns, in its order, and what this package calls them.
SEED_COLUMNS = (
    ("Read Percentage", "read_percent"), ("Random Percentage", "random_percent"), ("Average IOPS", "avg_iops"),
    ("Minimum Read Request (KiB)", "read_kib_min"), ("Median Read Request (KiB)", "read_kib_median"),
    ("Maximum Read Request (KiB)", "read_kib_max"), ("Mean Read Request (KiB)", "read_kib_mean"),
    ("Standard Deviation (KiB)", "read_kib_stdev"),
    ("Minimum Write Request (KiB)", "write_kib_min"), ("Median Write Request (KiB)", "write_kib_median"),
    ("Maximum Write Request (KiB)", "write_kib_max"), ("Mean Write Request (KiB)", "write_kib_mean"),
    ("Standard Deviation (KiB) ", "write_kib_stdev"),
    ("Random Read Operations", "random_read_ops"), ("Random Write Operations", "random_write_ops"),
    ("Sequential Read Operations", "sequential_read_ops"), ("Sequential Write Operations", "sequential_write_ops"),
    ("Trace Length Seconds", "trace_length_s"),
)
CSV_COLUMNS = tuple(k for _, k in SEED_COLUMNS) + (
    "read_ops", "write_ops", "flush_ops", "discard_ops", "other_ops", "merges", "requeues",
    "read_bytes", "write_bytes", "locality_percent", "locality_bands", "read_locality_percent",
    "read_locality_bands", "write_locality_percent", "write_locality_bands",
    "read_latency_us_mean", "read_latency_us_median", "read_latency_us_p99",
    "write_latency_us_mean", "write_latency_us_median", "write_latency_us_p99",
    "device", "devices", "capacity_sectors", "capacity_source", "requests_beyond_capacity", "warning",
    "unmatched_issues", "unmatched_completions", "events", "lines", "malformed_lines", "lost_events", "format")


def write_outputs(row: dict, dists: dict, counts: ParseCounts, out_dir: str | Path, trace: str | Path) -> dict:
    """characterization.json (summary, distributions, malformed examples) and characterization.csv:
    both or (an error writing them) neither, and no folder made for them."""
    import pandas as pd

    from .. import results      # inside: results imports pandas, heavy for the CLI's start
    out = Path(out_dir)
    row = {"trace_file": str(trace), **row}
    made = [p for p in (out, *out.parents) if not p.exists()]
    paths = {"json": out / "characterization.json", "csv": out / "characterization.csv"}
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        results.write_json(paths["json"],
                           {"summary": jsonable(row), "malformed_examples": counts.malformed_examples
                            + counts.impossible_examples,
                            "definitions": DEFINITIONS.strip(),
                            **{k: v for k, v in dists.items() if k != "sample"}})
        written.append(paths["json"])
        cols = ["trace_file", *CSV_COLUMNS]
        results.write_csv(paths["csv"], pd.DataFrame([{k: row.get(k) for k in cols}], columns=cols))
    except OSError as exc:
        for p in written:
            p.unlink(missing_ok=True)
        for d in made:                       # deepest first: only the folders made here, if empty
            try:
                d.rmdir()
            except OSError:
                pass
        raise TraceError(f"cannot write the outputs into '{out}': {exc.strerror or exc}; nothing was written") from None
    return paths


def check_out_dir(out_dir: str | Path) -> Path:
    """Refuse, before any work, an output folder the studies would refuse (a system directory, also
    through a symlink; a file) and one this user cannot create or write."""
    from .. import targets      # inside: targets imports pydantic, heavy for the CLI's start
    try:
        path = targets.check_target_path(str(out_dir))
    except ValueError as exc:
        why = str(exc).split("; ")[0].replace("target path", "--out", 1)     # its advice is for targets
        raise TraceError(f"{why}; write the outputs into an ordinary folder, e.g. reports/characterize") from None
    if path.exists() and not path.is_dir():
        raise TraceError(f"--out '{out_dir}' is a file, not a folder; choose a folder for the outputs")
    have = next(p for p in (path, *path.parents) if p.exists())      # the folder that would hold them
    if not have.is_dir():
        raise TraceError(f"--out '{out_dir}': {have} is a file, so no folder can be made under it")
    if os.statvfs(have).f_flag & os.ST_RDONLY or not os.access(have, os.W_OK | os.X_OK):
        raise TraceError(f"--out '{out_dir}': {have} is not writable by this user (or on a read-only "
                         "filesystem); choose a folder you can write")
    return path


def jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def describe(row: dict) -> str:
    """The Samsung SDC 2023 study's one-line analysis: 'nearly 100 % read, 84 % random, 4–256 KiB'."""
    rp, rnd = row.get("read_percent"), row.get("random_percent")
    if rp is None or (isinstance(rp, float) and math.isnan(rp)):
        return "no read or write requests"
    if rp >= 99.5:
        mix = "nearly 100 % read" if rp < 100 else "100 % read"
    elif rp <= 0.5:
        mix = "nearly 100 % write" if rp > 0 else "100 % write"
    else:
        mix = f"{rp:.0f} % read" if rp >= 50 else f"{100 - rp:.0f} % write"
    lo = [row.get(f"{k}_kib_min") for k in ("read", "write")]
    hi = [row.get(f"{k}_kib_max") for k in ("read", "write")]
    lo = [v for v in lo if v is not None and not math.isnan(v)]
    hi = [v for v in hi if v is not None and not math.isnan(v)]
    sizes = f", {_kib(min(lo))}–{_kib(max(hi))} KiB" if lo and hi else ""
    return f"{mix}, {rnd:.0f} % random{sizes}"


def _kib(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def main_characterize(trace: str, fmt: str, capacity_sectors: int | None, out_dir: str) -> dict:
    """The `storagebrief characterize` command: returns the summary row and writes the outputs
    (nothing when anything fails: the output folder is checked first, the files written last)."""
    check_out_dir(out_dir)
    row, dists, counts = characterize(trace, fmt, capacity_sectors)
    paths = write_outputs(row, dists, counts, out_dir, trace)
    return {"row": row, "paths": paths, "counts": counts}

