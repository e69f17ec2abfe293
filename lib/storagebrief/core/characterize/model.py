"""The characterization's data model, shared by every step (a leaf: imports nothing of the package).

  Event, ParseCounts, TraceError   one event as the reference path reads it, what reading counted,
                                   and the one error a trace that cannot be characterized raises
  Batch, Devices                   the fast path's column batches of events and its device ids
  action / op codes                how a Batch stores an event's action and operation (int8)
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

FORMATS = ("tracefs", "tracefs-raw", "blkparse")   # kernel text, our binary pages, blkparse text

# normalised actions
ISSUE, COMPLETE, REQUEUE, MERGE, OTHER = "D", "C", "R", "M", "-"

# what a damaged gzip raises while it is read: cut off (EOFError), bad header or CRC
# (BadGzipFile, an OSError), bad deflate data (zlib.error)
GZIP_ERRORS = (EOFError, OSError, zlib.error)


class TraceError(ValueError):
    """The trace cannot be characterized (missing file, unknown format, no requests)."""


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")


class Event(NamedTuple):
    t: float          # seconds
    action: str       # ISSUE / COMPLETE / REQUEUE / MERGE / OTHER
    dev: tuple[int, int]
    op: str           # R W F D N
    sector: int
    sectors: int


@dataclass
class ParseCounts:
    lines: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    lost_events: int = 0
    ignored: int = 0          # valid lines of events we do not use (other actions, headers, summary)
    impossible_examples: list[str] = field(default_factory=list)   # parsed, but refused (sanity.Screen)
    clock_restarts: int = 0   # blkparse outputs appended after a summary whose clock started again


# -- the fast path's columns ----------------------------------------------------------------------
A_ISSUE, A_COMPLETE, A_REQUEUE, A_MERGE, A_OTHER = range(5)
ACT_CODE = {ISSUE: A_ISSUE, COMPLETE: A_COMPLETE, REQUEUE: A_REQUEUE, MERGE: A_MERGE, OTHER: A_OTHER}
ACTION_OF = {code: action for action, code in ACT_CODE.items()}
OP_NAMES = ("R", "W", "F", "D", "N")
OP_CODE = {o: i for i, o in enumerate(OP_NAMES)}
MAX_DEVS = 1 << 9               # devices per trace in the packed key (more: tuple keys, event by event)
MAX_SECTOR = 1 << 50            # beyond: event by event (Python integers)


class Batch:
    """Columns of events: t, action, device id, op, sector, sectors (numpy arrays)."""
    __slots__ = ("t", "act", "dev", "op", "sector", "n")

    def __init__(self, t, act, dev, op, sector, n):
        self.t, self.act, self.dev, self.op, self.sector, self.n = t, act, dev, op, sector, n

    def __len__(self):
        return len(self.t)


class Devices:
    """Device tuples <-> small ids (shared by the parser and the characterizer)."""

    def __init__(self):
        self.ids: dict[tuple[int, int], int] = {}
        self.devs: list[tuple[int, int]] = []

    def id(self, dev: tuple[int, int]) -> int:
        i = self.ids.get(dev)
        if i is None:
            i = self.ids[dev] = len(self.devs)
            self.devs.append(dev)
        return i


def concat_rows(a: Batch, b: Batch, order=None) -> Batch:
    """a's events, then b's (or, given an order, the joined rows in that order)."""
    import numpy as np      # numpy inside functions: importing the package (the CLI) stays light
    cols = []
    for k in Batch.__slots__:
        x, y = getattr(a, k), getattr(b, k)
        if x.dtype != y.dtype:
            x, y = x.astype(object), y.astype(object)
        cols.append(np.concatenate([x, y]) if order is None else np.concatenate([x, y])[order])
    return Batch(*cols)
