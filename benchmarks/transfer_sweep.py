"""Benchmark the transfer sweep (prints ratios measured side by side; not a test).

1. We only parse: for a few (size, QD) jobs run here, our parsed bandwidth and IOPS ÷ fio's own
   numbers for the same job, from fio's terse output written in the same run as its JSON+
   (`--output-format=terse,json+`; terse v3 read bandwidth is KiB/s, IOPS an integer). Goal 1.000.
2. The forecast ÷ the emulated accelerators supported on the same target and workload, where both
   ran (reports/transfer_sweep/forecast.csv beside reports/emulate/mlperf_results.json, as the study
   wrote them). Goal: within ±1 accelerator.

Usage: python benchmarks/transfer_sweep.py [--dir DIR] [--reports reports]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from storagebrief.studies.transfer_sweep import fio

TERSE_READ_BW_KIB, TERSE_READ_IOPS = 6, 7     # 0-based fields of terse v3 (after version;fio;name;gid;error)


def parse_both(text: str) -> tuple[list[str], dict]:
    """fio writes the terse line(s) and the JSON document to the same output file."""
    start = text.index("{")
    terse = [ln for ln in (text[:start] + text[text.rindex("}") + 1:]).splitlines() if ln.count(";") > 20]
    return terse[0].split(";"), json.loads(text[start:text.rindex("}") + 1])


def part1(directory: Path) -> None:
    f = directory / "bench.bin"
    if not f.exists() or f.stat().st_size != 128 << 20:
        f.write_bytes(np.random.default_rng(0).integers(0, 256, 128 << 20, dtype=np.uint8).tobytes())
    print("1. parsed ÷ fio's own numbers (same job; terse and JSON+ from one fio run)")
    print(f"   {'job':<18} {'parsed MB/s':>12} {'terse MB/s':>11} {'bw ratio':>9} {'parsed IOPS':>12} "
          f"{'terse IOPS':>11} {'IOPS ratio':>10}")
    for bs, qd in ((4096, 1), (4096, 16), (131072, 8), (1 << 20, 4)):
        out = directory / "bench.out"
        args = fio.job_args(fio.FioJob(f, "randread", bs, qd, 1, "io_uring", 0.2, 1.0, f.stat().st_size, out))
        args = [a if not a.startswith("--output-format=") else "--output-format=terse,json+" for a in args]
        subprocess.run([fio.fio_binary(), *args], check=True, capture_output=True)
        terse, doc = parse_both(out.read_text())
        row = fio.parse(doc, "randread")
        t_bw = float(terse[TERSE_READ_BW_KIB]) * 1024          # KiB/s -> B/s (fio rounds to whole KiB/s)
        t_iops = float(terse[TERSE_READ_IOPS])
        print(f"   {f'{bs // 1024}K QD{qd}':<18} {row['throughput_mb_per_s']:>12.2f} {t_bw / 1e6:>11.2f} "
              f"{row['fio_bw_bytes'] / t_bw:>9.3f} {row['iops']:>12.0f} {t_iops:>11.0f} {row['iops'] / t_iops:>10.3f}")


def part2(reports: Path) -> None:
    print("2. forecast ÷ emulated accelerators supported (same target and workload, idle system)")
    fc_path = reports / "transfer_sweep" / "forecast.csv"
    if not fc_path.exists():
        print(f"   no {fc_path}: run `storagebrief transfer-sweep` first")
        return
    fc = pd.read_csv(fc_path)
    fc = fc[fc.load == "idle"]
    both = fc.dropna(subset=["emulated_accelerators_supported"])
    if both.empty:
        print(f"   no emulated answer beside the forecast (reports/emulate has not run with the same workload); "
              f"forecasts alone: " + ", ".join(f"{r.target}/{r.workload}: {r.accelerators_forecast}"
                                               for r in fc.itertuples()))
        return
    for r in both.itertuples():
        ratio = r.accelerators_forecast / r.emulated_accelerators_supported if r.emulated_accelerators_supported else float("nan")
        floor = (" (emulated = its largest N tested: a floor)"
                 if r.emulated_accelerators_supported == r.emulated_max_accelerators_tested else "")
        print(f"   {r.target}/{r.workload}: forecast {r.accelerators_forecast}, emulated "
              f"{int(r.emulated_accelerators_supported)} -> ratio {ratio:.2f}, difference "
              f"{int(r.forecast_minus_emulated):+d}{floor}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="folder for the 128 MiB test file (default: a temp folder)")
    ap.add_argument("--reports", default="reports")
    a = ap.parse_args()
    if a.dir:
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        part1(Path(a.dir))
    else:
        with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
            part1(Path(d))
    part2(Path(a.reports))


if __name__ == "__main__":
    main()
