"""Does the device's 4 KiB random-read IOPS predict vector-search QPS at settings nobody tuned? The vector-search
study at settings drawn at random in every invocation, several rounds, every point of every round printed.

    flock /work/notes/cpu.lock python benchmarks/vector_prediction.py [--rounds 3] [--draw-seed N]
        [--targets local,hdd-emulated] [--max-point-s 1.0] [--min-queries 8] [--probe-s 1.0]

Each round draws (ranges below, from --draw-seed, itself drawn from the OS when not given, and printed):
`search_list` L from L_RANGE, `beam_width` from BEAM_RANGE, `threads` {1, 2, t} with t from THREADS_EXTRA (so every
round holds threads 1 and 2 beside each other: the 2 ÷ 1 QPS ratio), and a data `seed` of its own (a fresh
clustered set and index per round). The two targets (`local` and the emulated profile) take turns going first:
round 1 runs them in the order given, round 2 reversed, and so on. Within a point the fio probe always follows
the searches: its depth and pattern are theirs (measured), so it cannot go first.

Each round is one `storagebrief vector-search` run (params.yaml's targets and vector_search section with the drawn
axes over it). Printed per round: the draws, the load average, and per point: queries and the QPS's 95 % error
bar, measured QPS, the reads kept in flight (and where that figure comes from), predicted QPS, predicted ÷
measured, and `limited_by` (never empty where the two part by more than 10 %). Then: every point within 0.9-1.1
or naming its limit, and the threads 2 ÷ threads 1 QPS ratios on each target. Not a test: figures depend on the
machine, its disk and its load.
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
L_RANGE = (10, 150)            # search_list (>= k = 10)
BEAM_RANGE = (1, 8)            # beam_width
THREADS_EXTRA = (3, 4)         # the third thread count beside 1 and 2
BAND = (0.9, 1.1)              # predicted ÷ measured that counts as held


def draw(rng: random.Random) -> dict:
    return {"search_list": [rng.randint(*L_RANGE)], "beam_width": [rng.randint(*BEAM_RANGE)],
            "threads": [1, 2, rng.randint(*THREADS_EXTRA)], "seed": rng.randrange(2**31)}


def _round(args, base: dict, work: Path, n: int, drawn: dict, names: list[str]) -> pd.DataFrame:
    # the params file lives in a temporary folder: the targets' relative paths stay the project's
    by_name = {t["name"]: t for t in base["targets"]}
    params = {**base, "targets": [{**by_name[t], "path": str((REPO / by_name[t]["path"]).resolve())} for t in names]}
    params["vector_search"] = {**base["vector_search"], "targets": names, **drawn, "max_point_s": args.max_point_s,
                               "min_queries": args.min_queries, "probe_s": args.probe_s,
                               "uniform_control": False, "repeats": 1}
    pfile = work / f"params-{n}.yaml"
    pfile.write_text(yaml.safe_dump(params))
    out = work / f"round-{n}"
    done = subprocess.run([sys.executable, "-m", "storagebrief.cli", "vector-search", "--params", str(pfile),
                           "--out", str(out), "--progress", "off"], cwd=REPO, capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    if done.returncode:
        raise SystemExit(f"round {n} failed: {done.stderr[-1500:]}")
    return pd.read_csv(out / "runs.csv").assign(round=n)


def _print_round(f: pd.DataFrame) -> None:
    for r in f.itertuples():
        ratio = r.qps_predicted / r.qps
        mark = "held" if BAND[0] <= ratio <= BAND[1] else "OFF "
        limit = r.limited_by if isinstance(r.limited_by, str) and r.limited_by else "-"
        print(f"  {r.target:13s} L{r.search_list:<4d} W{r.beam_width} T{r.threads}  queries {r.queries:4d} "
              f"(±{r.qps_ci95_percent:4.1f} %)  QPS {r.qps:8.1f}  in flight {r.queue_depth:5.2f} "
              f"({r.inflight_source.split(' (')[0]})  predicted {r.qps_predicted:8.1f}  pred÷meas {ratio:5.2f} "
              f"{mark}  recall {r.recall_at_k:.3f}  limited_by: {limit}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="local,hdd-emulated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draw-seed", type=int, default=None)
    ap.add_argument("--max-point-s", type=float, default=1.0)
    ap.add_argument("--min-queries", type=int, default=8)
    ap.add_argument("--probe-s", type=float, default=1.0)
    args = ap.parse_args()
    seed = args.draw_seed if args.draw_seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    names = args.targets.split(",")
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    print(f"draw seed {seed}; ranges: L {L_RANGE}, beam width {BEAM_RANGE}, threads 1, 2 and one of "
          f"{THREADS_EXTRA}; targets {names}, alternating first")
    frames = []
    with tempfile.TemporaryDirectory(prefix="vector-prediction-") as tmp:
        for n in range(1, args.rounds + 1):
            drawn = draw(rng)
            order = names if n % 2 else names[::-1]
            load = os.getloadavg()
            print(f"round {n}: L {drawn['search_list'][0]}, beam width {drawn['beam_width'][0]}, threads "
                  f"{drawn['threads']}, data seed {drawn['seed']}, targets in order {order}; load average "
                  f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
            f = _round(args, base, Path(tmp), n, drawn, order)
            frames.append(f)
            _print_round(f)
    allr = pd.concat(frames)
    allr["ratio"] = allr.qps_predicted / allr.qps
    held = allr.ratio.between(*BAND)
    named = allr.limited_by.fillna("").str.len() > 0
    print(f"summary: {int(held.sum())} of {len(allr)} points within predicted ÷ measured {BAND[0]}-{BAND[1]}; "
          f"{int((~held & named).sum())} outside it name their limit; {int((~held & ~named).sum())} outside it name "
          "none")
    for t, g in allr.groupby("target"):
        one = g[g.threads == 1].set_index(["round", "search_list", "beam_width"]).qps
        two = g[g.threads == 2].set_index(["round", "search_list", "beam_width"]).qps
        ratios = (two / one).dropna()
        print(f"  {t:13s} threads 2 ÷ threads 1 QPS: {', '.join(f'{x:.2f}' for x in ratios)}; pred÷meas "
              f"{g.ratio.min():.2f}-{g.ratio.max():.2f} (median {g.ratio.median():.2f})")


if __name__ == "__main__":
    main()
