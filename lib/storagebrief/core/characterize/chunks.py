"""The fast path's input: the trace file read in byte chunks cut at line ends and decoded into
column batches of events (numpy), in trace order."""
from __future__ import annotations

import gzip
import io
import re
from pathlib import Path
from typing import Iterable, Iterator

from .model import (A_COMPLETE, A_ISSUE, A_REQUEUE, ACT_CODE, GZIP_ERRORS, MAX_SECTOR, OP_CODE, Batch, Devices, Event,
                    ParseCounts, concat_rows)
from .parse import damaged, open_text, parse_blkparse, parse_dev, tracefs_line

# numpy is imported inside the functions: importing the package (the CLI's start) stays light

# -- the fast path: whole chunks of the file at once, numpy ---------------------------------------
#
# Same results as Characterizer.feed() over events() (the reference, kept as the definition and
# tested against on random traces): the file is read in byte chunks cut at line ends; the lines of
# a chunk that have the kernel's exact shape are split into columns with numpy, any other line
# (headers, lost-events lines, other events, odd or malformed lines) goes through tracefs_line()
# and its event is put back in its place; a chunk that is not plain ASCII or holds a carriage
# return is read line by line. FastCharacterizer.feed_batch() computes a batch's statistics in
# bulk; a batch with a requeue (rare; its effect depends on order) is fed event by event.

CHUNK_BYTES = 2 << 20
BLKPARSE_BATCH = 65536          # events per batch of blkparse text (parsed line by line)
_PRE, _POST = 32, 64             # padding around a chunk so that fixed windows stay inside


def _read_chunks(path: str | Path) -> Iterator[bytes]:
    """The file's bytes in chunks that end at a line end (the last one gets a newline if missing)."""
    open_text(path).close()          # the checks and messages of open_text
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        rest = b""
        while True:
            try:
                block = fh.read(CHUNK_BYTES)
            except GZIP_ERRORS as exc:
                raise damaged(path, exc) from None
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]
        if rest:
            yield rest + b"\n"


def _text_lines(chunk: bytes) -> Iterator[str]:
    """The chunk's lines exactly as reading the file as text gives them."""
    return iter(io.TextIOWrapper(io.BytesIO(chunk), errors="replace"))


def _batch_of_events(evs: list[Event], devices: Devices) -> Batch:
    import numpy as np
    dev_id, act, op = devices.id, ACT_CODE, OP_CODE
    return Batch(np.array([e.t for e in evs], dtype=np.float64),
                 np.array([act[e.action] for e in evs], dtype=np.int8),
                 np.array([dev_id(e.dev) for e in evs], dtype=np.int64),
                 np.array([op[e.op] for e in evs], dtype=np.int8),
                 np.array([e.sector for e in evs], dtype=object if any(e.sector >= MAX_SECTOR for e in evs) else np.int64),
                 np.array([e.sectors for e in evs], dtype=object if any(e.sectors >= MAX_SECTOR for e in evs) else np.int64))


def _digits(a, start, end, width: int):
    """(ok, value) of the decimal tokens a[start:end] (1..width digits, width <= 15) of each row."""
    import numpy as np
    length = end - start
    ar = np.arange(width)
    d = a[end[:, None] - width + ar] - np.uint8(48)
    inside = ar >= (width - length)[:, None]
    ok = (length >= 1) & (length <= width) & ((d <= 9) | ~inside).all(1)
    d[~inside] = 0
    # float64 through BLAS: exact, every partial sum is below 10**15 < 2**53
    val = (d.astype(np.float64) @ (10.0 ** np.arange(width - 1, -1, -1))).astype(np.int64)
    return ok, val


_MARK = b" block_rq_"


# long: one function (118 lines) on purpose: split into helpers it page-faults ~8x more and runs ~5 % slower.
def _tracefs_chunk(chunk: bytes, counts: ParseCounts, devices: Devices) -> Batch | None:
    """A chunk of whole lines -> its events in line order; counts lines, lost, malformed, ..."""
    import numpy as np
    if not chunk.isascii() or b"\r" in chunk:
        evs = []
        for line in _text_lines(chunk):
            counts.lines += 1
            ev = tracefs_line(line, counts)
            if ev is not None:
                evs.append(ev)
        return _batch_of_events(evs, devices) if evs else None
    a = np.frombuffer(b"\n" * _PRE + chunk + b"\0" * _POST, dtype=np.uint8)
    body = a[_PRE:_PRE + len(chunk)]
    nl = np.flatnonzero(body == 10) + _PRE               # line i ends at nl[i]
    nlines = len(nl)
    counts.lines += nlines
    # ": block_rq_" markers (at their colon), the first and only one of their line
    col = np.flatnonzero(body == 58) + _PRE
    mark = np.frombuffer(_MARK, dtype=np.uint8)
    col = col[(a[col[:, None] + np.arange(1, 1 + len(mark))] == mark).all(1)]
    li = np.searchsorted(nl, col)
    per_line = np.bincount(li, minlength=nlines)
    keep = per_line[li] == 1
    mk, li = col[keep], li[keep]
    lend = nl[li]
    # action: "issue: " / "complete: " / "requeue: "
    c0 = a[mk + 11]
    act = np.full(len(mk), -1, dtype=np.int8)
    f0 = np.zeros(len(mk), dtype=np.int64)
    for word, code in ((b"issue: ", A_ISSUE), (b"complete: ", A_COMPLETE), (b"requeue: ", A_REQUEUE)):
        w = np.frombuffer(word, dtype=np.uint8)
        hit = (c0 == w[0])
        hit[hit] = (a[mk[hit][:, None] + 11 + np.arange(len(w))] == w).all(1)
        act[hit], f0[hit] = code, mk[hit] + 11 + len(w)
    ok = act >= 0
    # timestamp: the token of digits and one dot right before the colon, after a space
    W = 20
    g = a[mk[:, None] - W + np.arange(W)]
    dot = g == 46
    notok = ~(((g - np.uint8(48)) <= 9) | dot)
    tl = np.argmax(notok[:, ::-1], axis=1)                  # token length
    rows = np.arange(len(mk))
    ok &= notok.any(1) & (g[rows, W - 1 - tl] == 32)
    frac = np.argmax(dot[:, ::-1], axis=1)                  # digits after the (last) dot
    dpos = mk - 1 - frac
    oki, ip = _digits(a, mk - tl, dpos, 10)                 # digits only: exactly one dot
    okf, fp = _digits(a, dpos + 1, mk, 9)
    ok &= oki & okf
    whole = ip * (10 ** frac) + fp
    ok &= whole < (1 << 53)
    t = whole / (10.0 ** frac)                               # exact: float(text), correctly rounded
    # the fields after the action: tokens between single spaces
    sp = np.flatnonzero(body == 32) + _PRE
    j = np.searchsorted(sp, f0)
    K = 7
    idx = j[:, None] + np.arange(K)
    ends = np.where(idx < len(sp), sp[np.minimum(idx, len(sp) - 1)] if len(sp) else 0, lend[:, None])
    ends = np.minimum(ends, lend[:, None])
    starts = np.concatenate([f0[:, None], ends[:, :-1] + 1], axis=1)
    # dev "maj,min" (up to 8 characters) and rwbs
    ok &= (ends[:, 0] < lend) & (ends[:, 1] < lend) & (ends[:, 1] > starts[:, 1])
    dl = ends[:, 0] - starts[:, 0]
    ok &= (dl >= 3) & (dl <= 8)
    dg = np.where(np.arange(8) < dl[:, None], a[starts[:, 0][:, None] + np.arange(8)], 0)
    dkey = np.ascontiguousarray(dg).view(np.uint64)[:, 0]
    off = (a[starts[:, 2]] != 40).astype(np.int64)         # the bytes field of issue lines
    okb, _ = _digits(a, starts[:, 2], ends[:, 2], 12)
    ok &= (off == 0) | (okb & (ends[:, 2] < lend))
    p = 2 + off
    ps, pe = starts[rows, p], ends[rows, p]
    ok &= (pe - ps == 2) & (a[ps] == 40) & (a[ps + 1] == 41) & (pe < lend)
    ss, se = starts[rows, p + 1], ends[rows, p + 1]
    oks, sector = _digits(a, ss, se, 15)
    ok &= oks & (se < lend)
    qs, qe = starts[rows, p + 2], ends[rows, p + 2]
    ok &= (qe - qs == 1) & (a[qs] == 43) & (qe < lend)
    ns, ne = starts[rows, p + 3], ends[rows, p + 3]
    okn, n = _digits(a, ns, ne, 12)
    ok &= okn
    # op from the rwbs string (op_of: a leading F before R W D N F is the preflush flag)
    r0, r1 = a[starts[:, 1]], a[starts[:, 1] + 1]
    long_ = ends[:, 1] - starts[:, 1] > 1
    shift = long_ & (r0 == 70) & np.isin(r1, np.frombuffer(b"RWDNF", dtype=np.uint8))
    c = np.where(shift, r1, r0)
    op = np.full(len(mk), 4, dtype=np.int8)
    for code, ch_ in enumerate(b"RWFD"):
        op[c == ch_] = code
    # devices: each distinct token once
    dev = np.zeros(len(mk), dtype=np.int64)
    if len(mk):
        uniq, inv = np.unique(dkey[ok], return_inverse=True) if not (dkey[ok] == dkey[ok][:1]).all() or not ok.any() \
            else (dkey[ok][:1], np.zeros(int(ok.sum()), dtype=np.int64))
        ids = np.empty(len(uniq), dtype=np.int64)
        for i, k in enumerate(uniq.tolist()):
            txt = np.array([k], dtype=np.uint64).view(np.uint8).tobytes().rstrip(b"\0")
            m = re.fullmatch(rb"(\d+),(\d+)", txt)
            ids[i] = devices.id(parse_dev(m.group(1).decode(), m.group(2).decode())) if m else -1
        dev[ok] = ids[inv]
        ok &= dev >= 0
    fast = Batch(t[ok], act[ok], dev[ok], op[ok], sector[ok], n[ok])
    # every other line, read as text, event put back in its place
    done = np.zeros(nlines, dtype=bool)
    done[li[ok]] = True
    odd = np.flatnonzero(~done)
    if len(odd) == 0:
        return fast
    evs, where = [], []
    starts_l = np.concatenate([[_PRE], nl[:-1] + 1])
    for i in odd.tolist():
        line = a[starts_l[i]:nl[i] + 1].tobytes().decode("ascii")
        ev = tracefs_line(line, counts)
        if ev is not None:
            evs.append(ev)
            where.append(i)
    if not evs:
        return fast
    order = np.argsort(np.concatenate([li[ok], np.array(where, dtype=np.int64)]), kind="stable")
    return concat_rows(fast, _batch_of_events(evs, devices), order)


def blkparse_batches(path: str | Path, counts: ParseCounts, devices: Devices) -> Iterator[Batch]:
    """A blkparse text file's events in order, as column batches (parsed line by line)."""
    evs = []
    for ev in parse_blkparse(_chunk_lines(_read_chunks(path)), counts):
        evs.append(ev)
        if len(evs) >= BLKPARSE_BATCH:
            yield _batch_of_events(evs, devices)
            evs = []
    if evs:
        yield _batch_of_events(evs, devices)


def _chunk_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    for chunk in chunks:
        yield from _text_lines(chunk)


def tracefs_batches(path: str | Path, counts: ParseCounts, devices: Devices) -> Iterator[Batch]:
    """A tracefs text file's events in order, as column batches (the fast path of its events)."""
    for chunk in _read_chunks(path):
        b = _tracefs_chunk(chunk, counts, devices)
        if b is not None and len(b):
            yield b
