"""Block-level I/O characterization of a trace (the Samsung SDC 2023 study's btt-style summary statistics).

Reads block traces as text, streaming, in bounded memory:
  tracefs   lines of the kernel's block:block_rq_issue / block_rq_complete / block_rq_requeue
            events (trace_pipe or trace), with or without the kernel 6.x ioprio field
            (`be,0,4`) after the sector range; `CPU:N [LOST M EVENTS]` lines count as lost events
  blkparse  blkparse's default text output: D = issued to the device, C = completed,
            M / F = back / front merges, R = requeue; other actions (Q G I P U A X S T m ...)
            are valid but not needed; the per-CPU summary at the end is skipped

"""
# (the Definitions follow, appended from definitions.py: characterization.json carries them too)

# The code, by step; each module imports only those above it (tests/test_imports.py):
#   model.py        the data model every step shares: Event, ParseCounts, TraceError, the fast
#                   path's Batch / Devices and action / op codes, FORMATS
#   definitions.py  the definitions below, as text
#   parse.py        the event-by-event reference parsers of text (tracefs_line, parse_tracefs, ...)
#   tracefs_raw.py  the binary raw traces (core/traceformat.py): events and batches
#   sanity.py       Screen: impossible records and events out of time order are malformed (both paths)
#   stats.py        histogram statistics and the reference Characterizer (one event at a time)
#   chunks.py       the fast path's text input: byte chunks of the file decoded into column batches
#   readers.py      one table: each format's event reader and batch reader (events(), batches())
#   fast.py         FastCharacterizer: the reference's statistics, a batch at a time
#   diskstats.py    the fallback row without a trace: what the monitor's diskstats give
#   outputs.py      characterize() (either path), the CSV / JSON outputs, describe(), the CLI command
#   raw_writer.py   synthetic raw traces (tests, benchmarks)
#   __main__.py     python -m storagebrief.core.characterize TRACE [FORMAT]
from __future__ import annotations

from ..machine import device_capacity_sectors
from .definitions import DEFINITIONS, DEFINITIONS_HEADING
from .diskstats import from_diskstats
from .fast import FastCharacterizer
from .model import COMPLETE, FORMATS, ISSUE, MERGE, OTHER, REQUEUE, Event, ParseCounts, TraceError
from .outputs import (CAPACITY_SOURCES, CSV_COLUMNS, SEED_COLUMNS, characterize, check_out_dir, describe,
                      main_characterize, write_outputs)
from .parse import op_of, open_text, parse_blkparse, parse_tracefs, tracefs_line
from .readers import batches, events
from .sanity import MAX_REQUEST_SECTORS, TIME_TOLERANCE_S, Screen
from .stats import (BINS, HOT_BINS, LOCALITY_BAND_SHARE, SAMPLE_POINTS, SECTOR_BYTES, Characterizer,
                    hist_percentile, hist_stats, locality)
from .tracefs_raw import is_raw

__doc__ += DEFINITIONS_HEADING + DEFINITIONS

# the tunables of the fast path (CHUNK_BYTES, BLKPARSE_BATCH) live in chunks.py: set them there
__all__ = [
    "BINS", "CAPACITY_SOURCES", "CSV_COLUMNS", "MAX_REQUEST_SECTORS", "Screen", "TIME_TOLERANCE_S", "check_out_dir", "COMPLETE", "Characterizer", "Event", "FORMATS", "FastCharacterizer", "HOT_BINS", "ISSUE",
    "LOCALITY_BAND_SHARE", "MERGE", "OTHER", "ParseCounts", "REQUEUE", "SAMPLE_POINTS", "SECTOR_BYTES", "SEED_COLUMNS",
    "TraceError", "batches", "characterize", "describe", "device_capacity_sectors", "events", "from_diskstats", "hist_percentile",
    "hist_stats", "is_raw", "locality", "sniff_format", "main_characterize", "op_of", "open_text", "parse_blkparse", "parse_tracefs",
    "tracefs_line", "write_outputs",
]


def sniff_format(path) -> str:
    """'tracefs-raw' for this package's binary traces, else 'tracefs' (kernel text)."""
    return "tracefs-raw" if is_raw(path) else "tracefs"
