"""One table of readers, a pair per trace format: its events one by one (the reference path) and
its column batches (the fast path), both in trace order."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from . import tracefs_raw
from .chunks import blkparse_batches, tracefs_batches
from .model import FORMATS, Batch, Devices, Event, ParseCounts, check_format
from .parse import blkparse_events, tracefs_events


class Reader(NamedTuple):
    events: Callable[[str | Path, ParseCounts], Iterator[Event]]
    batches: Callable[[str | Path, ParseCounts, Devices], Iterator[Batch]]


READERS = {
    "tracefs": Reader(tracefs_events, tracefs_batches),
    "tracefs-raw": Reader(tracefs_raw.events, tracefs_raw.batches),
    "blkparse": Reader(blkparse_events, blkparse_batches),
}
assert tuple(READERS) == FORMATS


def events(path: str | Path, fmt: str, counts: ParseCounts) -> Iterator[Event]:
    """The trace's events in order, one by one (the reference path)."""
    check_format(fmt)
    yield from READERS[fmt].events(path, counts)


def batches(path: str | Path, fmt: str, counts: ParseCounts, devices: Devices) -> Iterator[Batch]:
    """The trace's events in order, as column batches (the fast path of events())."""
    check_format(fmt)
    yield from READERS[fmt].batches(path, counts, devices)
