"""The block-trace parser and every summary statistic against hand-computed values.

The small trace (device 8,0 of 8,000 sectors, so bin = sector // 8):
  t (s)     event                     what it counts as
  1.000000  issue R 0+8               read 4 KiB, random (first), bin 0
  1.000100  complete R 0+8            latency 100 us
  1.000200  issue R 8+8               read 4 KiB, sequential (0+8 ends at 8), bin 1
  1.000300  issue W 4000+16           write 8 KiB, random, bin 500
  1.000400  complete R 8+8            latency 200 us
  1.000500  complete W 4000+16        latency 200 us
  1.000600  issue FF 0+0              flush (own column, no size, no sequence effect)
  1.000650  complete FF 0+0
  1.000700  issue R 4016+32           read 16 KiB, sequential (W ended at 4016), bin 502 ...
  1.000800  requeue R 4016+32         ... taken back: the device did not take it
  1.000900  issue R 4016+32           read 16 KiB, sequential again, bin 502
  1.001000  complete R 4016+32        latency 100 us (from the last issue)
  1.001100  issue D 6000+64           discard (own column), never completed
  1.001200  issue R 7992+8            read 4 KiB, random, bin 999
  1.001300  complete R 7992+8         latency 100 us
  1.001400  complete W 100+8          completion without an issue
  1.001500  issue FWS 200+8           write (with preflush) 4 KiB, random, bin 25, never completed
Reads 4 KiB x3 + 16 KiB: min 4, median 4, max 16, mean 7, stdev sqrt(27); writes 8 and 4 KiB:
median 6 (even count: mean of the middle two), mean 6, stdev 2. 4 of 6 random, 4 of 6 read.
Trace 0.0015 s -> 4,000 IOPS. Bins: reads 0,1,502,999 (bands 0-1, 502, 999 = 3), writes 25, 500
(2 bands), both 5 bands; every request is in the 100 busiest bins -> locality 100 %.
"""
from __future__ import annotations

import gzip
import json
import math
import struct

import pandas as pd
import pytest

from storagebrief.cli import main
from storagebrief.core import characterize as ch

EVENTS = [  # t, action, rwbs, sector, sectors
    ("1.000000", "issue", "R", 0, 8), ("1.000100", "complete", "R", 0, 8),
    ("1.000200", "issue", "R", 8, 8), ("1.000300", "issue", "W", 4000, 16),
    ("1.000400", "complete", "R", 8, 8), ("1.000500", "complete", "W", 4000, 16),
    ("1.000600", "issue", "FF", 0, 0), ("1.000650", "complete", "FF", 0, 0),
    ("1.000700", "issue", "R", 4016, 32), ("1.000800", "requeue", "R", 4016, 32),
    ("1.000900", "issue", "R", 4016, 32), ("1.001000", "complete", "R", 4016, 32),
    ("1.001100", "issue", "D", 6000, 64), ("1.001200", "issue", "R", 7992, 8),
    ("1.001300", "complete", "R", 7992, 8), ("1.001400", "complete", "W", 100, 8),
    ("1.001500", "issue", "FWS", 200, 8),
]
CAPACITY = 8000


def _tracefs_text(ioprio_every_other: bool = True) -> str:
    lines = ["# tracer: nop", "#", "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION"]
    for i, (t, act, rwbs, sec, n) in enumerate(EVENTS):
        prio = " be,0,4" if (ioprio_every_other and i % 2 == 0) else ""   # kernel 6.x field, older without
        if act == "issue":
            body = f"8,0 {rwbs} {n * 512} () {sec} + {n}{prio} [fio]"
        else:
            body = f"8,0 {rwbs} () {sec} + {n}{prio} [0]"
        task = "fio-4242" if act == "issue" else "<idle>-0"
        lines.append(f"          {task:>12}   [001] d..1. {t}: block_rq_{act}: {body}")
        if i == 5:
            lines.append("CPU:1 [LOST 3 EVENTS]")
            lines.append(f"             fio-4242   [000] ..... {t}: block_bio_queue: 8,0 R 0 + 8 [fio]")
        if i == 9:
            lines.append("this line is not an event at all")
    return "\n".join(lines) + "\n"


def _blkparse_text() -> str:
    action = {"issue": "D", "complete": "C", "requeue": "R"}
    lines, seq = [], 0
    for t, act, rwbs, sec, n in EVENTS:
        t = f"{float(t) - 1:.9f}"
        if act == "issue":   # what blkparse shows before a dispatch: queue, get request, insert
            for a in ("Q", "G", "I"):
                seq += 1
                lines.append(f"  8,0    1   {seq:>6}     {t}  4242  {a}  {rwbs} {sec} + {n} [fio]")
        seq += 1
        pid = "4242" if act != "complete" else "0"
        tail = "[fio]" if act != "complete" else "[0]"
        lines.append(f"  8,0    1   {seq:>6}     {t}  {pid:>4}  {action[act]}  {rwbs} {sec} + {n} {tail}")
    lines.insert(3, "  8,0    1        0     0.000250000  4242  M   R 16 + 8 [fio]")     # a back merge
    lines.insert(4, "  8,0    1        0     0.000260000  4242  F   R 0 + 8 [fio]")      # a front merge
    lines.insert(5, "  8,0    1        0     0.000270000     0  m   N cfq4242 insert_request")
    lines.insert(6, "  8,0    1        0     0.000280000  4242  P   N [fio]")
    lines.insert(7, "  8,0    1   bogus line with a wrong shape")
    lines += ["", "CPU1 (8,0):", " Reads Queued:           4,       28KiB\t Writes Queued:           2,       12KiB",
              "Total (8,0):", " Reads Completed:        4,       28KiB", "",
              "Throughput (R/W): 18666KiB/s / 8000KiB/s", "Events (8,0): 42 entries", "Skips: 0 forward (0 -   0.0%)"]
    return "\n".join(lines) + "\n"


EXPECTED = {
    "read_percent": 100 * 4 / 6, "random_percent": 100 * 4 / 6, "avg_iops": 6 / 0.0015,
    "read_kib_min": 4, "read_kib_median": 4, "read_kib_max": 16, "read_kib_mean": 7, "read_kib_stdev": math.sqrt(27),
    "write_kib_min": 4, "write_kib_median": 6, "write_kib_max": 8, "write_kib_mean": 6, "write_kib_stdev": 2,
    "random_read_ops": 2, "random_write_ops": 2, "sequential_read_ops": 2, "sequential_write_ops": 0,
    "trace_length_s": 0.0015, "read_ops": 4, "write_ops": 2, "flush_ops": 1, "discard_ops": 1, "requeues": 1,
    "read_bytes": 56 * 512, "write_bytes": 24 * 512,
    "locality_percent": 100.0, "locality_bands": 5, "read_locality_bands": 3, "write_locality_bands": 2,
    "read_latency_us_mean": 125, "read_latency_us_median": 100, "read_latency_us_p99": 200,
    "write_latency_us_mean": 200, "unmatched_issues": 2, "unmatched_completions": 1,
}


def _check(row: dict) -> None:
    for key, want in EXPECTED.items():
        assert row[key] == pytest.approx(want, rel=1e-6), key


def test_tracefs_every_statistic_by_hand(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text(_tracefs_text())
    row, dists, counts = ch.characterize(f, "tracefs", capacity_sectors=CAPACITY)
    _check(row)
    assert row["merges"] == 0 and row["lost_events"] == 3 and row["malformed_lines"] == 1
    assert counts.malformed_examples == ["this line is not an event at all"]
    assert row["capacity_source"] == "cli" and row["device"] == "8:0"
    assert dists["sizes_kib"]["read_random"] == {"4.0": 2} and dists["sizes_kib"]["read_sequential"] == {"4.0": 1, "16.0": 1}
    assert [i for i, c in enumerate(dists["locality_bins"]["read"]) if c] == [0, 1, 502, 999]
    assert [i for i, c in enumerate(dists["locality_bins"]["write"]) if c] == [25, 500]
    assert len(dists["sample"]) == 7     # the plot sample shows every issue, the requeued attempt too


def test_tracefs_without_ioprio_field_and_gzip(tmp_path):
    f = tmp_path / "t.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(_tracefs_text(ioprio_every_other=False))
    row, _, _ = ch.characterize(f, "tracefs", capacity_sectors=CAPACITY)
    _check(row)


def test_blkparse_same_statistics_merges_and_summary_skipped(tmp_path):
    f = tmp_path / "b.txt"
    f.write_text(_blkparse_text())
    row, _, counts = ch.characterize(f, "blkparse", capacity_sectors=CAPACITY)
    _check(row)
    assert row["merges"] == 2 and row["malformed_lines"] == 1 and row["lost_events"] == 0
    assert "bogus" in counts.malformed_examples[0]


def test_op_of_rwbs():
    assert [ch.op_of(s) for s in ("R", "RA", "RM", "W", "WS", "WFS", "FWS", "FWFS", "FF", "F", "D", "DE", "N")] == \
        ["R", "R", "R", "W", "W", "W", "W", "W", "F", "F", "D", "D", "N"]


def test_locality_share_and_bands():
    bins = [0] * 1000
    bins[0] = 800
    for i in range(10, 210):       # 200 bins of 1: each exactly the even share, so no band
        bins[i] = 1
    share, bands = ch.locality(bins)
    assert share == pytest.approx(100 * (800 + 99) / 1000) and bands == 1
    bins = [0] * 1000
    bins[3] = bins[4] = bins[7] = 10
    assert ch.locality(bins) == (100.0, 2)


def test_exact_median_of_a_histogram():
    from collections import Counter
    assert ch.hist_stats(Counter({8: 3, 256: 1}))["median"] == 8
    assert ch.hist_stats(Counter({8: 2, 256: 2}))["median"] == 132
    assert ch.hist_stats(Counter({1: 1, 2: 1, 3: 1}))["median"] == 2


def test_issue_complete_matching_is_fifo_per_key(tmp_path):
    lines = []
    for t, act in (("1.0", "issue"), ("1.1", "issue"), ("1.5", "complete"), ("1.7", "complete")):
        extra = "4096 " if act == "issue" else ""
        lines.append(f"x-1 [000] ..... {t}00000: block_rq_{act}: 8,0 R {extra}() 64 + 8 be,0,4 [x]")
    f = tmp_path / "t.txt"
    f.write_text("\n".join(lines) + "\n")
    row, _, _ = ch.characterize(f, "tracefs", capacity_sectors=CAPACITY)
    # first issued first completed: 500 ms and 600 ms
    assert row["read_latency_us_mean"] == pytest.approx(550_000) and row["read_latency_us_median"] == 550_000
    assert row["unmatched_issues"] == 0 and row["read_ops"] == 2


def test_capacity_unknown_uses_highest_sector_and_says_so(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text(_tracefs_text().replace("8,0", "250,77"))   # no such device in sysfs
    row, _, _ = ch.characterize(f, "tracefs")
    assert row["capacity_source"] == "highest_sector" and row["capacity_sectors"] == 8000


def test_empty_trace_and_wrong_format_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("# tracer: nop\n")
    with pytest.raises(ch.TraceError, match="no block requests.*the traced device had no I/O"):
        ch.characterize(empty, "tracefs")
    f = tmp_path / "b.txt"
    f.write_text(_blkparse_text())
    with pytest.raises(ch.TraceError, match="malformed line.*--format"):
        ch.characterize(f, "tracefs")
    with pytest.raises(ch.TraceError, match="does not exist"):
        ch.characterize(tmp_path / "nope", "tracefs")
    with pytest.raises(ch.TraceError, match="allowed: tracefs, tracefs-raw, blkparse"):
        ch.characterize(f, "btt")


def test_describe_in_the_seeds_terms():
    assert ch.describe({"read_percent": 99.94, "random_percent": 83.88, "read_kib_min": 4, "read_kib_max": 256,
                        "write_kib_min": 4, "write_kib_max": 108}) == "nearly 100 % read, 84 % random, 4–256 KiB"
    assert ch.describe({"read_percent": 0.08, "random_percent": 71.4, "read_kib_min": 4, "read_kib_max": 128,
                        "write_kib_min": 4, "write_kib_max": 764}).startswith("nearly 100 % write, 71 % random")


def test_cli_characterize_writes_json_and_seed_columns(tmp_path, capsys):
    f = tmp_path / "t.txt"
    f.write_text(_tracefs_text())
    out = tmp_path / "out"
    assert main(["characterize", "--trace", str(f), "--format", "tracefs", "--capacity-sectors", str(CAPACITY),
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "67 % read, 67 % random, 4–16 KiB" in said and "1 malformed line" in said and "3 lost event" in said
    frame = pd.read_csv(out / "characterization.csv")
    assert list(frame.columns)[1:19] == [k for _, k in ch.SEED_COLUMNS]
    _check(frame.iloc[0].to_dict())
    js = json.loads((out / "characterization.json").read_text())
    assert js["summary"]["random_read_ops"] == 2 and "Sequential" in js["definitions"]
    # an empty trace: a clear message and exit 2, no traceback
    (tmp_path / "e.txt").write_text("")
    assert main(["characterize", "--trace", str(tmp_path / "e.txt"), "--format", "blkparse", "--out", str(out)]) == 2
    assert "holds no block requests" in capsys.readouterr().err


def _random_trace(seed: int, events: int = 50_000) -> tuple[str, str]:
    """(tracefs text, blkparse text) of one random trace: 3 devices, reads / writes / flushes /
    discards / other ops, sequential runs, several requests in flight on the same sector (FIFO),
    requeues (with and without a later issue), completions never issued, issues never completed,
    lost-events lines, other events, headers, malformed lines, odd spacing and a non-ASCII comm."""
    import random
    rng = random.Random(seed)
    devs = [(8, 0), (8, 16), (259, 3)]
    rwbs = ["R", "RA", "RM", "W", "WS", "WFS", "FWS", "FF", "F", "D", "DE", "N", "RSM"]
    weights = [30, 5, 2, 20, 8, 2, 2, 3, 1, 2, 1, 1, 1]
    nxt = {d: 0 for d in devs}
    inflight, tf, bp = [], ["# tracer: nop", "#"], []
    t = 100.0
    for i in range(events):
        t += rng.choice([0.000001, 0.000013, 0.0001, 0.0023])
        ts = f"{t:.6f}"
        r = rng.random()
        if r < 0.5 or not inflight:
            d = rng.choice(devs)
            op = rng.choices(rwbs, weights)[0]
            if op in ("FF", "F"):
                sec, n = 0, 0
            else:
                sec = nxt[d] if rng.random() < 0.4 else rng.choice([rng.randrange(0, 4_000_000), 64, 128])
                n = rng.choice([1, 8, 8, 16, 64, 256, 2048])
                nxt[d] = sec + n
            inflight.append((d, op, sec, n))
            act = "issue"
        elif r < 0.5002:        # rare, so that most chunks take the bulk path
            d, op, sec, n = inflight.pop(rng.randrange(len(inflight)))
            act = "requeue"
            if rng.random() < 0.7:
                inflight.append((d, op, sec, n))       # issued again later
        elif r < 0.535:
            d, op, sec, n = rng.choice(devs), "R", rng.randrange(0, 1000), 8    # never issued
            act = "complete"
        elif r < 0.54:
            continue                                    # an issue that never completes stays in flight
        else:
            d, op, sec, n = inflight.pop(rng.randrange(min(4, len(inflight))))
            act = "complete"
        prio = " be,0,4" if rng.random() < 0.8 else ""
        body = (f"{d[0]},{d[1]} {op} {n * 512} () {sec} + {n}{prio} [fio]" if act == "issue"
                else f"{d[0]},{d[1]} {op} () {sec} + {n}{prio} [0]")
        task = rng.choice(["fio-4242", "<idle>-0", "kworker/u4:1-77", "my task-9", "jbd2/sda1-8"])
        tf.append(f"{task:>16} [00{i % 2}] d..1. {ts}: block_rq_{act}: {body}")
        code = {"issue": "D", "complete": "C", "requeue": "R"}[act]
        if act == "issue" and rng.random() < 0.3:
            bp.append(f"  {d[0]},{d[1]}    1   {i:>6}     {t - 100:.9f}  4242  Q  {op} {sec} + {n} [fio]")
        bp.append(f"  {d[0]},{d[1]}    1   {i:>6}     {t - 100:.9f}  4242  {code}  {op} {sec} + {n} [fio]")
        x = rng.random()
        if x < 0.002:
            tf.append(f"CPU:{i % 2} [LOST {rng.randrange(1, 50)} EVENTS]")
        elif x < 0.004:
            tf.append(f"          fio-1  [000] ..... {ts}: block_bio_queue: 8,0 R 0 + 8 [fio]")
        elif x < 0.006:
            tf.append(rng.choice(["garbage", "", "   ", f"fio-1 [000] {ts}: block_rq_issue: 8,0 R", "#x",
                                  f"{ts}: block_rq_issue: 8,0 R 4096 () 7 + 8 [x]",
                                  f"é-1 [000] ..... {ts}: block_rq_issue: 8,16 W 4096 () 77 + 8 [x]",
                                  f"x-1 [000] ..... {ts}: block_rq_complete: 8,0 R (12 34) 64 + 8 [0]"]))
            bp.append(rng.choice(["  8,0  junk", f"  8,0    1   0     {t - 100:.9f}  4242  M  R 8 + 8 [fio]"]))
    return "\n".join(tf) + "\n", "\n".join(bp) + "\n"


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


@pytest.mark.parametrize("fmt", ["tracefs", "blkparse"])
@pytest.mark.slow
def test_fast_path_equals_the_reference_on_a_random_trace(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(ch.chunks, "CHUNK_BYTES", 1 << 16)     # many chunks: state carried across them
    monkeypatch.setattr(ch.chunks, "BLKPARSE_BATCH", 700)
    tf, bp = _random_trace(7)
    f = tmp_path / "t.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(tf if fmt == "tracefs" else bp)
    each = []
    feed_each = ch.FastCharacterizer._feed_each
    monkeypatch.setattr(ch.FastCharacterizer, "_feed_each", lambda self, b: (each.append(len(b)), feed_each(self, b)))
    for cap in (None, 3_000_000):           # None: the first pass finds the highest sector
        each.clear()
        fast = ch.characterize(f, fmt, cap, sample_points=10**6)
        assert 0 < sum(each) < 25_000     # both paths ran: bulk, and event by event for requeues
        ref = ch.characterize(f, fmt, cap, sample_points=10**6, reference=True)
        (rf, df, cf), (rr, dr, cr) = fast, ref
        assert set(rf) == set(rr)
        bad = {k: (rf[k], rr[k]) for k in rr if not _same(rf[k], rr[k])}
        assert not bad
        assert vars(cf) == vars(cr)
        assert df["sizes_kib"] == dr["sizes_kib"] and df["locality_bins"] == dr["locality_bins"]
        assert df["sample"] == dr["sample"] and df["t0"] == dr["t0"]      # every request fits in the sample
    if fmt == "tracefs":     # what the trace holds, so that the comparison means something
        assert rr["requeues"] > 5 and rr["devices"] == 3 and rr["flush_ops"] > 0 and rr["discard_ops"] > 0
        assert rr["malformed_lines"] > 10 and rr["lost_events"] > 0 and rr["unmatched_completions"] > 100
        assert rr["unmatched_issues"] > 100 and rr["sequential_read_ops"] > 1000
        small = ch.characterize(f, fmt, 3_000_000, sample_points=50)[1]["sample"]
        assert len(small) == 50 and set(small) <= set(dr["sample"])


# --------------------------------------------------------------------------- binary traces (tracefs-raw)
from storagebrief.core.traceformat import PAGES, RAW_MAGIC, RECORD       # noqa: E402
from storagebrief.core.characterize import tracefs_raw as raw            # noqa: E402
from storagebrief.core.characterize import raw_writer                     # noqa: E402

_ACT = {"D": 0, "C": 1, "R": 2}


def _key(e: ch.Event) -> tuple:
    return round(e.t * 1e9), e.action, e.dev, e.op, e.sector, e.sectors


def test_raw_pages_decode_to_the_events_written_in_time_order_across_cpus(tmp_path):
    f = tmp_path / "t.tracefs-raw.gz"
    w = raw_writer.RawWriter(f, sync_s=0.05)
    written = [  # t ns, action, rwbs, sector, sectors, cpu
        (1_000_000_000, "D", "R", 0, 8, 1),
        (1_000_000_000, "D", "WS", 64, 8, 0),            # same ns on a lower CPU: comes first
        (1_000_000_500, "C", "R", 0, 8, 0),
        (1_000_000_500, "D", "R", 8, 8, 0),              # same ns, same CPU: page order kept
        (1_400_000_000, "C", "WS", 64, 8, 1),            # 0.4 s gap: a time-extend record
        (1_400_000_001, "C", "FF", (1 << 64) - 1, 0, 1), # a flush completion's sector is (u64)-1
        (1_400_000_002, "R", "FWS", 1 << 40, 2048, 0),
        (9_000_000_000, "D", "D", 77, 8, 0),             # 7.6 s gap: the extend's high word
    ]
    for t, a, rwbs, sec, n, cpu in written:
        w.add(t, _ACT[a], (8 << 20) | 16, rwbs, sec, n, cpu)
    for i in range(3000):                              # more than one page per CPU
        w.add(9_000_001_000 + i * 1000, i % 2, (8 << 20) | 16, "R", i * 8, 8, i % 2)
    w.close()
    counts = ch.ParseCounts()
    got = [_key(e) for e in ch.events(f, "tracefs-raw", counts)]
    order = sorted(range(len(written)), key=lambda i: (written[i][0], written[i][5]))
    want = [(written[i][0], written[i][1], (8, 16), ch.op_of(written[i][2]), written[i][3], written[i][4]) for i in order]
    assert got[:len(written)] == want
    assert len(got) == len(written) + 3000 and counts.lines == len(got) and counts.malformed == 0
    assert [k[0] for k in got] == sorted(k[0] for k in got)
    assert ch.is_raw(f) and ch.sniff_format(f) == "tracefs-raw"


def _page(events: list[bytes], ts: int, commit_flags: int = 0, lost: int | None = None) -> bytes:
    data = b"".join(events)
    tail = b"" if lost is None else struct.pack("<Q", lost)
    return (struct.pack("<Qq", ts, len(data) | commit_flags) + data + tail).ljust(4096, b"\0")


def _record(delta: int, payload: bytes) -> bytes:
    payload += b"\0" * (-len(payload) % 4)
    return struct.pack("<I", len(payload) // 4 | delta << 5) + payload


def _issue(sector: int) -> bytes:
    rec = bytearray(65)
    struct.pack_into("<HiIQI", rec, 0, 2104, 1, 0, 0, 0)
    struct.pack_into("<I", rec, 8, (8 << 20) | 16)
    struct.pack_into("<QI", rec, 16, sector, 8)
    rec[34:35] = b"R"
    struct.pack_into("<I", rec, 60, (1 << 16) | 64)
    return bytes(rec)


def _raw_file(path, pages: bytes) -> None:
    """A raw trace of hand-made pages of CPU 0 (the writer's header, no events of its own)."""
    w = raw_writer.RawWriter(path)
    w.fh.write(RECORD.pack(PAGES, 0, len(pages)) + pages)
    w.fh.close()


def test_raw_padding_adds_no_time_and_stored_lost_counts_are_read(tmp_path):
    f = tmp_path / "p.gz"
    discarded = struct.pack("<II", 29 | 7 << 5, 64) + b"\0" * 60            # a discarded 64-byte record
    long_rec = struct.pack("<II", 0 | 3 << 5, 4 + 68) + _issue(30) + b"\0" * 3   # type_len 0: length word
    page1 = _page([_record(100, _issue(10)), discarded, _record(5, _issue(20)), long_rec], ts=5_000)
    page2 = _page([_record(0, _issue(40)), struct.pack("<I", 29)], ts=9_000, commit_flags=3 << 30, lost=17)
    _raw_file(f, page1 + page2 + page2[:100])                                  # + a cut-off page
    counts = ch.ParseCounts()
    got = [(round(e.t * 1e9), e.sector) for e in ch.events(f, "tracefs-raw", counts)]
    assert got == [(5_100, 10), (5_105, 20), (5_108, 30), (9_000, 40)]
    assert counts.lost_events == 17 and counts.malformed == 0


def test_raw_trace_gives_the_statistics_of_the_same_events_as_text(tmp_path):
    tf, _ = _random_trace(11)
    text = tmp_path / "t.txt"
    text.write_text(tf)
    evs = list(ch.events(text, "tracefs", ch.ParseCounts()))
    f = tmp_path / "t.tracefs-raw.gz"
    w = raw_writer.RawWriter(f)
    for i, e in enumerate(evs):
        w.add(round(e.t * 1e9), _ACT[e.action], e.dev[0] << 20 | e.dev[1], e.op, e.sector, e.sectors, cpu=0)
    w.close()
    assert [_key(e) for e in ch.events(f, "tracefs-raw", ch.ParseCounts())] == [_key(e) for e in evs]
    for ref in (False, True):
        r_text, d_text, _ = ch.characterize(text, "tracefs", 3_000_000, sample_points=10**6, reference=ref)
        r_raw, d_raw, _ = ch.characterize(f, "tracefs-raw", 3_000_000, sample_points=10**6, reference=ref)
        skip = {"format", "malformed_lines", "lost_events", "lines"}     # the text's junk and LOST lines
        bad = {k: (r_raw[k], r_text[k]) for k in r_text if k not in skip and not _same(r_raw[k], r_text[k])
               and not (isinstance(r_raw[k], float) and math.isclose(r_raw[k], r_text[k], rel_tol=1e-9))}
        assert not bad
        assert d_raw["sizes_kib"] == d_text["sizes_kib"] and d_raw["locality_bins"] == d_text["locality_bins"]
    assert r_raw["requeues"] > 5 and r_raw["devices"] == 3 and r_raw["flush_ops"] > 0


def test_raw_format_errors_are_clear_and_a_cut_file_keeps_what_it_has(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(_tracefs_text())
    with pytest.raises(ch.TraceError, match="not a storagebrief raw trace.*--format tracefs"):
        ch.characterize(text, "tracefs-raw")
    with pytest.raises(ch.TraceError, match="does not exist"):
        ch.characterize(tmp_path / "nope", "tracefs-raw")
    f = tmp_path / "t.gz"
    w = raw_writer.RawWriter(f)
    for i in range(20000):
        w.add(10**9 + i * 100_000, i % 2, (8 << 20), "R", i * 8, 8)
    w.close()
    whole = f.read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])                       # a reader killed mid-write
    counts = ch.ParseCounts()
    got = list(ch.events(cut, "tracefs-raw", counts))
    assert 0 < len(got) < 20000 and counts.malformed == 1 and "ends early" in counts.malformed_examples[0]
    out = tmp_path / "o"
    assert main(["characterize", "--trace", str(f), "--format", "tracefs-raw", "--out", str(out)]) == 0
    assert json.loads((out / "characterization.json").read_text())["summary"]["read_ops"] == 10000


# --------------------------------------------------------------------------- faults (issue 20): no silent wrong numbers
from storagebrief.core import machine                                     # noqa: E402


def _local_disk() -> tuple[int, int, int]:
    """(major, minor, sectors) of a block device of this machine: a foreign trace may carry its number."""
    from pathlib import Path
    for d in sorted(Path("/sys/dev/block").iterdir()) if Path("/sys/dev/block").is_dir() else []:
        try:
            size = int((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if size > 0:
            ma, mi = d.name.split(":")
            return int(ma), int(mi), size
    pytest.skip("no block device in /sys/dev/block to share a number with")


def _blkparse_requests(n: int, dev: tuple[int, int], top: int, t0: float = 0.0, seed: int = 1) -> list[str]:
    """n uniformly random 4 KiB reads (issue + completion) of sectors below top, 1 ms apart."""
    import random
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        t, s = t0 + 0.001 * (i + 1), rng.randrange(0, top - 8)
        lines.append(f"{dev[0]},{dev[1]}    1   {2 * i + 1:>6}     {t:.9f}  4242  D   R {s} + 8 [fio]")
        lines.append(f"{dev[0]},{dev[1]}    1   {2 * i + 2:>6}     {t + 0.0002:.9f}     0  C   R {s} + 8 [0]")
    return lines


_SUMMARY = ["", "CPU1 (254,0):", " Reads Queued:           4,       28KiB\t Writes Queued:           0,        0KiB",
            "Total (254,0):", " Reads Completed:        4,       28KiB", "", "Throughput (R/W): 16KiB/s / 0KiB/s",
            "Events (254,0): 8 entries", "Skips: 0 forward (0 -   0.0%)"]
FOUR_TIB = 4 * 2**40 // 512


def _both(f, fmt, cap=None, **kw):
    """The fast path's and the reference's results, checked equal; the fast one is returned."""
    fast = ch.characterize(f, fmt, cap, sample_points=10**6, **kw)
    ref = ch.characterize(f, fmt, cap, sample_points=10**6, reference=True, **kw)
    assert {k: (fast[0][k], ref[0][k]) for k in ref[0] if not _same(fast[0][k], ref[0][k])} == {}
    assert vars(fast[2]) == vars(ref[2])
    return fast


def test_foreign_blkparse_trace_with_a_local_device_number_takes_its_highest_sector_not_sysfs(tmp_path):
    ma, mi, local = _local_disk()
    f = tmp_path / "foreign.txt"
    f.write_text("\n".join(_blkparse_requests(2000, (ma, mi), FOUR_TIB)) + "\n")     # another machine's 4 TiB disk
    row, _, _ = _both(f, "blkparse")
    assert row["capacity_source"] == "highest_sector" and row["capacity_sectors"] != local
    assert FOUR_TIB * 0.99 < row["capacity_sectors"] <= FOUR_TIB and row["requests_beyond_capacity"] == 0
    assert "capacity unknown (blkparse text carries no device capacity)" in row["warning"]
    # a uniform spread: the busiest 10 % of the space hold far less than the 99 % sysfs gave
    assert row["locality_percent"] < 40 and row["read_ops"] == 2000


def _raw_trace(path, header: dict, sectors=(0, 800, 4000), dev=(8, 16)):
    w = raw_writer.RawWriter(path, header=header)
    for i, s in enumerate(sectors):
        w.add(10**9 + i * 1000_000, 0, dev[0] << 20 | dev[1], "R", s, 8)
        w.add(10**9 + i * 1000_000 + 500, 1, dev[0] << 20 | dev[1], "R", s, 8)
    w.close()


def test_raw_trace_capacity_from_its_header_else_sysfs_on_this_host_else_highest_sector(tmp_path):
    ma, mi, local = _local_disk()
    here = machine.host_identity()
    elsewhere = {**here, "boot_id": "another-boot"}
    cases = [  # header fields -> (capacity_source, capacity)
        ({"device": [ma, mi], "capacity_sectors": 80_000, "host": elsewhere}, ("header", 80_000)),
        ({"device": [ma, mi], "host": here}, ("sysfs", local)),
        ({"device": [ma, mi], "host": elsewhere}, ("highest_sector", 4008)),
        ({}, ("highest_sector", 4008)),                  # a trace written before these fields: unknown
    ]
    for i, (header, (source, cap)) in enumerate(cases):
        f = tmp_path / f"t{i}.tracefs-raw.gz"
        _raw_trace(f, header, dev=(ma, mi))
        row, _, _ = _both(f, "tracefs-raw")
        assert (row["capacity_source"], row["capacity_sectors"]) == (source, cap), header
        assert ("capacity unknown" in row["warning"]) == (source == "highest_sector")
        assert row["read_ops"] == 3
    assert ch.characterize(f, "tracefs-raw", 123_456)[0]["capacity_source"] == "cli"
    # an event of another device than the header names is malformed, not counted
    f = tmp_path / "other.tracefs-raw.gz"
    _raw_trace(f, {"device": [ma, mi + 1], "capacity_sectors": 80_000}, dev=(ma, mi))
    w = raw_writer.RawWriter(f, header={"device": [ma, mi], "capacity_sectors": 80_000})
    w.add(10**9, 0, ma << 20 | mi, "R", 0, 8)
    w.add(10**9 + 1000, 0, ma << 20 | (mi + 1), "R", 64, 8)
    w.close()
    row, _, counts = _both(f, "tracefs-raw")
    assert row["read_ops"] == 1 and row["malformed_lines"] == 1
    assert "is not the traced device" in counts.impossible_examples[0]


def test_requests_beyond_capacity_are_warned_in_the_cli_line_csv_and_json(tmp_path, capsys):
    f = tmp_path / "foreign.txt"
    f.write_text("\n".join(_blkparse_requests(2000, (254, 0), FOUR_TIB)) + "\n")
    out = tmp_path / "out"
    assert main(["characterize", "--trace", str(f), "--format", "blkparse", "--capacity-sectors", "536870912",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("storagebrief: warning: ") and "beyond the capacity" in err[0]
    frame = pd.read_csv(out / "characterization.csv")
    beyond = int(frame.requests_beyond_capacity[0])
    assert 1800 < beyond < 2000 and frame.capacity_source[0] == "cli"
    assert f"{beyond:,} of 2,000 requests end beyond the capacity (536,870,912 sectors" in frame.warning[0]
    assert "locality figures are not reliable" in frame.warning[0]
    js = json.loads((out / "characterization.json").read_text())["summary"]
    assert js["requests_beyond_capacity"] == beyond and js["warning"] == frame.warning[0]
    # the same trace with its real capacity: no request beyond, no warning
    row, _, _ = _both(f, "blkparse", FOUR_TIB)
    assert row["requests_beyond_capacity"] == 0 and row["warning"] == ""


def test_concatenated_blkparse_outputs_count_every_request(tmp_path):
    f = tmp_path / "two.txt"
    first, second = _blkparse_requests(49, (254, 0), 10**6), _blkparse_requests(1951, (254, 0), 10**6, seed=2)
    f.write_text("\n".join(first + _SUMMARY + second + _SUMMARY) + "\n")     # both start their clock at 0
    row, _, counts = _both(f, "blkparse", 10**6)
    assert row["read_ops"] == 2000 and row["unmatched_issues"] == 0 and row["malformed_lines"] == 0
    assert counts.clock_restarts == 1 and "2 blkparse outputs appended" in row["warning"]
    # the second output's clock continues where the first ended: the two spans add up
    assert row["trace_length_s"] == pytest.approx((0.0492 - 0.001) + (1.9512 - 0.001), abs=1e-6)
    assert row["avg_iops"] == pytest.approx(2000 / row["trace_length_s"])


@pytest.mark.parametrize("fmt", ["tracefs", "blkparse"])
def test_out_of_order_first_timestamp_is_malformed_and_the_length_stays_positive(tmp_path, fmt):
    lines = _blkparse_requests(2000, (254, 0), 10**6)
    lines[0] = lines[0].replace("0.001000000", "8.001000000")         # the first issue, 8 s late
    if fmt == "tracefs":
        lines = [_as_tracefs(x) for x in lines]
    f = tmp_path / "t.txt"
    f.write_text("\n".join(lines) + "\n")
    row, _, counts = _both(f, fmt, 10**6)
    assert row["malformed_lines"] == 1 and "out of time order" in counts.impossible_examples[0]
    assert counts.impossible_examples[0].startswith("8.001000 D 254,0 R ")
    # from the first completion (its issue was dropped) to the last one
    assert row["trace_length_s"] == pytest.approx(2.0002 - 0.0012, abs=1e-6) and row["trace_length_s"] > 0
    assert row["avg_iops"] == pytest.approx(1999 / row["trace_length_s"]) and row["read_ops"] == 1999
    assert row["unmatched_completions"] == 1                              # its completion stays, unmatched


def _as_tracefs(blkparse_line: str) -> str:
    f = blkparse_line.split()
    dev, t, act, rwbs, sector, n = f[0], f[3], f[5], f[6], f[7], f[9]
    if act == "D":
        return f"fio-4242 [001] ..... {t}: block_rq_issue: {dev} {rwbs} {int(n) * 512} () {sector} + {n} be,0,4 [fio]"
    return f"<idle>-0 [000] ..s1. {t}: block_rq_complete: {dev} {rwbs} () {sector} + {n} be,0,4 [0]"


def test_time_order_screen_drops_the_event_at_fault():
    def kept(times):
        evs = [ch.Event(t, "D", (8, 0), "R", 8 * i, 8) for i, t in enumerate(times)]
        return [e.t for e in ch.Screen(ch.ParseCounts(), lambda d: None).events(evs)]
    assert kept([10, 1, 2, 3]) == [1, 2, 3]                  # a spike at the start
    assert kept([1, 2, 50, 3, 4]) == [1, 2, 3, 4]            # a spike later
    assert kept([1, 2, -5, 3]) == [1, 2, 3]                  # a dip
    assert kept([2, -5, 2.001]) == [2, 2.001]                # the third event decides at the start
    assert kept([1, 0.995, 2]) == [1, 0.995, 2]              # within the 10 ms tolerance: CPUs interleave
    assert kept([1, 2, 3, 0.1, 0.2]) == [1, 2, 3]            # time back for good: the rest is malformed
    assert kept([10, 2]) == [2]


def test_impossible_request_sizes_are_malformed(tmp_path):
    lines = _blkparse_requests(100, (254, 0), 10**6)
    lines[10] = lines[10].replace("R ", "R 5000 + 100000000000000 [fio]  #", 1).split("  #")[0]   # 10**14 sectors
    lines[20] = lines[20].split(" R ")[0] + f" R {2**64 - 4} + 8 [fio]"                            # past sector 2**64
    lines[30] = lines[30].split(" R ")[0] + " R 64 + 2000000 [fio]"                                # > the device
    f = tmp_path / "t.txt"
    f.write_text("\n".join(lines) + "\n")
    row, _, counts = _both(f, "blkparse", 1_000_000)
    assert row["malformed_lines"] == 3 and row["read_ops"] == 97 and row["read_kib_max"] == 4
    why = " | ".join(counts.impossible_examples)
    assert "longer than any block request" in why and "beyond sector 2^64" in why and "longer than the whole device" in why
    # without a capacity the first pass does not let the impossible ones stretch the address space (the
    # request longer than this device is possible on another: it ends the highest, at 64 + 2,000,000)
    assert _both(f, "blkparse")[0]["capacity_sectors"] == 2_000_064
    g = tmp_path / "t.tracefs-raw.gz"                       # raw: nr_sector is 32 bits, still too long
    w = raw_writer.RawWriter(g)
    w.add(10**9, 0, 8 << 20, "R", 0, 8)
    w.add(10**9 + 1000, 0, 8 << 20, "W", 64, 2**32 - 1)
    w.close()
    row, _, _ = _both(g, "tracefs-raw", 10**6)
    assert row["read_ops"] == 1 and row["write_ops"] == 0 and row["malformed_lines"] == 1


def test_disordered_trace_fast_path_equals_the_reference(tmp_path, monkeypatch):
    """Spikes, dips, impossible sizes and a step back for good, across many small chunks."""
    import random
    monkeypatch.setattr(ch.chunks, "CHUNK_BYTES", 1 << 14)
    tf, _ = _random_trace(5, events=20_000)
    rng = random.Random(3)
    lines = tf.splitlines()
    for i in range(3, len(lines) - 3, 97):
        if ": block_rq_" not in lines[i]:
            continue
        t = lines[i].split(": block_rq_")[0].split()[-1]
        x = rng.random()
        new = f"{float(t) + rng.choice([-50, -1, 0.5, 30]):.6f}" if x < 0.8 else t
        lines[i] = lines[i].replace(f" {t}:", f" {new}:", 1)
        if x >= 0.8:
            lines[i] = lines[i].replace(" + ", " + 9999999999", 1)
    cut = len(lines) * 9 // 10                  # the last tenth steps 1,000 s back
    for i in range(cut, len(lines)):
        if ": block_rq_" in lines[i]:
            t = lines[i].split(": block_rq_")[0].split()[-1]
            lines[i] = lines[i].replace(f" {t}:", f" {float(t) - 1000:.6f}:", 1)
    lines[0], lines[3] = lines[3], lines[0]
    f = tmp_path / "t.txt"
    f.write_text("\n".join(lines) + "\n")
    for cap in (None, 3_000_000):
        row, _, counts = _both(f, "tracefs", cap)
        assert row["malformed_lines"] > 2000 and row["trace_length_s"] > 0 and counts.impossible_examples


def _fails_with_one_line(capsys, trace, fmt, out, *more) -> str:
    assert main(["characterize", "--trace", str(trace), "--format", fmt, "--out", str(out), *more]) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storagebrief: error: ") and "Traceback" not in cap.err, cap.err
    assert not out.exists(), "an output was written"
    return lines[0]


@pytest.mark.parametrize("fmt", ["tracefs", "blkparse"])
def test_truncated_or_corrupt_gzip_text_trace_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, fmt):
    text = _tracefs_text() if fmt == "tracefs" else _blkparse_text()
    whole = gzip.compress((text * 400).encode())
    cut = tmp_path / "cut.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    crc = tmp_path / "crc.gz"                                 # the data inflates, its checksum does not match
    crc.write_bytes(whole[:-8] + bytes(b ^ 0xFF for b in whole[-8:-4]) + whole[-4:])
    inflate = tmp_path / "inflate.gz"                         # the deflate stream itself is broken
    inflate.write_bytes(whole[:10] + b"\xff" * 16 + whole[26:])
    for f, what in ((cut, "ends early"), (crc, "is damaged"), (inflate, "is damaged")):
        for cap in ([], ["--capacity-sectors", "8000"]):       # with and without the first pass
            line = _fails_with_one_line(capsys, f, fmt, tmp_path / "out", *cap)
            assert what in line and "gzip -dc" in line


def _crafted(path, header: bytes, body: bytes | None = None) -> None:
    with gzip.open(path, "wb") as g:
        g.write(RAW_MAGIC + header)
        if body is not None:
            g.write(body)


def _header(**change) -> bytes:
    h = {"page_size": 4096, "clock": "local", "kernel": "x", "cpus": [0], "header_page": raw_writer._HEADER_PAGE,
         "events": {n: raw_writer._format_text(n) for n in raw_writer._SYNTHETIC}}
    for key, (old, new) in change.items():            # event name or header_page: replace a piece of its text
        if key == "header_page":
            h["header_page"] = h["header_page"].replace(old, new)
        else:
            h["events"][key] = h["events"][key].replace(old, new)
    return json.dumps(h).encode() + b"\n"


CRAFTED = {   # name: (header line(s), what the error says)
    "nested": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "not a JSON object"),
    "endless": (None, "longer than"),        # a header line past raw.MAX_HEADER_BYTES, made in the test
    "format_not_text": (json.dumps({"page_size": 4096, "header_page": raw_writer._HEADER_PAGE,
                                    "events": {"block_rq_issue": 7}}).encode() + b"\n", "not text"),
    "field_3_bytes": (_header(block_rq_issue=("dev;\toffset:8;\tsize:4", "dev;\toffset:8;\tsize:3")), "fields dev"),
    "field_past_page": (_header(block_rq_issue=("offset:16;", "offset:999999999999999999999;")), "fields sector"),
    "rwbs_1_byte": (_header(block_rq_issue=("offset:34;\tsize:10", "offset:34;\tsize:1")), "fields rwbs"),
    "timestamp_past_data": (_header(header_page=("offset:0;", "offset:9000;")), "page layout not understood"),
    "page_1_tib": (json.dumps({"page_size": 1 << 40, "header_page": raw_writer._HEADER_PAGE}).encode() + b"\n",
                   "page layout not understood"),
    "capacity_text": (_header()[:-2] + b', "device": [8, 0], "capacity_sectors": "big"}\n', "capacity_sectors"),
    "device_huge": (_header()[:-2] + b', "device": [99999999, 0]}\n', "is not [major, minor]"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_raw_header_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, name):
    header, says = CRAFTED[name]
    if header is None:
        header = b'{"x": "' + b"a" * (raw.MAX_HEADER_BYTES + 10)
    f = tmp_path / "t.tracefs-raw.gz"
    _crafted(f, header, RECORD.pack(PAGES, 0, 4096) + _page([_record(0, _issue(10))], ts=5_000))   # a page to decode
    assert says in _fails_with_one_line(capsys, f, "tracefs-raw", tmp_path / "out")


def test_a_record_length_of_4_gib_allocates_nothing_and_keeps_what_came_before(tmp_path):
    f = tmp_path / "t.tracefs-raw.gz"
    w = raw_writer.RawWriter(f)
    for i in range(50):
        w.add(10**9 + i * 1000, 0, 8 << 20, "R", 8 * i, 8)
    w._flush(10**9 + 10**6)
    w.fh.write(RECORD.pack(PAGES, 0, 2**32 - 1) + b"\0" * 100)   # a framing that claims 4 GiB
    w.fh.close()
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row, _, counts = ch.characterize(f, "tracefs-raw", 10**6)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024      # KiB
    assert row["read_ops"] == 50 and counts.malformed == 1 and "a record of 4,294,967,295 bytes" in counts.malformed_examples[0]
