"""Does the object sweep measure the store or its client? The study's own worker beside a compiled reference client.

    flock /work/notes/cpu.lock python benchmarks/object_clients.py [--dir data/targets/local] [--mib 64]
        [--sizes 64k,1m] [--concurrency 8,32] [--rounds 3]

One versitygw (core/s3gateway.py, as the object sweep starts it) over a fresh folder under --dir. For each round,
object size, concurrency and op (GET, then PUT), the two sides run one after the other, alternating which goes
first from round to round: the study's object-sweep worker (`python -m storagebrief.studies.object_sweep.worker`,
boto3, the same process, configuration and ready/go protocol as a sweep run) and the reference client
(`.tools/bin/s3ref`, Go with minio-go, built by `make s3`). Both GET the same pre-written objects (--mib per size,
in the gateway's page cache for both: neither side is cold) and PUT the same number of fresh keys, removed after
each batch outside the clock. Each side's bytes, wall time and CPU come from its own counters; the gateway's CPU
from /proc. Every batch is printed (MB/s, client CPU s/GB, gateway CPU s/GB, and for the study side the
object sweep's limited_by with its evidence), then per point and round the ratio study ÷ reference.
Not a test: figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / ".tools" / "bin" / "s3ref"
SIZES = {"64k": 64 << 10, "1m": 1 << 20}


def _gateway_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _env(gw) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO / "lib"), "STORAGEBRIEF_S3_ACCESS": gw.access_key,
            "STORAGEBRIEF_S3_SECRET": gw.secret_key}


def _start(side: str, gw, op: str, size: int, conc: int, keys: list[str]) -> subprocess.Popen:
    """The side's process, started and ready (imports, client, body made) before the clock."""
    if side == "study":
        cfg = {"op": op, "size": size, "concurrency": conc, "seed": 0, "keys": keys, "endpoint": gw.endpoint,
               "bucket": "bench", "region": "us-east-1", "profile": None, "verify_tls": True, "addressing": "path"}
        proc = subprocess.Popen([sys.executable, "-m", "storagebrief.studies.object_sweep.worker"], env=_env(gw),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        proc.stdin.write(json.dumps(cfg) + "\n")
    else:
        proc = subprocess.Popen([str(REFERENCE), "-endpoint", gw.endpoint, "-bucket", "bench", "-op", op,
                                 "-size", str(size), "-concurrency", str(conc)], env=_env(gw),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        proc.stdin.write("\n".join(keys) + "\n\n")
    proc.stdin.flush()
    ready = proc.stdout.readline().strip()
    if ready != "ready":
        proc.kill()
        raise SystemExit(f"{side} did not start: {ready or proc.wait()}")
    return proc


def batch(side: str, gw, op: str, size: int, conc: int, keys: list[str]) -> dict:
    """One timed batch on one side: its own row (bytes, wall, CPU) plus the gateway's CPU over it."""
    proc = _start(side, gw, op, size, conc, keys)
    g0 = _gateway_cpu(gw.proc.pid)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    g1 = _gateway_cpu(gw.proc.pid)
    proc.stdin.close()
    proc.wait(timeout=60)
    row = json.loads(line) if line.strip() else {"error": f"exited with status {proc.returncode}"}
    if "error" in row:
        raise SystemExit(f"{side} {op} {size} c{conc}: {row['error']}")
    gb = row["bytes_moved"] / 1e9
    row.update({"mb_per_s": row["bytes_moved"] / row["wall_seconds"] / 1e6,
                "cpu_s_per_gb": row["client_cpu_seconds"] / gb, "gateway_cpu_s_per_gb": (g1 - g0) / gb,
                "access": "S3 local gateway", "gateway_cpu_seconds": g1 - g0})
    if side == "study":
        from storagebrief.kit.s3study import judge_row
        row["limited_by"], row["limited_by_reason"] = judge_row(row)
    return row


def _delete(admin, keys: list[str]) -> None:
    for i in range(0, len(keys), 1000):
        admin.delete_objects(Bucket="bench", Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                     "Quiet": True})


def _ints(text: str, what: str, allowed) -> list:
    try:
        vals = [allowed(x.strip()) for x in text.split(",") if x.strip()]
    except (KeyError, ValueError):
        vals = []
    if not vals:
        raise SystemExit(f"--{what} {text!r}: a comma-separated list of "
                         + ("64k, 1m" if what == "sizes" else "positive integers"))
    return vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="data/targets/local", help="folder the gateway serves (a sub-folder is made)")
    ap.add_argument("--mib", type=int, default=64, help="MiB per point and side (objects = MiB / size)")
    ap.add_argument("--sizes", default="64k,1m")
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sizes = _ints(args.sizes, "sizes", lambda x: SIZES[x.lower()])
    concs = _ints(args.concurrency, "concurrency", lambda x: int(x) if int(x) > 0 else int(""))
    if args.mib < 1 or args.rounds < 1:
        raise SystemExit(f"--mib {args.mib} / --rounds {args.rounds}: each must be >= 1")
    if not REFERENCE.is_file():
        raise SystemExit(f"the reference client {REFERENCE} is missing: run `make s3`")
    from storagebrief.core import s3gateway, s3store
    from storagebrief.kit.sizes import size_label

    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".object-clients-", dir=args.dir) as tmp, \
            s3gateway.Gateway(Path(tmp) / "gw", Path(tmp) / "versitygw.log") as gw:
        admin = s3store.client(gw.endpoint, "us-east-1", gw.credentials)
        admin.create_bucket(Bucket="bench")
        get_keys = {s: [f"get/{size_label(s)}/obj-{i:06d}" for i in range(max(1, (args.mib << 20) // s))]
                    for s in sizes}
        for s, keys in get_keys.items():          # the GET objects, written once (by the reference: fast)
            batch("reference", gw, "put", s, 32, keys)
        print(f"versitygw on {args.dir}; {os.cpu_count()} CPUs; {args.mib} MiB per point and side; GET objects in "
              "the page cache for both sides; study = the object sweep's worker (boto3), reference = s3ref (Go, "
              "minio-go)", flush=True)
        ratios = _rounds(gw, admin, get_keys, concs, args.rounds)
    print("\npoint           study ÷ reference per round   study rows' limited_by")
    for point, rs in ratios.items():
        print(f"{point:<15} {', '.join(f'{x:.2f}' for x, _ in rs):<29} {', '.join(by or '-' for _, by in rs)}")
    return 0


def _rounds(gw, admin, get_keys: dict, concs: list[int], rounds: int) -> dict:
    """Every round, size, concurrency and op, both sides alternating; each batch printed; the ratios."""
    from storagebrief.kit.sizes import size_label
    print(f"{'round':>5} {'point':>14} {'side':>9} {'MB/s':>8} {'client CPU s/GB':>15} {'gw CPU s/GB':>11}  "
          "study limited_by", flush=True)
    ratios: dict = {}
    for r in range(1, rounds + 1):
        for s in get_keys:
            for c in concs:
                for op in ("get", "put"):
                    point = f"{op.upper()} {size_label(s)} c{c}"
                    got = {}
                    for side in (("study", "reference") if r % 2 else ("reference", "study")):
                        keys = get_keys[s] if op == "get" else \
                            [f"put/{side}/{size_label(s)}/obj-{i:06d}" for i in range(len(get_keys[s]))]
                        got[side] = row = batch(side, gw, op, s, c, keys)
                        if op == "put":
                            _delete(admin, keys)
                        print(f"{r:>5} {point:>14} {side:>9} {row['mb_per_s']:>8.1f} {row['cpu_s_per_gb']:>15.2f} "
                              f"{row['gateway_cpu_s_per_gb']:>11.2f}  "
                              + (f"{row['limited_by'] or '-'} ({row['limited_by_reason']})" if side == "study"
                                 else ""), flush=True)
                    ratio = got["study"]["mb_per_s"] / got["reference"]["mb_per_s"]
                    ratios.setdefault(point, []).append((ratio, got["study"]["limited_by"]))
                    print(f"{r:>5} {point:>14} study ÷ reference = {ratio:.2f}", flush=True)
    return ratios


if __name__ == "__main__":
    sys.exit(main())
