"""The raw block-trace file: its layout and constants, shared by the writer (core.blocktrace's
reader child; characterize.raw_writer for synthetic traces) and the decoder
(characterize.tracefs_raw). A leaf: stdlib only, imports nothing of the package.

The reader copies the instance's binary ring-buffer pages (per_cpu/cpuN/trace_pipe_raw), not
the text of trace_pipe: the kernel formats nothing while the clock runs (with text, fio 4 KiB
random O_DIRECT kept 0.79-0.91 of its IOPS; with pages it stays within noise). The file is
self-describing, so it can be decoded anywhere (characterize --format tracefs-raw):

  gzip of:  RAW_MAGIC line, one JSON line (page size, clock, cpus, the kernel's header_page and
            each event's `format` text with its id; the traced device [major, minor], its
            capacity_sectors and the host that recorded it: files made before these three were
            added lack them), then records: RECORD header (kind, cpu, length) + payload.
  kind P:   whole ring-buffer pages of one CPU, as read.
  kind S:   a sync mark (payload: u64 trace-clock ns) written before each drain; every event
            older than it is in the records before the next sync mark, so a decoder can merge
            the CPUs in time order holding only one drain interval of events.
"""
from __future__ import annotations

import json
import struct

RAW_MAGIC = b"storagebrief tracefs-raw 1\n"
RECORD = struct.Struct("<cHI")
PAGES, SYNC = b"P", b"S"
SYNC_TIME = struct.Struct("<Q")          # a sync mark's payload: trace-clock ns
# the block events a trace holds (the tracepoints the writer enables, the records the decoder reads)
EVENTS = ("block_rq_issue", "block_rq_complete", "block_rq_requeue")


def dev_t(major: int, minor: int) -> int:
    """The kernel's internal dev_t (MAJOR << 20 | MINOR), as the `dev` field of block events."""
    return (major << 20) | minor


def dev_tuple(dev: int) -> tuple[int, int]:
    """(major, minor) of a kernel dev_t."""
    return dev >> 20, dev & ((1 << 20) - 1)


def file_start(header: dict) -> bytes:
    """The magic line and the JSON header line a trace starts with."""
    return RAW_MAGIC + json.dumps(header).encode() + b"\n"


def sync_record(now_ns: int) -> bytes:
    return RECORD.pack(SYNC, 0, SYNC_TIME.size) + SYNC_TIME.pack(now_ns)


def pages_record(cpu: int, data: bytes) -> bytes:
    return RECORD.pack(PAGES, cpu, len(data)) + data
