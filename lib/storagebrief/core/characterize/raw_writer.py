"""A writer of synthetic raw traces (the format core.blocktrace records, core/traceformat.py: a JSON header, then ring-buffer
pages per CPU and sync marks), for tests and benchmarks: events in, a file the tracefs-raw decoder reads.
"""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

from ..traceformat import EVENTS, file_start, pages_record, sync_record
from .model import A_COMPLETE, A_ISSUE, A_REQUEUE

_HEADER_PAGE = ("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
                "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
                "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
                "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n")
_SYNTHETIC = {   # name: (id, [(field, offset, size)], record bytes before the cmd string)
    "block_rq_issue": (2104, [("dev", 8, 4), ("sector", 16, 8), ("nr_sector", 24, 4), ("bytes", 28, 4),
                              ("ioprio", 32, 2), ("rwbs[10]", 34, 10), ("comm[16]", 44, 16), ("cmd", 60, 4)], 64),
    "block_rq_complete": (2107, [("dev", 8, 4), ("sector", 16, 8), ("nr_sector", 24, 4), ("error", 28, 4),
                                 ("ioprio", 32, 2), ("rwbs[10]", 34, 10), ("cmd", 44, 4)], 48),
    "block_rq_requeue": (2108, [("dev", 8, 4), ("sector", 16, 8), ("nr_sector", 24, 4), ("ioprio", 28, 2),
                                ("rwbs[10]", 30, 10), ("cmd", 40, 4)], 44),
}
_NAME_OF = dict(zip((A_ISSUE, A_COMPLETE, A_REQUEUE), EVENTS))     # block_rq_issue / _complete / _requeue


def _format_text(name: str) -> str:
    eid, fields, _ = _SYNTHETIC[name]
    lines = [f"name: {name}", f"ID: {eid}", "format:",
             "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;",
             "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;", ""]
    lines += [f"\tfield:unsigned {f};\toffset:{o};\tsize:{s};\tsigned:0;" for f, o, s in fields]
    return "\n".join(lines) + "\n"


class RawWriter:
    """Writes a raw trace of given events (one ring-buffer page stream per CPU), with a sync mark
    every `sync_s` of trace time, as the reader does."""

    def __init__(self, path: str | Path, page_size: int = 4096, sync_s: float = 0.2, header: dict | None = None):
        self.fh = gzip.open(path, "wb", compresslevel=1)
        self.page, self.sync_ns = page_size, int(sync_s * 1e9)
        # header: more fields, e.g. the device, capacity_sectors and host the real reader records
        header = {"page_size": page_size, "clock": "local", "kernel": "synthetic", "cpus": [],
                  "header_page": _HEADER_PAGE, "events": {n: _format_text(n) for n in _SYNTHETIC}, **(header or {})}
        self.fh.write(file_start(header))
        self.cur: dict[int, list] = {}      # cpu -> [page ts, last ts, bytearray of events]
        self.done: dict[int, list[bytes]] = {}
        self.next_sync = None

    def _close_page(self, cpu: int) -> None:
        ts, _, data = self.cur.pop(cpu)
        page = struct.pack("<Qq", ts, len(data)) + bytes(data)
        self.done.setdefault(cpu, []).append(page.ljust(self.page, b"\0"))

    def _flush(self, now_ns: int) -> None:
        for cpu in sorted(self.cur):
            self._close_page(cpu)
        for cpu in sorted(self.done):
            data = b"".join(self.done[cpu])
            self.fh.write(pages_record(cpu, data))
        self.done.clear()
        self.fh.write(sync_record(now_ns))

    def add(self, t_ns: int, act: int, dev_t: int, rwbs: str, sector: int, n: int, cpu: int = 0) -> None:
        if self.next_sync is None:
            self.next_sync = t_ns + self.sync_ns
            self.fh.write(sync_record(t_ns))
        elif t_ns >= self.next_sync:
            self._flush(t_ns)
            self.next_sync = t_ns + self.sync_ns
        name = _NAME_OF[act]
        eid, fields, size = _SYNTHETIC[name]
        rec = bytearray(size + 1)                       # + the empty cmd string's NUL
        struct.pack_into("<Hi", rec, 0, eid, 4242)
        off = {f.split("[")[0]: o for f, o, _ in fields}
        struct.pack_into("<I", rec, off["dev"], dev_t)
        struct.pack_into("<Q", rec, off["sector"], sector & ((1 << 64) - 1))
        struct.pack_into("<I", rec, off["nr_sector"], n)
        rec[off["rwbs"]:off["rwbs"] + len(rwbs)] = rwbs.encode()
        struct.pack_into("<I", rec, off["cmd"], (1 << 16) | size)
        rec += b"\0" * (-len(rec) % 4)
        cur = self.cur.get(cpu)
        delta = 0 if cur is None else t_ns - cur[1]
        extend = delta >= (1 << 27)
        need = len(rec) + 4 + (8 if extend else 0)
        if cur is not None and len(cur[2]) + need > self.page - 16:
            self._close_page(cpu)
            cur = None
        if cur is None:
            cur = self.cur[cpu] = [t_ns, t_ns, bytearray()]
            delta, extend = 0, False
        if extend:
            cur[2] += struct.pack("<II", 30 | (delta & ((1 << 27) - 1)) << 5, delta >> 27)
            delta = 0
        cur[2] += struct.pack("<I", (len(rec) // 4) | delta << 5) + rec
        cur[1] = t_ns

    def close(self) -> None:
        self._flush(self.next_sync or 0)
        self.fh.close()
