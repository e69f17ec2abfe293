"""The event-by-event reference parsers: tracefs and blkparse text -> Event, with counts of lines,
malformed lines and lost events (the formats and definitions are in the package docstring)."""
from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

FORMATS = ("tracefs", "tracefs-raw", "blkparse")   # kernel text, our binary pages, blkparse text

# tracefs: "<comm>-<pid> [cpu] flags 1234.567890: block_rq_issue: 254,0 WS 65536 () 319433096 + 128 be,0,4 [dd]"
_TRACEFS = re.compile(
    r"(\d+\.\d+): block_rq_(issue|complete|requeue): (\d+),(\d+) (\S+) (?:\d+ )?\([^)]*\) (\d+) \+ (\d+)")
_TRACEFS_OTHER = re.compile(r"\d+\.\d+: \w+: ")
_LOST = re.compile(r"CPU:\d+ \[LOST (\d+) EVENTS\]")
# blkparse: "  8,0    3        4     0.000003000  1234  D   R 12345 + 8 [dd]"
_BLKPARSE = re.compile(r"\s*(\d+),(\d+)\s+\d+\s+\d+\s+(\d+\.\d+)\s+\d+\s+([A-Za-z])\s+(\S+)(?:\s+(\d+) \+ (\d+))?")
_BLKPARSE_SUMMARY = re.compile(r"(CPU\d+|Total) \(")

# normalised actions
ISSUE, COMPLETE, REQUEUE, MERGE, OTHER = "D", "C", "R", "M", "-"
_TRACEFS_ACTION = {"issue": ISSUE, "complete": COMPLETE, "requeue": REQUEUE}
_BLKPARSE_ACTION = {"D": ISSUE, "C": COMPLETE, "R": REQUEUE, "M": MERGE, "F": MERGE}


class TraceError(ValueError):
    """The trace cannot be characterized (missing file, unknown format, no requests)."""


def op_of(rwbs: str) -> str:
    """'R', 'W', 'F' (flush), 'D' (discard) or 'N' (other) from the kernel's rwbs string.

    A leading F before another operation letter is the preflush flag (FWS: a write with a
    preflush); the flush request the block layer sends to the device shows as FF or F."""
    s = rwbs
    if len(s) > 1 and s[0] == "F" and s[1] in "RWDNF":
        s = s[1:]
    c = s[:1]
    return c if c in ("R", "W", "F", "D") else "N"


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


def open_text(path: str | Path):
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace file '{path}' does not exist")
    if not path.is_file():
        raise TraceError(f"trace '{path}' is not a file")
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", errors="replace")
    return open(path, "rt", errors="replace")


def _malformed(counts: ParseCounts, line: str) -> None:
    counts.malformed += 1
    if len(counts.malformed_examples) < 5:
        counts.malformed_examples.append(line.rstrip("\n")[:200])


_OPS: dict[str, str] = {}
_DEVS: dict[tuple[str, str], tuple[int, int]] = {}


def _op(rwbs: str) -> str:
    op = _OPS.get(rwbs)
    if op is None:
        op = _OPS[rwbs] = op_of(rwbs)
    return op


def _dev(ma: str, mi: str) -> tuple[int, int]:
    d = _DEVS.get((ma, mi))
    if d is None:
        d = _DEVS[(ma, mi)] = (int(ma), int(mi))
    return d


def tracefs_line(line: str, counts: ParseCounts) -> Event | None:
    """One tracefs line: its event, or None (header, lost-events line, other event, malformed:
    counted in counts). Does not count the line itself."""
    # the event name sits after the task, CPU and flags: start the regex there, not at column 0
    i = line.find(": block_rq_")
    m = _TRACEFS.match(line, line.rfind(" ", 0, i) + 1) if i > 0 else None
    if m is not None:
        t, kind, ma, mi, rwbs, sector, n = m.groups()
        return Event(float(t), _TRACEFS_ACTION[kind], _dev(ma, mi), _op(rwbs), int(sector), int(n))
    s = line.strip()
    if not s or s[0] == "#":
        counts.ignored += 1
        return None
    lm = _LOST.search(s)
    if lm is not None:
        counts.lost_events += int(lm.group(1))
    elif _TRACEFS_OTHER.search(s) is not None and "block_rq_" not in s:
        counts.ignored += 1          # another event in the same buffer
    else:
        _malformed(counts, line)
    return None


def parse_tracefs(lines: Iterable[str], counts: ParseCounts) -> Iterator[Event]:
    for line in lines:
        counts.lines += 1
        ev = tracefs_line(line, counts)
        if ev is not None:
            yield ev


def parse_blkparse(lines: Iterable[str], counts: ParseCounts) -> Iterator[Event]:
    match = _BLKPARSE.match
    summary = False
    for line in lines:
        counts.lines += 1
        if summary:
            counts.ignored += 1
            continue
        m = match(line)
        if m is not None:
            ma, mi, t, action, rwbs, sector, n = m.groups()
            act = _BLKPARSE_ACTION.get(action, OTHER)
            if act != OTHER and sector is None and op_of(rwbs) not in ("F", "N"):
                _malformed(counts, line)      # a data request without its sector range
                continue
            yield Event(float(t), act, _dev(ma, mi), _op(rwbs),
                        int(sector) if sector else 0, int(n) if n else 0)
            continue
        s = line.strip()
        if not s:
            counts.ignored += 1
        elif _BLKPARSE_SUMMARY.match(s):
            summary = True                    # blkparse's per-CPU / total summary follows
            counts.ignored += 1
        else:
            _malformed(counts, line)


def events(path: str | Path, fmt: str, counts: ParseCounts) -> Iterator[Event]:
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'; allowed: {', '.join(FORMATS)}")
    if fmt == "tracefs-raw":
        from .tracefs_raw import events as raw_events
        yield from raw_events(path, counts)
        return
    parse = parse_tracefs if fmt == "tracefs" else parse_blkparse
    with open_text(path) as fh:
        yield from parse(fh, counts)


def device_capacity_sectors(dev: tuple[int, int]) -> int | None:
    """A block device's size in sectors from sysfs (/sys/dev/block/MAJ:MIN/size), if present."""
    try:
        n = int(Path(f"/sys/dev/block/{dev[0]}:{dev[1]}/size").read_text())
    except (OSError, ValueError):
        return None
    return n or None
