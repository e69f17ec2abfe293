"""Records that cannot be right are counted as malformed, never characterized.

A parsed event is refused (ParseCounts.malformed, with an example in impossible_examples) when
  * it belongs to another device than the one a raw trace's header says was traced;
  * its length is more than any block request can have: the kernel keeps a request's length as a
    32-bit byte count (rq->__data_len), so at most MAX_REQUEST_SECTORS;
  * it ends beyond sector 2**64 (sector_t is 64-bit), or is longer than the device's capacity
    when the capacity is known (header, sysfs or --capacity-sectors);
  * its time is out of order: more than TIME_TOLERANCE_S before an event already accepted.

Time order, with one event of look-ahead: a text trace may interleave CPUs whose clocks differ by
microseconds, so small steps back are kept (10 ms is far more than any CPU clock skew and far
less than a trace); a bigger step back is an error of one of the two events on either side of
it. The event is judged against its neighbours: an event later than both the one before and the
one after is dropped (a spike), an event earlier than the time already reached is dropped (a
dip). At the very start, with nothing accepted yet, the third event decides which of the first
two is out of place. If time goes back for good (two traces appended, a clock step), every event
after the step is malformed, and the counts say how many.

Both paths use this one definition: Screen.events() for the reference (event by event) and
Screen.batches() for the fast path, which checks a whole batch at once and, only when a batch holds
something to refuse, decides its events one by one with the same code, in the same order.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from .model import ACTION_OF, OP_NAMES, Batch, Event, ParseCounts, concat_rows

MAX_REQUEST_SECTORS = ((1 << 32) - 1) >> 9     # 8,388,607 sectors: just under 4 GiB
SECTOR_LIMIT = 1 << 64
TIME_TOLERANCE_S = 0.010
_EXAMPLES = 5


def describe_event(t: float, action: str, dev: tuple[int, int], op: str, sector: int, n: int) -> str:
    return f"{t:.6f} {action} {dev[0]},{dev[1]} {op} {sector} + {n}"


class Screen:
    """Refuses impossible records and events out of time order (see the module docstring)."""

    def __init__(self, counts: ParseCounts, capacity_of: Callable[[tuple[int, int]], int | None],
                 only_device: tuple[int, int] | None = None, tolerance_s: float = TIME_TOLERANCE_S):
        self.counts = counts
        self.capacity_of = capacity_of          # known capacities only (None: unknown)
        self.only_device = only_device
        self.tol = tolerance_s
        self.top: float | None = None           # the latest time accepted so far
        self.held: list[tuple[float, object]] = []   # candidates awaiting the next event (at most 2)

    # -- one record ---------------------------------------------------------------------------
    def problem(self, dev: tuple[int, int], sector: int, n: int) -> str | None:
        """Why a record is impossible, or None."""
        if self.only_device is not None and dev != self.only_device:
            return f"device {dev[0]},{dev[1]} is not the traced device {self.only_device[0]},{self.only_device[1]}"
        if n > MAX_REQUEST_SECTORS:
            return f"{n:,} sectors: longer than any block request (at most {MAX_REQUEST_SECTORS:,})"
        if sector + n > SECTOR_LIMIT:
            return "ends beyond sector 2^64"
        cap = self.capacity_of(dev)
        if cap and n > cap:
            return f"{n:,} sectors: longer than the whole device ({cap:,} sectors)"
        return None

    def _refuse(self, text: str, why: str) -> None:
        self.counts.malformed += 1
        if len(self.counts.impossible_examples) < _EXAMPLES:
            self.counts.impossible_examples.append(f"{text}: {why}")

    # -- time order ---------------------------------------------------------------------------
    def _push(self, t: float, item, out: list) -> None:
        """Takes the next event (time t); appends (item, accepted) decisions to out, in file order
        of the accepted ones."""
        tol, held = self.tol, self.held
        if not held:
            if self.top is None or t >= self.top - tol:
                held.append((t, item))
            else:
                out.append((item, False))
            return
        if len(held) == 2:          # the first two disagree and nothing was accepted: this one decides
            if t >= held[0][0] - tol:
                out.append((held.pop()[1], False))       # the second was the odd one
            else:
                out.append((held.pop(0)[1], False))      # the first was
        ct, citem = held[0]
        if t >= ct - tol:           # the candidate is confirmed by its successor
            held.clear()
            out.append((citem, True))
            self.top = ct if self.top is None or ct > self.top else self.top
            if t >= self.top - tol:
                held.append((t, item))
            else:
                out.append((item, False))
        elif self.top is not None:
            if t >= self.top - tol:     # the candidate jumped ahead of both neighbours
                out.append((citem, False))
                held[0] = (t, item)
            else:                       # this one fell behind the time already reached
                out.append((item, False))
        else:
            held.append((t, item))

    def _finish(self, out: list) -> None:
        if len(self.held) == 2:     # nothing came after to decide: keep the later one
            out.append((self.held.pop(0)[1], False))
        if self.held:
            t, item = self.held.pop()
            self.top = t if self.top is None or t > self.top else self.top
            out.append((item, True))

    # -- the reference path -------------------------------------------------------------------
    def events(self, evs: Iterable[Event]) -> Iterator[Event]:
        out: list = []
        for ev in evs:
            why = self.problem(ev.dev, ev.sector, ev.sectors)
            if why is not None:
                self._refuse(describe_event(*ev), why)
                continue
            self._push(ev.t, ev, out)
            if out:
                yield from self._decided(out)
        self._finish(out)
        yield from self._decided(out)

    def _decided(self, out: list) -> Iterator[Event]:
        for ev, ok in out:
            if ok:
                yield ev
            else:
                self._refuse(describe_event(*ev), self._late_why())
        out.clear()

    def _late_why(self) -> str:
        return f"out of time order (more than {self.tol * 1e3:g} ms from its neighbours)"

    # -- the fast path ------------------------------------------------------------------------
    def batches(self, batches: Iterable, devices) -> Iterator:
        """The same decisions on column batches (model.Batch); yields batches of accepted events."""
        import numpy as np      # inside: importing the package (the CLI) stays light
        pending = None                   # a Batch of the held candidates (self.held indexes into it)
        for b in batches:
            if not len(b):
                continue
            k = 0 if pending is None else len(pending)
            comb = b if pending is None else concat_rows(pending, b)
            if len(self.held) <= 1 and self._clean(b, devices) and self._in_order(comb.t, k > 0):
                # every event but the last is confirmed by its successor; the last waits for the next batch
                if len(comb) > 1:
                    latest = float(comb.t[:-1].max())
                    self.top = latest if self.top is None or latest > self.top else self.top
                t_last = float(comb.t[-1])
                pending = Batch(*(getattr(comb, s)[-1:] for s in Batch.__slots__))
                self.held = [(t_last, 0)]
                if len(comb) > 1:
                    yield Batch(*(getattr(comb, s)[:-1] for s in Batch.__slots__))
                continue
            keep = np.zeros(len(comb), dtype=bool)
            out: list = []
            cols = [getattr(comb, s)[k:].tolist() for s in Batch.__slots__]
            for i, (t, act, dev, op, sector, n) in enumerate(zip(*cols), start=k):
                dv = devices.devs[dev]
                why = self.problem(dv, sector, n)
                if why is not None:
                    self._refuse(describe_event(t, ACTION_OF[act], dv, OP_NAMES[op], sector, n), why)
                    continue
                self._push(t, i, out)
                self._mark(out, keep, comb, devices)
            rows = [i for _, i in self.held]
            pending = Batch(*(getattr(comb, s)[rows] for s in Batch.__slots__)) if rows else None
            self.held = [(t, j) for j, (t, _) in enumerate(self.held)]
            if keep.any():
                yield Batch(*(getattr(comb, s)[keep] for s in Batch.__slots__))
        out = []
        self._finish(out)
        if pending is not None and out:
            keep = np.zeros(len(pending), dtype=bool)
            self._mark(out, keep, pending, devices)
            if keep.any():
                yield Batch(*(getattr(pending, s)[keep] for s in Batch.__slots__))

    def _mark(self, out: list, keep, comb, devices) -> None:
        for i, ok in out:
            if ok:
                keep[i] = True
            else:
                self._refuse(describe_event(float(comb.t[i]), ACTION_OF[int(comb.act[i])], devices.devs[int(comb.dev[i])],
                                            OP_NAMES[int(comb.op[i])], int(comb.sector[i]), int(comb.n[i])),
                             self._late_why())
        out.clear()

    def _clean(self, b, devices) -> bool:
        """Whether no record of the batch is impossible (checked in bulk)."""
        import numpy as np
        n, sector = b.n, b.sector
        # reductions, not masks: this runs on every batch (a trace is nearly always of one device)
        lo, hi = int(b.dev.min()), int(b.dev.max())
        if self.only_device is not None and not lo == hi == devices.ids.get(self.only_device, -1):
            return False
        longest = int(n.max())
        if longest > MAX_REQUEST_SECTORS:
            return False
        # int64 columns end below 2**63 + MAX_REQUEST_SECTORS: only Python integers can pass 2**64
        if (sector.dtype == object or n.dtype == object) and \
                np.asarray(sector.astype(object) + n.astype(object) > SECTOR_LIMIT, dtype=bool).any():
            return False
        for d in ([lo] if lo == hi else np.unique(b.dev).tolist()):
            cap = self.capacity_of(devices.devs[d])
            if cap and longest > cap and int((n if lo == hi else n[b.dev == d]).max()) > cap:
                return False
        return True

    def _in_order(self, t, has_candidate: bool) -> bool:
        """Whether every time is at most the tolerance before all accepted and earlier ones."""
        import numpy as np
        if not has_candidate and self.top is not None and t[0] < self.top - self.tol:
            return False
        if len(t) < 2:
            return True
        before = np.maximum.accumulate(t[:-1])
        if self.top is not None:
            before = np.maximum(before, self.top)
        return bool((t[1:] >= before - self.tol).all())
