"""The mlperf family moves its bytes through MLPerf's tool's buffers and keeps its CPU tier by the tool's rules
(kv_cache_benchmark at upstream commit 284ce72): a write's bytes are the generator's buffer copied and XOR-stamped
(cache.py:110-160), a read lands in fresh memory and is copied once more (backends.py:307-310); the CPU tier stays
within 80 % of its budget, takes no entry above 95 % of it and declines to demote for a large entry while it holds
little (cache.py:431-600). The closed loop keeps its own buffers and tier."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from storagebrief.kit.checkpoint import incompressible
from storagebrief.studies.kv_cache.client import Client, _Tier

BPT = 131072


def _spec(folder, family: str, **kw) -> dict:
    return {"folder": str(folder), "family": family, "seed": 42, "users": 1, "concurrency": 1, "cpu_tier_bytes": 0,
            "bytes_per_token": BPT, "contexts": [(16, 1)], "turns": [(2, 1)], "turn_tokens": 8, "decode_reads": 1,
            "prefill_only_tokens": 10000, "duration_s": 0.5, "write_block": 1 << 20, "largest_entry_bytes": 64 * BPT,
            **kw}


def test_mlperf_writes_stamped_copies_and_reads_them_back_whole(tmp_path):
    buf = incompressible(1 << 20)
    tool, own = Client(_spec(tmp_path / "m", "mlperf"), 0, buf), Client(_spec(tmp_path / "c", "closed-loop"), 0, buf)
    assert tool.tool_buffers and not own.tool_buffers
    n = (1 << 20) + 3 * 4096 + 100                     # two blocks, the second not a whole number of 4 KiB pages
    for c in (tool, own):
        c.evicted = {}
        e = c._put("k", n, n // BPT, 0)
        c._reload(e, 0)                                # through _read_file: every byte back, or it raises
        assert [(r.op, r.nbytes) for r in c.records] == [("write", n), ("read", n)]
    raw, stamped = Path(own.folder / "k.kv").read_bytes(), Path(tool.folder / "k.kv").read_bytes()
    assert raw[:1 << 20] == bytes(buf) and len(stamped) == n
    first = np.frombuffer(stamped[:4096], np.uint8) ^ np.frombuffer(bytes(buf)[:4096], np.uint8)
    assert first.any()                                 # stamped, not the generator's buffer as it is
    assert (np.frombuffer(stamped[4096:8192], np.uint8) ^ np.frombuffer(bytes(buf)[4096:8192], np.uint8)
            == first).all()                            # one 4 KiB pattern over every whole page
    assert tool.host.nbytes == 0                       # no reused host buffer: fresh memory per read


def test_the_tools_tier_rules():
    t = _Tier(1000, tool=True)
    assert t.fits(950) and not t.fits(951)
    t.used = 40                                        # under 5 %: anything that fits goes in
    assert t.room(900)
    t.used = 100
    assert t.room(700) and not t.room(701) and t.declines(401) and not t.declines(400)
    t.used = 300                                       # 20 % or more held: demote rather than decline
    assert not t.room(600) and not t.declines(600)
    own = _Tier(1000)
    own.used = 100
    assert own.fits(1000) and own.room(900) and not own.declines(900)


def test_mlperf_tier_demotes_down_to_80_percent(tmp_path):
    c = Client(_spec(tmp_path, "mlperf", cpu_tier_bytes=10 * BPT), 0, incompressible(1 << 20))
    c.evicted = {}
    for i in range(5):
        c._put(f"k{i}", 2 * BPT, 2, 0)                 # 2 of 10: the fifth would pass 80 %
    assert list(c.tier.entries) == ["k1", "k2", "k3", "k4"] and c.tier.used == 8 * BPT
    assert [r.op + r.tier for r in c.records if r.user == -1] == ["writestorage"]   # k0 demoted to storage
    big = c._put("big", 19 * BPT // 2 + 1, 9, 0)            # above 95 % of the tier: straight to storage
    assert big["tier"] == "storage" and "big" not in c.tier.entries
