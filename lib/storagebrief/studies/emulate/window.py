"""Is a run's AU a measurement? Its window of steps, the bytes the loaders read in it, the page cache's share.

AU is compute ÷ wall time over the AU window (metrics.au_window: the steady state, W = read_threads ×
(prefetch + 1) steps left out at each end, W being the most batches a loader holds ahead of its
accelerator). A loader that read ahead can feed a short window from batches it read before the window
began: the accelerators then compute without waiting and AU reads high whatever the storage delivers
(issue 61: at 32 accelerators the quick profile's 3-step window read 93.6–94.7 % AU while the loaders
delivered 279–286 MB/s against a demand of 1,592 MB/s). Two checks, both on the run's own row:

  window   at least MIN_WINDOW_LOOKAHEADS × W steps (24 for unet3d's 4 threads × (2 + 1)): batches read
           before the window can then feed at most half of it. MLPerf Storage asks for 500 steps per
           epoch (Rules.md 3.1.2), which the paper profile (emulate.mlperf_rules) sizes its data set for;
           the quick profile's runs are shorter, so this is the smallest window it accepts.
  reads    the bytes AU says the accelerators consumed in the window, AU × N × demand × the window's
           seconds, must have been read by the loaders inside it (each batch's read prorated by the part
           of it inside the window), within READ_TOLERANCE: `au_supported_by_reads`.
A run that fails either is no measurement of the storage: its AU cannot pass (limits.limited_by:
`unmeasured`, the words say prefetch carried the window), and a search stops there with "not answered at
this scale" (search.py). A failing AU stays a failure with its own cause: prefetch only raises AU.

Page cache: on a target whose cache is meant cold (every sizing but `fixed` and a remote store), a run whose
device read fewer than CACHE_SHORT_RATIO bytes per loader byte had the rest served from memory; its reason
says so, and its AU may exceed what the target's throttle allows.
"""
from __future__ import annotations

import math

import numpy as np

MIN_WINDOW_LOOKAHEADS = 2      # the AU window spans at least this many loader look-aheads (W steps each)
READ_TOLERANCE = 0.10          # the loaders' bytes in the window may fall this far short of AU's claim
CACHE_SHORT_RATIO = 0.9        # device bytes per loader byte below this: the page cache served the rest
UNCONTROLLED = ("fixed", "remote store")   # dataset_sizing prefixes whose page cache is not meant cold


def au_window(steps: int, read_threads: int, prefetch: int) -> tuple[int, int]:
    """Steps [first, stop) over which AU is measured: the loader's steady state.

    A loader holds at most W = read_threads x (prefetch + 1) batches ahead of its
    accelerator (prefetch ready batches per thread plus one being read). The first W
    steps may consume batches read during start-up (free steps that overstate AU on
    storage-bound runs) and the last W steps batches read before the loader ran dry;
    both are left out. W is capped at a quarter of the run; the first step (empty
    queues) is always left out, as in DLIO.
    """
    if steps <= 1:
        return 0, steps
    w = min(read_threads * (prefetch + 1), (steps - 1) // 4)
    return max(1, w), steps - w


def min_window_steps(read_threads: int, prefetch: int) -> int:
    """The shortest AU window whose AU is a measurement: MIN_WINDOW_LOOKAHEADS loader look-aheads."""
    return MIN_WINDOW_LOOKAHEADS * read_threads * (prefetch + 1)


def min_run_steps(read_threads: int, prefetch: int) -> int:
    """The fewest steps whose AU window reaches min_window_steps."""
    need, steps = min_window_steps(read_threads, prefetch), 1
    while True:
        first, stop = au_window(steps, read_threads, prefetch)
        if stop - first >= need:
            return steps
        steps += 1


def bytes_in_window(spans: np.ndarray, t0: float, t1: float) -> float:
    """Bytes read in [t0, t1] from per-batch reads (rows: begin, end, bytes), each prorated by its overlap."""
    if spans is None or len(spans) == 0:
        return 0.0
    b, e, n = spans[:, 0], spans[:, 1], spans[:, 2]
    dur = e - b
    inside = np.clip(np.minimum(e, t1) - np.maximum(b, t0), 0.0, None)
    share = np.where(dur > 0, inside / np.where(dur > 0, dur, 1.0), ((b >= t0) & (b <= t1)).astype(float))
    return float((n * share).sum())


def _known(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def is_false(x) -> bool:
    """A bool column's False, as written (False, numpy's False_) or read back from runs.csv ('False')."""
    return _known(x) and str(x).strip().lower() in ("false", "0", "0.0")


def checks(row: dict) -> dict:
    """The columns that say whether the row's AU is a measurement (module docstring); {} without the inputs."""
    g = row.get
    need = ("au_percent", "accelerators", "demand_mb_per_s_per_accelerator", "measured_time_s", "au_window_steps",
            "read_threads", "prefetch")
    if not all(_known(g(k)) for k in need):
        return {}
    claimed = float(g("au_percent")) / 100 * int(g("accelerators")) * float(g("demand_mb_per_s_per_accelerator")) \
        * 1e6 * float(g("measured_time_s"))
    read = g("loader_bytes_au_window")
    ratio = float(read) / claimed if _known(read) and claimed > 0 else None
    supported = None if ratio is None else bool(ratio >= 1 - READ_TOLERANCE)
    min_steps = min_window_steps(int(g("read_threads")), int(g("prefetch")))
    return {"au_window_min_steps": min_steps, "au_claimed_bytes_au_window": claimed,
            "au_read_support_ratio": ratio, "au_supported_by_reads": supported,
            "au_measured": bool(int(g("au_window_steps")) >= min_steps and supported is not False)}


def files_for_window(row: dict) -> int | None:
    """emulate.num_files that gives this row's accelerator count an AU window of the minimum (None: unknown)."""
    g = row.get
    need = ("num_files", "dataset_bytes", "sample_bytes_mean", "batch_size", "epochs", "accelerators",
            "read_threads", "prefetch")
    if not all(_known(g(k)) for k in need) or float(g("sample_bytes_mean")) <= 0:
        return None
    per_file = max(1, round(float(g("dataset_bytes")) / int(g("num_files")) / float(g("sample_bytes_mean"))))
    per_epoch = -(-min_run_steps(int(g("read_threads")), int(g("prefetch"))) // int(g("epochs")))
    return int(g("accelerators")) * -(-per_epoch * int(g("batch_size")) // per_file)


def not_measured(row: dict) -> str:
    """Why the row's AU is no measurement, in words ('' when it is one)."""
    g = row.get
    if not is_false(g("au_measured")):
        return ""
    steps, least = int(g("au_window_steps")), int(g("au_window_min_steps"))
    words = []
    if steps < least:
        words.append(f"its window was {steps} steps, under the {least} this study needs ({MIN_WINDOW_LOOKAHEADS} × read "
                     "threads × (prefetch + 1))")
    ratio = g("au_read_support_ratio")
    if _known(ratio) and ratio < 1 - READ_TOLERANCE:
        words.append(f"the loaders read {float(g('loader_bytes_au_window')) / 1e6:,.1f} MB in its "
                     f"{float(g('measured_time_s')):.3f} s, {ratio:.2f} × the "
                     f"{float(g('au_claimed_bytes_au_window')) / 1e6:,.1f} MB that AU × {int(g('accelerators'))} × "
                     f"{float(g('demand_mb_per_s_per_accelerator')):.1f} MB/s needs")
    files = files_for_window(row)
    more = (f"; emulate.num_files ≥ {files:,}, emulate.min_steps_per_epoch: au_window (the data set grows with N) or "
            "the paper profile answers it") if files else ""
    return (f"AU {float(g('au_percent')):.1f} % is not a measurement: prefetch carried the window (too few steps): "
            + "; ".join(words) + more)


def cache_served(row: dict) -> str:
    """'the page cache served 50 % of the loaders' bytes (…)' on a cache-cold target that read less from its
    device than its loaders asked for; '' otherwise."""
    ratio, sizing = row.get("device_bytes_per_loader_byte"), str(row.get("dataset_sizing") or "")
    if not _known(ratio) or ratio >= CACHE_SHORT_RATIO or sizing.startswith(UNCONTROLLED):
        return ""
    return (f"the page cache served {100 * (1 - float(ratio)):.0f} % of the loaders' bytes (the device read "
            f"{float(ratio):.2f} bytes per loader byte), so AU is above what the device alone delivered")
