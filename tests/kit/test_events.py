"""kit.events: a child's JSON-line events drained from a pipe into a queue, then one eof event."""
from __future__ import annotations

import os
import queue

from storagebrief.kit.events import EOF_EVENT, drain_events


def test_every_event_in_order_torn_lines_skipped_then_eof():
    r, w = os.pipe()
    q: queue.Queue = queue.Queue()
    thread = drain_events(r, q)
    os.write(w, b'{"event": "ready", "pid": 7}\nnot json\n{"event": "step", "n": 1}\n{"event": "st')
    os.close(w)                       # the child ended mid-line: the torn line is not an event
    thread.join(timeout=10)
    got = []
    while not q.empty():
        got.append(q.get_nowait())
    assert got == [{"event": "ready", "pid": 7}, {"event": "step", "n": 1}, EOF_EVENT]
    assert not thread.is_alive()


def test_a_child_that_dies_gives_eof_from_a_forked_writer():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                      # the child: one event, then it dies without closing anything itself
        os.close(r)
        os.write(w, b'{"event": "hello"}\n')
        os._exit(0)
    os.close(w)
    q: queue.Queue = queue.Queue()
    drain_events(r, q).join(timeout=10)
    os.waitpid(pid, 0)
    assert [q.get_nowait(), q.get_nowait()] == [{"event": "hello"}, EOF_EVENT]
