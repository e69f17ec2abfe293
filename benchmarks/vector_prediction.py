"""How well does a target's own 4 KiB random-read IOPS predict vector-search QPS? The vector-search study at like
settings, several rounds, every point of every round printed.

    flock /work/notes/cpu.lock python benchmarks/vector_prediction.py [--targets local,hdd-emulated]
        [--search-list 20,50] [--beam-width 1,2] [--threads 1] [--rounds 3] [--max-point-s 1.0]

Each round is one `storagebrief vector-search` run (params.yaml's targets and vector_search section, these axes
over it; the data sets on the targets are reused after the first). Prints per round and point: recall, measured
QPS, fio's IOPS at the point's queue depth, the predicted QPS (IOPS ÷ the engine's reads per query), the error
(measured ÷ predicted − 1), the regime and the three reads-per-query figures; then per target and regime the
median and worst |error| over all rounds. Not a test: figures depend on the machine, its disk and its load.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _round(args, base: dict, work: Path, n: int) -> pd.DataFrame:
    names = args.targets.split(",")
    # the params file lives in a temporary folder: the targets' relative paths stay the project's
    params = {**base, "targets": [{**t, "path": str((REPO / t["path"]).resolve())}
                                  for t in base["targets"] if t["name"] in names]}
    params["vector_search"] = {**base["vector_search"], "targets": [], "search_list": _ints(args.search_list),
                               "beam_width": _ints(args.beam_width), "threads": _ints(args.threads),
                               "max_point_s": args.max_point_s, "uniform_control": False, "repeats": 1}
    pfile = work / f"params-{n}.yaml"
    pfile.write_text(yaml.safe_dump(params))
    out = work / f"round-{n}"
    done = subprocess.run([sys.executable, "-m", "storagebrief.cli", "vector-search", "--params", str(pfile),
                           "--out", str(out), "--progress", "off"], cwd=REPO, capture_output=True, text=True,
                          timeout=1800, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    if done.returncode:
        raise SystemExit(f"round {n} failed: {done.stderr[-1500:]}")
    return pd.read_csv(out / "runs.csv").assign(round=n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="local,hdd-emulated")
    ap.add_argument("--search-list", default="20,50")
    ap.add_argument("--beam-width", default="1,2")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-point-s", type=float, default=1.0)
    args = ap.parse_args()
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    frames = []
    with tempfile.TemporaryDirectory(prefix="vector-prediction-") as tmp:
        for n in range(1, args.rounds + 1):
            f = _round(args, base, Path(tmp), n)
            frames.append(f)
            print(f"round {n}")
            for r in f.itertuples():
                print(f"  {r.target:14s} L{r.search_list:<4d} W{r.beam_width} T{r.threads}  recall {r.recall_at_k:.3f}  "
                      f"QPS {r.qps:8.1f}  IOPS@QD{r.queue_depth} {r.device_iops_at_qd:9.0f}  predicted "
                      f"{r.qps_predicted:8.1f}  error {r.prediction_error:+6.1%}  {r.regime:9s}  reads/q "
                      f"{r.reads_per_query_engine:.1f} / {r.reads_per_query_process:.1f} / "
                      f"{r.reads_per_query_block:.1f} ({r.block_source})", flush=True)
    allr = pd.concat(frames)
    print("summary: |error| over all rounds, per target and regime")
    for (t, regime), g in allr.groupby(["target", "regime"]):
        e = g.prediction_error.abs()
        print(f"  {t:14s} {regime:9s} points {len(g):3d}  median {e.median():.1%}  worst {e.max():.1%}")


if __name__ == "__main__":
    main()
