"""The summary of a trace file (characterize), its output files and its one-line description, and
the `storagebrief characterize` command."""
from __future__ import annotations

import math
from pathlib import Path

from .chunks import _A_ISSUE, _Devices, batches
from .fast import FastCharacterizer
from .parse import FORMATS, ISSUE, ParseCounts, TraceError, device_capacity_sectors, events
from .stats import SAMPLE_POINTS, Characterizer


def characterize(path: str | Path, fmt: str, capacity_sectors: int | None = None,
                 sample_points: int = SAMPLE_POINTS, require_requests: bool = True,
                 reference: bool = False) -> tuple[dict, dict, ParseCounts]:
    """(summary row, distributions, parse counts) of a trace file. Raises TraceError on a
    missing file, an unknown format, or (require_requests) a trace without any request.

    The fast path (numpy, whole chunks) gives the same statistics as the reference
    (reference=True: event by event through Characterizer.feed, the definitions as code); the
    plot sample is a uniform sample of the data requests either way, not the same one.

    Without a capacity (argument or sysfs) the address space is the highest end sector seen,
    found by a first pass over the file (the summary says which: capacity_source)."""
    if capacity_sectors is not None and capacity_sectors <= 0:
        raise TraceError(f"--capacity-sectors must be > 0, got {capacity_sectors}")
    source = "given" if capacity_sectors else "sysfs"
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")
    if capacity_sectors is None:
        devs, top = set(), 0
        if reference:
            for ev in events(path, fmt, ParseCounts()):
                if ev.action == ISSUE:
                    devs.add(ev.dev)
                    top = max(top, ev.sector + ev.sectors)
        else:
            devices = _Devices()
            for b in batches(path, fmt, ParseCounts(), devices):
                iss = b.act == _A_ISSUE
                if iss.any():
                    devs.update(devices.devs[d] for d in set(b.dev[iss].tolist()))
                    top = max(top, int((b.sector[iss] + b.n[iss]).max()))
        if devs and not all(device_capacity_sectors(d) for d in devs):
            capacity_sectors, source = top or None, "highest sector in the trace"
    counts = ParseCounts()
    if reference:
        ch = Characterizer(capacity_sectors, sample_points)
        feed = ch.feed
        for ev in events(path, fmt, counts):
            feed(ev)
    else:
        import gc
        ch = FastCharacterizer(capacity_sectors, sample_points)
        was = gc.isenabled()
        gc.disable()          # the parser makes no cycles; collections would rescan big lists for nothing
        try:
            for b in batches(path, fmt, counts, ch.devices):
                ch.feed_batch(b)
        finally:
            if was:
                gc.enable()
    row = ch.summary(counts)
    if row["events"] == 0 and require_requests:
        why = (f"{counts.malformed} malformed line(s), e.g. {counts.malformed_examples[0]!r}"
               if counts.malformed else f"{counts.lines} line(s), none a block request")
        raise TraceError(f"trace '{path}' holds no block requests ({fmt} format): {why}; "
                         + ("is --format right?" if counts.malformed else "the traced device had no I/O"))
    row["capacity_source"] = source
    row["format"] = fmt
    return row, ch.distributions(), counts


# The seed's "Summary statistics" columns, in its order, and what this package calls them.
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
    "device", "devices", "capacity_sectors", "capacity_source", "requests_beyond_capacity",
    "unmatched_issues", "unmatched_completions", "events", "lines", "malformed_lines", "lost_events", "format")


def write_outputs(row: dict, dists: dict, counts: ParseCounts, out_dir: str | Path, trace: str | Path) -> dict:
    """characterization.json (summary, distributions, malformed examples) and characterization.csv."""
    import pandas as pd

    from .. import results
    from . import __doc__ as definitions
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    row = {"trace_file": str(trace), **row}
    results.write_json(out / "characterization.json",
                       {"summary": _jsonable(row), "malformed_examples": counts.malformed_examples,
                        "definitions": definitions.split("Definitions (also in the README and the brief):")[1].strip(),
                        **{k: v for k, v in dists.items() if k != "sample"}})
    cols = ["trace_file", *CSV_COLUMNS]
    results.write_csv(out / "characterization.csv", pd.DataFrame([{k: row.get(k) for k in cols}], columns=cols))
    return {"json": out / "characterization.json", "csv": out / "characterization.csv"}


def _jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def describe(row: dict) -> str:
    """The seed's one-line analysis: 'nearly 100 % read, 84 % random, 4–256 KiB'."""
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
    """The `storagebrief characterize` command: returns the summary row and writes the outputs."""
    row, dists, counts = characterize(trace, fmt, capacity_sectors)
    paths = write_outputs(row, dists, counts, out_dir, trace)
    return {"row": row, "paths": paths, "counts": counts}

