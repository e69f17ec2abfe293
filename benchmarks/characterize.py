"""Block-trace benchmark: parser speed and memory, and what tracing costs the run it watches.

    python benchmarks/characterize.py [--events 5000000] [--dir /tmp] [--fio-seconds 4] [--pairs 3]
                                      [--study preprocess|none]

Prints, measured side by side in one run:
  1. events parsed per second and peak RSS (MiB) of `characterize` on a generated trace of --events
     events (issues and completions), in a child process of its own, for the same events written
     both ways: kernel text (tracefs, a user's trace_pipe) and binary ring-buffer pages
     (tracefs-raw, what the studies record)
  2. tracing overhead as ratios of with-tracing ÷ without, alternating pairs:
       fio 4 KiB random O_DIRECT reads (IOPS; the worst case: the most events per byte), at queue
       depth 1 (psync) and 16 (io_uring)
       a tiny preprocess study run (input MB/s), through the sweep engine with run.trace on / off
     A ratio of 1.00 means no cost; the goal is >= 0.97 (a few percent at most).
Needs root and tracefs for part 2 (it says so and skips it otherwise).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from storagebrief.core import blocktrace, targets
from storagebrief.core.characterize.raw_writer import RawWriter

LIB = Path(__file__).resolve().parents[1] / "lib"


def generate(path: Path, raw_path: Path, events: int, seed: int = 0) -> None:
    """The same events as a tracefs text trace and a raw one: reads and writes, 70 % random, sizes
    4-256 KiB, each issue (CPU 1) then its completion (CPU 0)."""
    rng = random.Random(seed)
    sizes = [8, 16, 64, 128, 256, 512]
    t, sector = 1000.0, 0
    raw = RawWriter(raw_path)
    with open(path, "w") as fh:
        buf = []
        for i in range(events // 2):
            n = rng.choice(sizes)
            sector = sector if rng.random() < 0.3 else rng.randrange(0, 500_000_000)
            rw = "R" if rng.random() < 0.8 else "WS"
            t += 0.00005
            buf.append(f"            fio-4242    [001] ..... {t:.6f}: block_rq_issue: 254,0 {rw} {n * 512} () "
                       f"{sector} + {n} be,0,4 [fio]\n")
            buf.append(f"          <idle>-0       [000] ..s1. {t + 0.00003:.6f}: block_rq_complete: 254,0 {rw} () "
                       f"{sector} + {n} be,0,4 [0]\n")
            ns = round(t * 1e9)
            raw.add(ns, 0, 254 << 20, rw, sector, n, cpu=1)
            raw.add(ns + 30_000, 1, 254 << 20, rw, sector, n, cpu=0)
            sector += n
            if len(buf) >= 20000:
                fh.writelines(buf)
                buf.clear()
        fh.writelines(buf)
    raw.close()


PARSE = """
import json, resource, sys, time
from storagebrief.core import characterize as ch
t = time.perf_counter()
row, _, counts = ch.characterize(sys.argv[1], sys.argv[2], capacity_sectors=536870912)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "lines": counts.lines, "reads": row["read_ops"], "writes": row["write_ops"],
                  "malformed": counts.malformed, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def parse_speed(trace: Path, fmt: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PARSE, str(trace), fmt], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(LIB)})
    return json.loads(out.stdout)


def fio_iops(path: Path, seconds: float, trace_dev: tuple[int, int] | None, trace_out: Path, qd: int) -> float:
    tr = blocktrace.BlockTrace(trace_dev, trace_out, 8192).start() if trace_dev else None
    try:
        out = subprocess.run(["fio", "--name=bench", f"--filename={path}", "--rw=randread", "--bs=4k", "--direct=1",
                              *(["--ioengine=psync"] if qd == 1 else ["--ioengine=io_uring", f"--iodepth={qd}"]), "--size=256m", "--time_based", f"--runtime={seconds}",
                              "--output-format=json"], capture_output=True, text=True, check=True).stdout
    finally:
        if tr is not None:
            res = tr.stop()
            if res.lost_events:
                print(f"  (lost {res.lost_events} events)")
    return json.loads(out)["jobs"][0]["read"]["iops"]


def study_rate(base: Path, trace: bool) -> float:
    """Mean input MB/s of a tiny preprocess study run through the CLI (run.trace on or off)."""
    params = {"targets": [{"name": "bench", "path": str(base / "target")}],
              "run": {"cold_cache": True, "monitor_interval_s": 0.25, "trace": trace},
              "preprocess": {"image_count": 16, "image_counts": [], "processes": [2], "repeats": 2,
                             "image_width": 1920, "image_height": 1080, "num_classes": 2,
                             "resize_width": 64, "resize_height": 64}}
    f = base / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    out = base / ("out-trace" if trace else "out-plain")
    subprocess.run([sys.executable, "-m", "storagebrief.cli", "preprocess", "--params", str(f), "--out", str(out),
                    "--progress", "off"], check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(LIB)})
    import pandas as pd
    return float(pd.read_csv(out / "runs.csv").input_mb_per_s.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temp dir under /tmp)")
    ap.add_argument("--fio-seconds", type=float, default=4)
    ap.add_argument("--pairs", type=int, default=3, help="traced/untraced pairs per measurement (>= 1)")
    ap.add_argument("--study", choices=("preprocess", "none"), default="preprocess")
    a = ap.parse_args()
    if a.pairs < 1 or a.fio_seconds <= 0:
        ap.error(f"--pairs must be >= 1 and --fio-seconds > 0 (got {a.pairs}, {a.fio_seconds})")
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="sb-bench-trace-") as tmp:
        base = Path(tmp)
        trace, raw = base / "gen.trace", base / "gen.tracefs-raw.gz"
        t = time.perf_counter()
        generate(trace, raw, a.events)
        print(f"generated {a.events:,} events (text {trace.stat().st_size / 2**20:,.0f} MiB, raw "
              f"{raw.stat().st_size / 2**20:,.0f} MiB gzip) in {time.perf_counter() - t:.1f} s")
        speed = {}
        for fmt, f in (("tracefs", trace), ("tracefs-raw", raw)):
            r = speed[fmt] = parse_speed(f, fmt)
            print(f"1. parser, {fmt:11}: {r['lines'] / r['seconds']:,.0f} events/s ({r['lines']:,} events in "
                  f"{r['seconds']:.1f} s), peak RSS {r['rss_kib'] / 1024:,.0f} MiB, {r['malformed']} malformed")
            f.unlink()
        same = speed["tracefs"]["reads"] == speed["tracefs-raw"]["reads"] and \
            speed["tracefs"]["writes"] == speed["tracefs-raw"]["writes"]
        print(f"   raw / text speed: {speed['tracefs']['seconds'] / speed['tracefs-raw']['seconds']:.2f}x; "
              f"same reads and writes counted: {same}")
        try:
            blocktrace.tracefs_root()
        except blocktrace.TraceUnavailable as exc:
            print(f"2. tracing overhead: skipped ({exc})")
            return
        dev = targets.resolve_device(base)
        if dev.major is None:
            print(f"2. tracing overhead: skipped ({dev.reason})")
            return
        data = base / "fio.dat"
        subprocess.run(["fio", "--name=fill", f"--filename={data}", "--rw=write", "--bs=1m", "--size=256m",
                        "--direct=1", "--output=/dev/null"], check=True)
        for qd in (1, 16):
            on, off = [], []
            for i in range(a.pairs):       # alternate, so drift hits both alike
                off.append(fio_iops(data, a.fio_seconds, None, base / "x.gz", qd))
                on.append(fio_iops(data, a.fio_seconds, (dev.major, dev.minor), base / f"t{i}.gz", qd))
            print(f"2a. fio 4 KiB randread O_DIRECT, QD {qd:2}: {statistics.mean(on):,.0f} IOPS traced vs "
                  f"{statistics.mean(off):,.0f} untraced -> ratio {statistics.mean(on) / statistics.mean(off):.3f} "
                  f"(pairs: {', '.join(f'{x / y:.3f}' for x, y in zip(on, off))})")
        if a.study == "preprocess":
            son, soff = [], []
            for _ in range(max(1, a.pairs - 1)):
                soff.append(study_rate(base, False))
                son.append(study_rate(base, True))
            print(f"2b. preprocess study (input MB/s): {statistics.mean(son):,.1f} traced vs {statistics.mean(soff):,.1f} "
                  f"untraced -> ratio {statistics.mean(son) / statistics.mean(soff):.3f}")


if __name__ == "__main__":
    main()
