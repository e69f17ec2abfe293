"""Block-level I/O characterization of a trace (the seed's btt-style summary statistics).

Reads block traces as text, streaming, in bounded memory:
  tracefs   lines of the kernel's block:block_rq_issue / block_rq_complete / block_rq_requeue
            events (trace_pipe or trace), with or without the kernel 6.x ioprio field
            (`be,0,4`) after the sector range; `CPU:N [LOST M EVENTS]` lines count as lost events
  blkparse  blkparse's default text output: D = issued to the device, C = completed,
            M / F = back / front merges, R = requeue; other actions (Q G I P U A X S T m ...)
            are valid but not needed; the per-CPU summary at the end is skipped

Definitions (also in the README and the brief):
  * An I/O is one request as issued to the device (D / block_rq_issue): issue time, start
    sector, sectors, and its operation: read, write, flush or discard. It is matched to its
    completion by (device, start sector, operation), first issued first completed, for a
    per-request latency. A request the driver requeues (the device did not take it, e.g. its
    queue was full) is taken back and counts once, at its last issue; requeues have their
    own column (the sequence point goes back to before it when nothing was issued since).
  * Sequential: its start sector equals the end sector (start + sectors) of the previous read
    or write of the same device in issue order; otherwise random; the first is random.
    Flushes and discards neither count nor break a sequence.
  * Sizes in KiB (1 KiB = 2 sectors); min / median / max / mean / standard deviation
    (population) over requests. Sizes are whole sectors, so a histogram of sizes in sectors
    is exact: the median (mean of the two middle values for an even count) is exact too.
  * Address space: the device's capacity in sectors in 1,000 equal bins; a request falls in the
    bin of its start sector. The capacity (capacity_source): given (cli), else a raw trace's
    header (header), else sysfs for a raw trace recorded on this machine in this boot (sysfs),
    else the highest end sector of the device in the trace (highest_sector: then locality is
    relative to the part of the device the trace touched; `warning` says so). Requests that end
    beyond a known capacity are counted (requests_beyond_capacity) and make `warning` say the
    locality figures are not reliable. Locality = share of requests in the 100
    busiest bins (the hottest 10 % of the address space). A locality band = a maximal run of
    adjacent bins each holding more than LOCALITY_BAND_SHARE of the requests (0.1 % = the share
    every bin would hold if requests were spread evenly). Reads, writes and both.
  * Flushes and discards are counted in their own columns, left out of sizes, read/random
    percentages and IOPS (which count reads and writes only).
  * Trace length: earliest to latest event of the trace (any action); average IOPS = reads and
    writes issued / trace length.
  * Malformed: lines that are not events, and events that cannot be right: longer than any block
    request (4 GiB) or than the device, ending beyond sector 2^64, of another device than a raw
    trace's header names, or out of time order by more than 10 ms (sanity.py says how the event
    at fault is chosen). They are counted and left out of every statistic.
"""

# The code, by step:
#   parse.py     the event-by-event reference parsers (Event, ParseCounts, tracefs_line, events)
#   sanity.py    Screen: impossible records and events out of time order are malformed (both paths)
#   stats.py     histogram statistics and the reference Characterizer (one event at a time)
#   chunks.py    the fast path's input: byte chunks of the file decoded into numpy column batches
#   fast.py      FastCharacterizer: the reference's statistics, a batch at a time
#   outputs.py   characterize() (either path), the CSV / JSON outputs, describe(), the CLI command
#   __main__.py  python -m storagebrief.core.characterize TRACE [FORMAT]
from __future__ import annotations

from .chunks import batches
from .fast import FastCharacterizer
from .outputs import (CAPACITY_SOURCES, CSV_COLUMNS, SEED_COLUMNS, characterize, check_out_dir, describe,
                      main_characterize, write_outputs)
from .sanity import MAX_REQUEST_SECTORS, TIME_TOLERANCE_S, Screen
from .parse import (COMPLETE, FORMATS, ISSUE, MERGE, OTHER, REQUEUE, Event, ParseCounts, TraceError,
                    device_capacity_sectors, events, op_of, open_text, parse_blkparse, parse_tracefs,
                    tracefs_line)
from .tracefs_raw import is_raw
from .stats import (BINS, HOT_BINS, LOCALITY_BAND_SHARE, SAMPLE_POINTS, SECTOR_BYTES, Characterizer,
                    hist_percentile, hist_stats, locality)

# the tunables of the fast path (CHUNK_BYTES, BLKPARSE_BATCH) live in chunks.py: set them there
__all__ = [
    "BINS", "CAPACITY_SOURCES", "CSV_COLUMNS", "MAX_REQUEST_SECTORS", "Screen", "TIME_TOLERANCE_S", "check_out_dir", "COMPLETE", "Characterizer", "Event", "FORMATS", "FastCharacterizer", "HOT_BINS", "ISSUE",
    "LOCALITY_BAND_SHARE", "MERGE", "OTHER", "ParseCounts", "REQUEUE", "SAMPLE_POINTS", "SECTOR_BYTES", "SEED_COLUMNS",
    "TraceError", "batches", "characterize", "describe", "device_capacity_sectors", "events", "hist_percentile",
    "hist_stats", "is_raw", "locality", "sniff_format", "main_characterize", "op_of", "open_text", "parse_blkparse", "parse_tracefs",
    "tracefs_line", "write_outputs",
]


def sniff_format(path) -> str:
    """'tracefs-raw' for this package's binary traces, else 'tracefs' (kernel text)."""
    return "tracefs-raw" if is_raw(path) else "tracefs"
