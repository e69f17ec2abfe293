"""The event-by-event reference parsers: tracefs and blkparse text -> Event, with counts of lines,
malformed lines and lost events (the formats and definitions are in the package docstring)."""
from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .model import COMPLETE, GZIP_ERRORS, ISSUE, MERGE, OTHER, REQUEUE, Event, ParseCounts, TraceError

# tracefs: "<comm>-<pid> [cpu] flags 1234.567890: block_rq_issue: 254,0 WS 65536 () 319433096 + 128 be,0,4 [dd]"
_TRACEFS = re.compile(
    r"(\d+\.\d+): block_rq_(issue|complete|requeue): (\d+),(\d+) (\S+) (?:\d+ )?\([^)]*\) (\d+) \+ (\d+)")
_TRACEFS_OTHER = re.compile(r"\d+\.\d+: \w+: ")
_LOST = re.compile(r"CPU:\d+ \[LOST (\d+) EVENTS\]")
# blkparse: "  8,0    3        4     0.000003000  1234  D   R 12345 + 8 [dd]"
_BLKPARSE = re.compile(r"\s*(\d+),(\d+)\s+\d+\s+\d+\s+(\d+\.\d+)\s+\d+\s+([A-Za-z])\s+(\S+)(?:\s+(\d+) \+ (\d+))?")
_BLKPARSE_SUMMARY = re.compile(r"(CPU\d+|Total) \(")

_TRACEFS_ACTION = {"issue": ISSUE, "complete": COMPLETE, "requeue": REQUEUE}
_BLKPARSE_ACTION = {"D": ISSUE, "C": COMPLETE, "R": REQUEUE, "M": MERGE, "F": MERGE}


def op_of(rwbs: str) -> str:
    """'R', 'W', 'F' (flush), 'D' (discard) or 'N' (other) from the kernel's rwbs string.

    A leading F before another operation letter is the preflush flag (FWS: a write with a
    preflush); the flush request the block layer sends to the device shows as FF or F."""
    s = rwbs
    if len(s) > 1 and s[0] == "F" and s[1] in "RWDNF":
        s = s[1:]
    c = s[:1]
    return c if c in ("R", "W", "F", "D") else "N"


def open_text(path: str | Path):
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace file '{path}' does not exist")
    if not path.is_file():
        raise TraceError(f"trace '{path}' is not a file")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise TraceError(f"cannot read trace '{path}': {exc.strerror}") from None
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", errors="replace")
    return open(path, "rt", errors="replace")


def damaged(path, exc: BaseException) -> TraceError:
    """The one-line error for a trace whose compressed data cannot be read to its end."""
    what = "ends early (cut off)" if isinstance(exc, EOFError) else f"is damaged ({exc})"
    return TraceError(f"trace '{path}' {what}: nothing was characterized; copy the file again, or keep "
                      f"its readable part with `gzip -dc {path} > trace.txt` and characterize that")


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


def parse_dev(ma: str, mi: str) -> tuple[int, int]:
    """(major, minor) of their text, each pair made once (events share the tuple)."""
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
        return Event(float(t), _TRACEFS_ACTION[kind], parse_dev(ma, mi), _op(rwbs), int(sector), int(n))
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
    """blkparse's events. Its summary (per CPU, total) is skipped up to the next event line: the
    outputs of two runs may have been appended into one file. blkparse counts time from the start
    of its own trace, so when an output after a summary starts before the time already reached,
    its clock is moved on to continue where the one before ended (counted: clock_restarts)."""
    match = _BLKPARSE.match
    summary = False
    shift, latest = 0.0, None
    for line in lines:
        counts.lines += 1
        m = match(line)
        if m is not None:
            ma, mi, t, action, rwbs, sector, n = m.groups()
            act = _BLKPARSE_ACTION.get(action, OTHER)
            if act != OTHER and sector is None and op_of(rwbs) not in ("F", "N"):
                _malformed(counts, line)      # a data request without its sector range
                continue
            t = float(t)
            if summary:                       # the first event of an appended output
                summary = False
                if latest is not None and t + shift < latest:
                    shift = latest - t
                    counts.clock_restarts += 1
            if shift:
                t += shift
            if latest is None or t > latest:
                latest = t
            yield Event(t, act, parse_dev(ma, mi), _op(rwbs), int(sector) if sector else 0, int(n) if n else 0)
            continue
        s = line.strip()
        if summary or not s:
            counts.ignored += 1
        elif _BLKPARSE_SUMMARY.match(s):
            summary = True                    # blkparse's per-CPU / total summary follows
            counts.ignored += 1
        else:
            _malformed(counts, line)


def _read_text(path: str | Path, parse: Callable[[Iterable[str], ParseCounts], Iterator[Event]],
               counts: ParseCounts) -> Iterator[Event]:
    with open_text(path) as fh:
        try:
            yield from parse(fh, counts)
        except GZIP_ERRORS as exc:
            raise damaged(path, exc) from None


def tracefs_events(path: str | Path, counts: ParseCounts) -> Iterator[Event]:
    """The events of a tracefs text file, one by one (the reference path)."""
    return _read_text(path, parse_tracefs, counts)


def blkparse_events(path: str | Path, counts: ParseCounts) -> Iterator[Event]:
    """The events of a blkparse text file, one by one (the reference path)."""
    return _read_text(path, parse_blkparse, counts)
