"""FastCharacterizer: Characterizer.feed() in bulk, a column batch of events at a time (numpy); the
same statistics as the reference (see chunks.py and tracefs_raw.py for how the batches are read)."""
from __future__ import annotations

from .model import A_COMPLETE, A_ISSUE, A_MERGE, A_REQUEUE, MAX_DEVS, MAX_SECTOR, OP_NAMES, Batch, Devices, ParseCounts
from .stats import BINS, SAMPLE_POINTS, Characterizer

# numpy is imported inside the functions: importing the package (the CLI's start) stays light


class FastCharacterizer(Characterizer):
    """Characterizer.feed() in bulk: the same state, a batch of events at a time."""

    def __init__(self, capacity_sectors: int | None = None, sample_points: int = SAMPLE_POINTS,
                 devices: Devices | None = None, capacities: dict[tuple[int, int], int] | None = None):
        import numpy as np
        super().__init__(capacity_sectors, sample_points, capacities)
        self.devices = devices or Devices()
        self._np_bins: dict[int, "np.ndarray"] = {}        # dev id -> 2 x BINS (reads, writes)
        self._last: dict[int, int] = {}                     # dev id -> end sector of its last read/write
        self._pend: dict = {}                               # key -> [(t, sectors, seq, bin, prev_end), ...]
        self._keys = np.random.default_rng(0)               # sample: the smallest random keys win
        self._sample_cols = None                            # (key, t, sector, sectors, op, seq)

    # keys of the in-flight table: (sector, device, op) packed in an integer
    @staticmethod
    def _key(sector: int, dev: int, op: int):
        return ((sector << 9 | dev) << 3 | op) if dev < MAX_DEVS else (sector, dev, op)

    def _bins_of(self, dev: int):
        import numpy as np
        b = self._np_bins.get(dev)
        if b is None:
            b = self._np_bins[dev] = np.zeros((2, BINS), dtype=np.int64)
        return b

    def _cap_of(self, dev: int) -> int | None:
        return self.capacity(self.devices.devs[dev])

    def feed_batch(self, b: Batch) -> None:
        import numpy as np
        if not len(b):
            return
        lo, hi = float(b.t.min()), float(b.t.max())      # the screen lets time step back a little
        if self.first_t is None or lo < self.first_t:
            self.first_t = lo
        if self.last_t is None or hi > self.last_t:
            self.last_t = hi
        if ((b.act == A_REQUEUE).any() or b.sector.dtype == object or b.n.dtype == object
                or int(b.dev.max()) >= MAX_DEVS or int(b.sector.max()) >= MAX_SECTOR
                or int(b.n.max()) >= MAX_SECTOR):
            self._feed_each(b)
            return
        self.counts["merges"] += int((b.act == A_MERGE).sum())
        iss = b.act == A_ISSUE
        for code, k in enumerate(np.bincount(b.op[iss], minlength=5).tolist()):
            if k:
                self.counts[OP_NAMES[code]] += k
        n_ev = len(b)
        seq_all = np.zeros(n_ev, dtype=np.int8)             # -1 not data, 0 random, 1 sequential
        bin_all = np.full(n_ev, -1, dtype=np.int64)
        prev_all = np.full(n_ev, -1, dtype=np.int64)
        data = np.flatnonzero(iss & (b.op <= 1))
        seq_all[:] = -1
        if len(data):
            if self.first_issue_t is None:
                self.first_issue_t = float(b.t[data[0]])
            dd, s, nn, op = b.dev[data], b.sector[data], b.n[data], b.op[data]
            end = s + nn
            prev = np.empty(len(data), dtype=np.int64)
            devs = np.unique(dd).tolist()
            for d in devs:
                sel = np.flatnonzero(dd == d) if len(devs) > 1 else slice(None)
                e = end[sel]
                pv = np.empty(len(e), dtype=np.int64)
                pv[0] = self._last.get(d, -1)
                pv[1:] = e[:-1]
                prev[sel] = pv
                self._last[d] = int(e[-1])
            seq = prev == s
            seq_all[data], prev_all[data] = seq, prev
            for o in (0, 1):
                for q in (False, True):
                    m = (op == o) & (seq == q)
                    if m.any():
                        k, c = np.unique(nn[m], return_counts=True)
                        h = self.sizes[(OP_NAMES[o], q)]
                        for kk, cc in zip(k.tolist(), c.tolist()):
                            h[kk] += cc
            for d in devs:
                m = dd == d
                self.per_dev[self.devices.devs[d]] += int(m.sum())
                cap = self._cap_of(d)
                if cap:
                    sm = s[m]
                    self.beyond_capacity += int(((sm + nn[m]) > cap).sum())
                    bi = np.minimum(sm * BINS // cap, BINS - 1)
                    bins = self._bins_of(d)
                    om = op[m]
                    bins[0] += np.bincount(bi[om == 0], minlength=BINS)
                    bins[1] += np.bincount(bi[om == 1], minlength=BINS)
                    bin_all[data[m]] = bi
            self._sample_add(b.t[data], s, nn, op, seq)
        self._match(b, iss, seq_all, bin_all, prev_all)

    def _match(self, b: Batch, iss, seq_all, bin_all, prev_all) -> None:
        """FIFO issue <-> completion per (device, sector, op), the in-flight table carried over."""
        import numpy as np
        comp = b.act == A_COMPLETE
        ev = np.flatnonzero(iss | comp)
        if not len(ev):
            return
        keys = ((b.sector[ev] << 9 | b.dev[ev]) << 3) | b.op[ev].astype(np.int64)
        carried_keys, carried_t, carried_entries = [], [], []
        pend = self._pend
        if pend:
            for k in set(filter(pend.__contains__, keys[comp[ev]].tolist())):
                for e in pend.pop(k):
                    carried_keys.append(k)
                    carried_t.append(e[0])
                    carried_entries.append(e)
        nc = len(carried_keys)
        allk = np.concatenate([np.array(carried_keys, dtype=np.int64), keys])
        is_i = np.concatenate([np.ones(nc, dtype=bool), iss[ev]])
        tt = np.concatenate([np.array(carried_t, dtype=np.float64), b.t[ev]])
        src = np.concatenate([-1 - np.arange(nc), ev])      # < 0: carried entry, else batch position
        order = np.argsort(allk, kind="stable")
        ks, ii = allk[order], is_i[order]
        L = len(ks)
        start = np.empty(L, dtype=bool)
        start[0] = True
        start[1:] = ks[1:] != ks[:-1]
        gid = np.cumsum(start) - 1
        x = np.where(ii, 1, -1)
        X = np.cumsum(x)
        base = (X - x)[start]
        Xw = X - base[gid]
        big = L + 1
        pm = np.minimum.accumulate(Xw - gid * big) + gid * big
        z = np.minimum(pm, 0)
        zprev = np.empty(L, dtype=np.int64)
        zprev[0] = 0
        zprev[1:] = z[:-1]
        zprev[start] = 0
        pops = ~ii
        unmatched = pops & (z < zprev)
        matched = pops & ~unmatched
        self.counts["unmatched_completions"] += int(unmatched.sum())
        m_per_group = np.bincount(gid[matched], minlength=int(gid[-1]) + 1)
        icum = np.cumsum(ii)
        rank = icum - 1 - (icum - ii)[start][gid]
        took = ii & (rank < m_per_group[gid])
        pi, ci = order[np.flatnonzero(took)], order[np.flatnonzero(matched)]
        if len(ci):
            lat = np.rint((tt[ci] - tt[pi]) * 1e6).astype(np.int64)
            lop = allk[ci] & 7
            for o in range(4):
                sel = lat[lop == o]
                if len(sel):
                    k, c = np.unique(sel, return_counts=True)
                    h = self.latency_us[OP_NAMES[o]]
                    for kk, cc in zip(k.tolist(), c.tolist()):
                        h[kk] += cc
        left = order[np.flatnonzero(ii & ~took)]
        for r, k in zip(left.tolist(), allk[left].tolist()):
            sr = int(src[r])
            if sr < 0:
                entry = carried_entries[-1 - sr]
            else:
                q = int(seq_all[sr])
                entry = (float(b.t[sr]), int(b.n[sr]), None if q < 0 else bool(q),
                         None if bin_all[sr] < 0 else int(bin_all[sr]),
                         None if q < 0 or prev_all[sr] < 0 else int(prev_all[sr]))
            pend.setdefault(k, []).append(entry)

    def _sample_add(self, t, s, n, op, seq) -> None:
        import numpy as np
        if not self._sample_cap:
            return
        keys = self._keys.random(len(t))
        cols = (keys, np.asarray(t, dtype=np.float64), np.asarray(s, dtype=object if s.dtype == object else np.int64),
                np.asarray(n, dtype=object if n.dtype == object else np.int64), np.asarray(op, dtype=np.int8),
                np.asarray(seq, dtype=bool))
        if self._sample_cols is not None:
            cols = tuple(np.concatenate([x, y]) if x.dtype == y.dtype else np.concatenate([x.astype(object), y.astype(object)])
                         for x, y in zip(self._sample_cols, cols))
        if len(cols[0]) > self._sample_cap:
            keep = np.argsort(cols[0], kind="stable")[:self._sample_cap]
            cols = tuple(c[keep] for c in cols)
        self._sample_cols = cols

    def _feed_each(self, b: Batch) -> None:
        """Event by event (a batch with a requeue, huge sectors or many devices)."""
        import numpy as np
        pend, last, devs = self._pend, self._last, self.devices.devs
        smp = []
        for t, act, dev, op, sector, n in zip(b.t.tolist(), b.act.tolist(), b.dev.tolist(), b.op.tolist(),
                                              b.sector.tolist(), b.n.tolist()):
            opn = OP_NAMES[op]
            if act == A_ISSUE:
                self.counts[opn] += 1
                key = self._key(sector, dev, op)
                if op > 1:
                    pend.setdefault(key, []).append((t, n, None, None, None))
                    continue
                if self.first_issue_t is None:
                    self.first_issue_t = t
                prev_end = last.get(dev)
                seq = prev_end == sector
                last[dev] = sector + n
                self.sizes[(opn, seq)][n] += 1
                self.per_dev[devs[dev]] += 1
                cap = self._cap_of(dev)
                bi = None
                if cap:
                    if sector + n > cap:
                        self.beyond_capacity += 1
                    bi = min(sector * BINS // cap, BINS - 1)
                    self._bins_of(dev)[op, bi] += 1
                pend.setdefault(key, []).append((t, n, seq, bi, prev_end))
                smp.append((t, sector, n, op, seq))
            elif act == A_COMPLETE or act == A_REQUEUE:
                key = self._key(sector, dev, op)
                q = pend.get(key)
                issued = q.pop(0) if q else None
                if q is not None and not q:
                    del pend[key]
                if act == A_COMPLETE:
                    if issued is None:
                        self.counts["unmatched_completions"] += 1
                    elif op < 4:
                        self.latency_us[opn][round((t - issued[0]) * 1e6)] += 1
                    continue
                self.counts["requeues"] += 1
                if issued is None:
                    continue
                _, n0, seq, bi, prev_end = issued
                self.counts[opn] -= 1
                if seq is None:
                    continue
                if last.get(dev) == sector + n0:
                    if prev_end is None:
                        last.pop(dev, None)
                    else:
                        last[dev] = prev_end
                h = self.sizes[(opn, seq)]
                h[n0] -= 1
                if not h[n0]:
                    del h[n0]
                self.per_dev[devs[dev]] -= 1
                if bi is not None:
                    self._bins_of(dev)[op, bi] -= 1
            elif act == A_MERGE:
                self.counts["merges"] += 1
        if smp:
            obj = any(p[1] >= MAX_SECTOR or p[2] >= MAX_SECTOR for p in smp)
            dt = object if obj else np.int64
            self._sample_add(np.array([p[0] for p in smp]), np.array([p[1] for p in smp], dtype=dt),
                             np.array([p[2] for p in smp], dtype=dt), np.array([p[3] for p in smp], dtype=np.int8),
                             np.array([p[4] for p in smp], dtype=bool))

    def _materialize(self) -> None:
        self._inflight = self._pend
        self.bins = {self.devices.devs[d]: {"R": b[0].tolist(), "W": b[1].tolist()} for d, b in self._np_bins.items()}
        for h in self.sizes.values():
            for k in [k for k, v in h.items() if not v]:
                del h[k]
        c = self._sample_cols
        self.sample = [] if c is None else [
            (t, s, n, OP_NAMES[o], q) for t, s, n, o, q in zip(c[1].tolist(), c[2].tolist(), c[3].tolist(),
                                                               c[4].tolist(), c[5].tolist())]

    def summary(self, parse: ParseCounts | None = None) -> dict:
        self._materialize()
        return super().summary(parse)

    def distributions(self) -> dict:
        self._materialize()
        return super().distributions()
