"""A child's events, one JSON object a line on an inherited pipe, drained into a queue by a thread;
{"event": "eof"} when the child closes its end (it ended, or died)."""
from __future__ import annotations

import json
import os
import queue
import threading

EOF_EVENT = {"event": "eof"}


def _drain(fd: int, into: queue.Queue) -> None:
    with os.fdopen(fd, "rb") as fh:
        for line in fh:
            try:
                into.put(json.loads(line))
            except ValueError:          # a torn or foreign line is not an event
                continue
    into.put(dict(EOF_EVENT))


def drain_events(fd: int, into: queue.Queue) -> threading.Thread:
    """Start a daemon thread putting every event read from `fd` (the read end, closed at EOF) into `into`."""
    t = threading.Thread(target=_drain, args=(fd, into), daemon=True, name="storagebrief-events")
    t.start()
    return t
