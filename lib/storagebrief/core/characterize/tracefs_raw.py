"""Decoding the binary traces the block-trace reader writes (format: core/traceformat.py): the
kernel's ring-buffer pages of each CPU, merged into one time-ordered stream of block events.

A page (its layout comes from the file's copy of events/header_page) is a u64 timestamp, a commit
word (bytes of event data; bit 31: events were lost before this page, bit 30: their count is
stored after the data) and the events. Each event starts with a 32-bit word: type_len (5 bits)
and time_delta (27 bits).
  type_len 1..28  a record of type_len * 4 bytes follows
  type_len 0      the next word is the record's length in bytes (itself included), record after it
  29              padding (a discarded record, length in the next word; time_delta 0: page ends)
  30              time extend: delta = next word << 27 | time_delta (8 bytes in all)
  31              absolute time stamp, same layout (the top 5 bits come from the running time)
A record's time is the page timestamp plus the deltas of every record and extend up to and
including it (padding adds nothing, as in the kernel's own reader). Record fields (dev, sector,
nr_sector, rwbs) are read at the offsets of the event's `format` text kept in the file.

Pages are decoded with numpy: the length of a would-be event at every 4-byte word is computed at
once, then one short Python loop follows the chain of lengths through each page; all fields are
gathered in bulk. The CPUs' events are merged at the reader's sync marks (every event older than
a mark is in the file before the next one), so memory holds about one drain interval of events.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Iterator

from ..machine import same_host
from ..traceformat import EVENTS, PAGES, RAW_MAGIC, RECORD, SYNC, SYNC_TIME, dev_tuple
from .model import (A_COMPLETE, A_ISSUE, A_REQUEUE, ACTION_OF, GZIP_ERRORS, OP_CODE, OP_NAMES, Batch, Devices, Event,
                    ParseCounts, TraceError)

# numpy is imported inside the functions: importing the package (the CLI's start) stays light

DECODE_BYTES = 4 << 20          # pages decoded together (numpy steps cost per call, not per event)
SYNC_MARGIN_NS = 20_000_000     # clock skew between CPUs and events committed while the mark was taken
_MISSED_STORED, _LENGTH_MASK = 1 << 30, (1 << 30) - 1   # bit 31 (events lost): the stats count them
_ACTIONS = dict(zip(EVENTS, (A_ISSUE, A_COMPLETE, A_REQUEUE)))     # block_rq_issue / _complete / _requeue
_FIELD = re.compile(r"field:([^;]*);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);")
_ID = re.compile(r"^ID: (\d+)", re.M)
# Limits a crafted file cannot pass (the reader's own files stay far below them):
MAX_HEADER_BYTES = 1 << 20      # the header line: the kernel's formats take about 10 KiB
MAX_PAGE_BYTES = 1 << 20        # a ring-buffer (sub-)page; a decode step costs page/8 numpy steps
MAX_RECORD_BYTES = (1 << 30) + MAX_PAGE_BYTES   # one CPU's drain: at most run.trace_buffer_kib (1 GiB)
_READ_PIECE = 16 << 20          # a record is read in pieces: a length field alone allocates nothing


class _Unreadable(Exception):
    """The record framing is lost: what follows cannot be read."""


def is_raw(path: str | Path) -> bool:
    """Whether a file is one of our binary traces (gzip whose first line is the magic)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return False
        with gzip.open(path, "rb") as fh:
            return fh.read(len(RAW_MAGIC)) == RAW_MAGIC
    except GZIP_ERRORS:
        return False


def _fields(text: str) -> dict[str, tuple[int, int]]:
    """name -> (offset, size) of a `format` / header_page text."""
    out = {}
    for decl, off, size, _ in _FIELD.findall(text):
        name = decl.split()[-1].split("[")[0] if decl.split() else ""
        out[name] = (int(off), int(size))
    return out


class _Layout:
    """Where things are in a page and in each block event, from the file's header."""

    def __init__(self, header: dict):
        try:
            hp = _fields(header["header_page"])
            self.page = int(header["page_size"])
            self.ts_off = hp["timestamp"][0]
            self.commit_off, self.commit_size = hp["commit"]
            self.data_off = hp["data"][0]
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"raw trace header lacks the page layout ({exc})") from None
        if (self.data_off % 4 or self.page % 4 or not self.data_off < self.page <= MAX_PAGE_BYTES
                or self.commit_size not in (4, 8) or self.ts_off + 8 > self.data_off
                or hp["commit"][0] + self.commit_size > self.data_off):
            raise TraceError(f"raw trace page layout not understood: data at {self.data_off}, "
                             f"page {self.page} bytes (at most {MAX_PAGE_BYTES:,}), timestamp at {self.ts_off}, "
                             f"commit of {self.commit_size} bytes at {self.commit_off}")
        self.events = {}              # event id -> (action code, {field: (offset, size)})
        events = header.get("events")
        for name, text in (events.items() if isinstance(events, dict) else ()):
            if name not in _ACTIONS:
                continue
            if not isinstance(text, str):
                raise TraceError(f"raw trace header: the format of {name} is not text")
            m = _ID.search(text)
            f = _fields(text)
            if m and all(k in f for k in ("dev", "sector", "nr_sector", "rwbs")):
                self._check_event(name, int(m.group(1)), f)
                self.events[int(m.group(1))] = (_ACTIONS[name], f)
        if not self.events:
            raise TraceError("raw trace header describes none of the block events "
                             "(block_rq_issue / block_rq_complete / block_rq_requeue)")


    def _check_event(self, name: str, eid: int, f: dict) -> None:
        """The fields are read as little-endian integers of 1, 2, 4 or 8 bytes inside a page."""
        bad = [k for k in ("dev", "sector", "nr_sector") if f[k][1] not in (1, 2, 4, 8)]
        if f["rwbs"][1] < 2:              # its first two characters are read
            bad.append("rwbs")
        bad += [k for k in ("dev", "sector", "nr_sector", "rwbs") if sum(f[k]) > self.page and k not in bad]
        if bad or eid >= 1 << 16:         # common_type is 16 bits
            raise TraceError(f"raw trace header: the format of {name} is not understood "
                             f"({'ID ' + str(eid) if eid >= 1 << 16 else 'fields ' + ', '.join(bad)})")


def _records(fh) -> Iterator[tuple[bytes, int, bytes]]:
    while True:
        head = fh.read(RECORD.size)
        if len(head) < RECORD.size:
            return                       # end (a cut-off record header: the reader was killed)
        kind, cpu, n = RECORD.unpack(head)
        if n > MAX_RECORD_BYTES:
            raise _Unreadable(f"a record of {n:,} bytes (at most {MAX_RECORD_BYTES:,})")
        pieces, left = [], n
        while left:
            piece = fh.read(min(left, _READ_PIECE))
            if not piece:
                break
            pieces.append(piece)
            left -= len(piece)
        data = b"".join(pieces)
        if len(data) < n:
            data = data[: len(data) // 8 * 8] if kind == PAGES else b""
        yield kind, cpu, data


def _gather(b, pos, size: int):
    """Little-endian unsigned integers of `size` bytes at byte positions pos of b."""
    import numpy as np
    idx = pos[:, None] + np.arange(size)
    return b[idx].copy().view(f"<u{size}")[:, 0].astype(np.int64 if size < 8 else np.uint64)


def _walk(w32, start, end):
    """Word indexes of every event, following all pages' chains of lengths at once (one numpy step
    per event slot of the fullest page): (word index, page) of each, in page order."""
    import numpy as np
    last = len(w32) - 1
    o, steps = start.copy(), []
    live = o < end
    while live.any():
        steps.append(np.where(live, o, -1))
        x = w32[np.minimum(o, last)].astype(np.int64)
        a0 = w32[np.minimum(o + 1, last)].astype(np.int64)
        tl = x & 31
        size = np.where(tl == 0, 1 + a0 // 4, 1 + tl)
        size = np.where(tl == 29, np.where((x >> 5) == 0, end - o, 1 + a0 // 4), size)   # delta 0: page ends
        size = np.where(tl >= 30, 2, size)
        o = np.where(live, o + np.maximum(size, 1), o)
        live = o < end
    if not steps:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    grid = np.stack(steps, axis=1)            # page x slot
    pg, _ = np.nonzero(grid >= 0)
    return grid[grid >= 0], pg


def decode_pages(data: bytes, lay: _Layout, counts: ParseCounts, cpu: int = 0) -> dict | None:
    """Columns (t ns, act, dev, op, sector, n, cpu) of the block events in whole pages of one CPU,
    in page order (which is time order on one CPU)."""
    import numpy as np
    npages = len(data) // lay.page
    if npages == 0:
        return None
    a = np.frombuffer(data, np.uint8, npages * lay.page).reshape(npages, lay.page)
    ts0 = a[:, lay.ts_off:lay.ts_off + 8].copy().view("<u8")[:, 0]
    commit = a[:, lay.commit_off:lay.commit_off + lay.commit_size].copy().view(f"<i{lay.commit_size}")[:, 0]
    commit = commit.astype(np.int64)
    length = commit & _LENGTH_MASK
    room = lay.page - lay.data_off
    bad = length > room
    if bad.any():
        counts.malformed += int(bad.sum())
        if len(counts.malformed_examples) < 5:
            counts.malformed_examples.append(f"raw page with {int(length[bad][0])} data bytes (room {room})")
        length = np.where(bad, 0, length)
    data_at = np.arange(npages, dtype=np.int64) * lay.page + lay.data_off      # byte where each page's data starts
    for p in np.flatnonzero(((commit & _MISSED_STORED) != 0) & (length + 8 <= room)).tolist():
        counts.lost_events += int(a[p, lay.data_off + length[p]:lay.data_off + length[p] + 8].copy().view("<u8")[0])
    b = a.reshape(-1)
    w32 = b.view("<u4")
    o, pg = _walk(w32, data_at // 4, (data_at + length) // 4)
    if not len(o):
        return None
    x = w32[o].astype(np.int64)
    a0 = w32[np.minimum(o + 1, len(w32) - 1)].astype(np.int64)
    t = x & 31
    delta = x >> 5
    delta = np.where(t == 30, (a0 << 27) + delta, np.where(t == 29, 0, delta))
    ts = _times(ts0, pg, t, delta, x, a0)
    data_ev = t <= 28
    pos = 4 * o + np.where(t == 0, 8, 4)
    end = 4 * o + 4 + np.where(t == 0, a0, 4 * t)
    ok = data_ev & (end <= data_at[pg] + length[pg]) & (end > pos + 2)
    if (data_ev & ~ok).any():
        counts.malformed += int((data_ev & ~ok).sum())
    pos, ts, reclen = pos[ok], ts[ok], (end - pos)[ok]
    etype = _gather(b, pos, 2)
    counts.lines += len(pos)
    n = len(pos)
    act = np.full(n, -1, dtype=np.int8)
    dev, sector, nsec = (np.zeros(n, dtype=np.int64) for _ in range(3))
    op = np.zeros(n, dtype=np.int8)
    for eid, (code, f) in lay.events.items():     # fields in page order: ties in time keep it
        m = etype == eid
        need = max(off + size for off, size in (f["dev"], f["sector"], f["nr_sector"], f["rwbs"]))
        bad = m & (reclen < need)
        if bad.any():
            counts.malformed += int(bad.sum())
            m &= ~bad
        if not m.any():
            continue
        p = pos[m]
        act[m] = code
        dev[m] = _gather(b, p + f["dev"][0], f["dev"][1])
        sector[m] = _gather(b, p + f["sector"][0], f["sector"][1]).astype(np.int64)
        nsec[m] = _gather(b, p + f["nr_sector"][0], f["nr_sector"][1])
        op[m] = _op_codes(b[p + f["rwbs"][0]], b[p + f["rwbs"][0] + 1])
    keep = act >= 0
    counts.ignored += int((~keep).sum())
    if not keep.any():
        return None
    return {"t": ts[keep], "act": act[keep], "dev": dev[keep], "op": op[keep], "sector": sector[keep],
            "n": nsec[keep], "cpu": np.full(int(keep.sum()), cpu, dtype=np.int16)}


def _times(ts0, pg, t, delta, x, a0):
    """Each event's time: page timestamp + running sum of deltas within its page."""
    import numpy as np
    cs = np.cumsum(delta.astype(np.uint64))
    first = np.r_[0, np.flatnonzero(np.diff(pg)) + 1]
    counts = np.diff(np.r_[first, len(pg)])
    before = np.zeros(len(first), dtype=np.uint64)
    before[1:] = cs[first[1:] - 1]
    out = cs - np.repeat(before, counts) + np.repeat(ts0[pg[first]].astype(np.uint64), counts)
    if (t == 31).any():                    # absolute stamps (rare): replay those pages one by one
        for p in np.unique(pg[t == 31]).tolist():
            now = int(ts0[p])
            for i in np.flatnonzero(pg == p).tolist():
                if t[i] == 31:
                    now = (now & ~((1 << 59) - 1)) | (int(a0[i]) << 27) | (int(x[i]) >> 5)
                else:
                    now += int(delta[i])
                out[i] = now
    return out.astype(np.int64)


_OP_TABLE = None


def _op_codes(c0, c1):
    """R/W/F/D/N codes from the first two rwbs characters (a leading F before R/W/D/N/F is the
    preflush flag, as op_of says)."""
    import numpy as np
    global _OP_TABLE
    if _OP_TABLE is None:
        _OP_TABLE = np.full(256, OP_CODE["N"], dtype=np.int8)
        for ch in "RWFD":
            _OP_TABLE[ord(ch)] = OP_CODE[ch]
    pre = (c0 == ord("F")) & np.isin(c1, np.frombuffer(b"RWDNF", np.uint8))
    return _OP_TABLE[np.where(pre, c1, c0)]


def read_header(fh, path) -> dict:
    magic = fh.read(len(RAW_MAGIC))
    if magic != RAW_MAGIC:
        raise TraceError(f"'{path}' is not a storagebrief raw trace (no '{RAW_MAGIC.decode().strip()}' line); "
                         "for kernel text use --format tracefs")
    line = fh.readline(MAX_HEADER_BYTES + 1)
    if not line.endswith(b"\n"):
        raise TraceError(f"'{path}': the raw trace header is cut off or longer than {MAX_HEADER_BYTES:,} bytes; "
                         "this is not a trace the block-trace reader wrote")
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):      # nesting deeper than Python's stack: crafted
        header = None
    if not isinstance(header, dict):
        raise TraceError(f"'{path}': the raw trace header is not a JSON object; the file was not written by "
                         "storagebrief's block-trace reader or was altered since: record the trace again")
    return header


def _open_header(path: Path):
    """(open gzip file positioned after the header, header) of a raw trace; TraceError otherwise."""
    if not path.is_file():
        raise TraceError(f"trace file '{path}' does not exist" if not path.exists() else f"trace '{path}' is not a file")
    if not is_raw(path):
        raise TraceError(f"'{path}' is not a storagebrief raw trace (a gzip file starting with "
                         f"'{RAW_MAGIC.decode().strip()}'); for the kernel's text use --format tracefs")
    try:
        fh = gzip.open(path, "rb")
    except OSError as exc:
        raise TraceError(f"cannot read trace '{path}': {exc}") from None
    try:
        return fh, read_header(fh, path)
    except GZIP_ERRORS as exc:
        fh.close()
        raise TraceError(f"'{path}' is not a readable raw trace ({exc})") from None
    except BaseException:
        fh.close()
        raise


def header_info(path: str | Path) -> dict:
    """What the header says about the traced device: device (major, minor), capacity_sectors,
    host and same_host (recorded on this machine in this boot). Traces written before these
    fields existed lack them: None (unknown). A field present with a wrong value is a TraceError."""
    path = Path(path)
    fh, header = _open_header(path)
    fh.close()
    device, cap, host = header.get("device"), header.get("capacity_sectors"), header.get("host")
    if device is not None:
        if not (isinstance(device, list) and len(device) == 2 and all(type(x) is int for x in device)
                and 0 <= device[0] < 1 << 12 and 0 <= device[1] < 1 << 20):
            raise TraceError(f"'{path}': the raw trace header's device {str(device)[:40]!r} is not [major, minor]")
        device = (device[0], device[1])
    if cap is not None and not (type(cap) is int and 0 < cap < 1 << 64):
        raise TraceError(f"'{path}': the raw trace header's capacity_sectors {str(cap)[:40]!r} is not a "
                         "positive 64-bit number")
    if host is not None and not (isinstance(host, dict) and all(isinstance(v, str) for v in host.values())):
        raise TraceError(f"'{path}': the raw trace header's host is not a set of names")
    return {"device": device, "capacity_sectors": cap, "host": host, "same_host": host is not None and same_host(host)}


def columns(path: str | Path, counts: ParseCounts) -> Iterator[dict]:
    """Column batches (numpy: t ns, act, dev (kernel dev_t), op, sector, n, cpu) in time order."""
    import numpy as np
    path = Path(path)
    fh, header = _open_header(path)
    try:
        lay = _Layout(header)
    except TraceError as exc:
        fh.close()
        raise TraceError(f"'{path}': {exc}; the file was not written by storagebrief's block-trace reader or "
                         "was altered since: record the trace again") from None
    except BaseException:
        fh.close()
        raise
    bufs: dict[int, list[bytes]] = {}       # cpu -> page bytes read since the last decode
    pending: list[dict] = []                 # decoded, not yet safe to release (may precede other CPUs')
    last_sync = None

    def decode_all():
        for cpu in sorted(bufs):
            data = b"".join(bufs[cpu])
            whole = len(data) // lay.page * lay.page
            bufs[cpu] = [data[whole:]] if whole < len(data) else []
            if whole:
                cols = decode_pages(data[:whole] if whole < len(data) else data, lay, counts, cpu)
                if cols is not None:
                    pending.append(cols)

    def release(limit):
        if not pending:
            return None
        merged = {k: np.concatenate([c[k] for c in pending]) for k in pending[0]}
        order = np.lexsort((merged["cpu"], merged["t"]))     # the kernel's merge: earliest, then lowest CPU
        merged = {k: v[order] for k, v in merged.items()}
        cut = len(merged["t"]) if limit is None else int(np.searchsorted(merged["t"], limit, side="left"))
        pending.clear()
        if cut < len(merged["t"]):
            pending.append({k: v[cut:] for k, v in merged.items()})
        return {k: v[:cut] for k, v in merged.items()} if cut else None

    with fh:
        try:
            buffered = 0
            for kind, cpu, data in _records(fh):
                if kind == PAGES:
                    bufs.setdefault(cpu, []).append(data)
                    buffered += len(data)
                elif kind == SYNC and len(data) == SYNC_TIME.size:
                    # everything older than the previous mark is in: release it, a few MiB at a time
                    if last_sync is not None and buffered >= DECODE_BYTES:
                        decode_all()
                        buffered = 0
                        out = release(last_sync - SYNC_MARGIN_NS)
                        if out is not None:
                            yield out
                    last_sync = SYNC_TIME.unpack(data)[0]
                else:
                    counts.malformed += 1
        except (*GZIP_ERRORS, _Unreadable) as exc:   # a cut-off or damaged file: keep what was read
            counts.malformed += 1
            if len(counts.malformed_examples) < 5:
                counts.malformed_examples.append(f"raw trace ends early: {exc}")
        decode_all()
        out = release(None)
        if out is not None:
            yield out


def as_batch(cols: dict, devices: Devices) -> Batch:
    """The fast path's batch (seconds, device ids) of decoded columns."""
    import numpy as np
    uniq, inv = np.unique(cols["dev"], return_inverse=True)
    ids = np.array([devices.id(dev_tuple(int(d))) for d in uniq.tolist()], dtype=np.int64)
    return Batch(cols["t"] / 1e9, cols["act"], ids[inv], cols["op"], _sectors(cols["sector"]), cols["n"])


def batches(path: str | Path, counts: ParseCounts, devices: Devices) -> Iterator[Batch]:
    """The fast path's batches of a raw trace, in time order."""
    for cols in columns(path, counts):
        yield as_batch(cols, devices)


def _sectors(sector):
    """Sectors as the text shows them: a flush completion's (u64)-1 stays 2**64 - 1 (Python ints)."""
    import numpy as np
    if (sector < 0).any():
        return np.array([v + (1 << 64) if v < 0 else v for v in sector.tolist()], dtype=object)
    return sector


def events(path: str | Path, counts: ParseCounts) -> Iterator[Event]:
    """The reference path's events, one by one (the same decoding)."""
    for cols in columns(path, counts):
        for t, act, dev, op, sector, n in zip(*(cols[k].tolist() for k in ("t", "act", "dev", "op", "sector", "n"))):
            yield Event(t / 1e9, ACTION_OF[act], dev_tuple(dev), OP_NAMES[op], sector + (1 << 64) if sector < 0 else sector, n)

