"""Does the object sweep measure the store or its client? The study's own worker beside a compiled reference client.

    python benchmarks/object_clients.py [--dir data/targets/local] [--mib 64]
        [--sizes 64k,1m] [--concurrency 8,32] [--rounds 3] [--study-processes 1,2]

One versitygw (core/s3gateway.py, as the object sweep starts it) over a fresh folder under --dir. For each round,
object size, concurrency and op (GET, then PUT), the sides run one after the other, the order rotated from
round to round: the study's object-sweep worker (`python -m storagebrief.studies.object_sweep.worker`,
boto3, the same process, configuration and start protocol as a sweep run) and the reference client
(`.tools/bin/s3ref`, Go with minio-go, built by `make s3ref`; started through kit/s3ref as the object
sweep's `reference_client` knob starts it). Both GET the same pre-written objects (--mib per size,
in the gateway's page cache for both: neither side is cold) and PUT the same number of fresh keys, removed after
each batch outside the clock. Each side's bytes, wall time and CPU come from its own counters; the gateway's CPU
from /proc. Every batch is printed (MB/s, client CPU s/GB, gateway CPU s/GB, and for the study side the
object sweep's limited_by with its evidence, judged with the machine's CPU busy over the batch as the study's
monitor gives it and the workers' readiness sampled as the sweep samples it, kit/client_bound.ReadySampler),
then per point and round the ratio study ÷ reference. --study-processes 1,2 adds a side
"study x2": the same worker as two processes sharing the point (object_sweep.client_processes = 2).
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
SIZES = {"64k": 64 << 10, "1m": 1 << 20}


def _gateway_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _env(gw) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO / "lib"), "STORAGEBRIEF_S3_ACCESS": gw.access_key,
            "STORAGEBRIEF_S3_SECRET": gw.secret_key}


def _start(side: str, gw, op: str, size: int, conc: int, keys: list[str], part: bool):
    """One process of a side, started and ready (imports, client, body made) before the clock."""
    if side == "reference":
        from storagebrief.core.procs import Scope
        from storagebrief.kit import s3ref
        return s3ref.Batch(gw.endpoint, "bench", "us-east-1", gw.credentials, op, size, conc, keys,
                           Scope("object-clients-reference"))
    cfg = {"op": op, "size": size, "concurrency": conc, "seed": 0, "keys": keys, "endpoint": gw.endpoint,
           "bucket": "bench", "region": "us-east-1", "profile": None, "verify_tls": True, "addressing": "path",
           "part": part}
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.studies.object_sweep.worker"], env=_env(gw),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    proc.stdin.write(json.dumps(cfg) + "\n")
    proc.stdin.flush()
    ready = proc.stdout.readline().strip()
    if ready != json.dumps({"event": "ready"}):
        proc.kill()
        raise SystemExit(f"{side} did not start: {ready or proc.wait()}")
    return proc


def _go(proc) -> None:
    """The start line: the study's worker is a kit.child (JSON commands), the reference a kit.s3ref.Batch."""
    from storagebrief.studies.object_sweep.worker import GO
    if hasattr(proc, "go"):
        return proc.go()
    proc.stdin.write(json.dumps(GO) + "\n")
    proc.stdin.flush()


def _result(proc) -> dict:
    """The batch's row: the reference's result, or the study's worker's 'done' event."""
    if hasattr(proc, "result"):
        return proc.result(3600)
    line = proc.stdout.readline()
    proc.stdin.close()
    proc.wait(timeout=60)
    if not line.strip():
        return {"error": f"exited with status {proc.returncode}"}
    row = json.loads(line)
    return {"error": row["error"]} if "error" in row else row["batch"]


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine (/proc/stat), as the study's monitor counts them."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)


def batch(side: str, gw, op: str, size: int, conc: int, keys: list[str]) -> dict:
    """One timed batch on one side: its own row (bytes, wall, CPU; "study xN": N worker processes sharing the
    point as the object sweep's client_processes does) plus the gateway's CPU and the machine's over it."""
    from storagebrief.kit import s3ops
    from storagebrief.studies.object_sweep.run import shares
    n = int(side.split("x")[1]) if "x" in side else 1
    parts = shares(keys, conc, n) if side.startswith("study") else [(keys, conc)]
    procs = [_start(side, gw, op, size, c, k, len(parts) > 1) for k, c in parts]
    from storagebrief.kit.client_bound import ReadySampler, add_ready
    study = side.startswith("study")
    g0, (b0, t0) = _gateway_cpu(gw.proc.pid), _cpu_ticks()
    with ReadySampler([proc.pid for proc in procs] if study else []) as ready:    # as the sweep samples its workers
        for proc in procs:
            _go(proc)
        rows = [_result(proc) for proc in procs]
    g1, (b1, t1) = _gateway_cpu(gw.proc.pid), _cpu_ticks()
    for row in rows:
        if "error" in row:
            raise SystemExit(f"{side} {op} {size} c{conc}: {row['error']}")
        if study:
            row["client_processes"] = add_ready(row["client_processes"], ready.fractions())
    row = rows[0] if len(rows) == 1 else s3ops.merged(rows).row()
    gb = row["bytes_moved"] / 1e9
    row.update({"mb_per_s": row["bytes_moved"] / row["wall_seconds"] / 1e6,
                "cpu_s_per_gb": row["client_cpu_seconds"] / gb, "gateway_cpu_s_per_gb": (g1 - g0) / gb,
                "access": "S3 local gateway", "gateway_cpu_seconds": g1 - g0,
                "machine_busy_percent": 100 * (b1 - b0) / max(t1 - t0, 1)})
    if side.startswith("study"):
        from storagebrief.kit.s3study import judge_row
        row["limited_by"], row["limited_by_reason"] = judge_row(row, row["machine_busy_percent"])
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
    ap.add_argument("--study-processes", default="1", help="study sides: its worker with this many processes each "
                    "(object_sweep.client_processes), e.g. 1,2")
    args = ap.parse_args()
    sizes = _ints(args.sizes, "sizes", lambda x: SIZES[x.lower()])
    concs = _ints(args.concurrency, "concurrency", lambda x: int(x) if int(x) > 0 else int(""))
    sides = [f"study x{n}" if n > 1 else "study"
             for n in _ints(args.study_processes, "study-processes", lambda x: int(x) if int(x) > 0 else int(""))]
    if args.mib < 1 or args.rounds < 1:
        raise SystemExit(f"--mib {args.mib} / --rounds {args.rounds}: each must be >= 1")
    from storagebrief.kit import s3ref
    if s3ref.missing():
        raise SystemExit(s3ref.missing())
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
        ratios = _rounds(gw, admin, get_keys, concs, args.rounds, [*sides, "reference"])
    print("\npoint           side       ÷ reference per round   its rows' limited_by")
    for (point, side), rs in ratios.items():
        print(f"{point:<15} {side:<10} {', '.join(f'{x:.2f}' for x, _ in rs):<23} {', '.join(by or '-' for _, by in rs)}")
    return 0


def _rounds(gw, admin, get_keys: dict, concs: list[int], rounds: int, sides: list[str]) -> dict:
    """Every round, size, concurrency and op, the sides in turn (the order rotated each round); each batch
    printed; each study side's ratio to the reference."""
    from storagebrief.kit.sizes import size_label
    print(f"{'round':>5} {'point':>14} {'side':>10} {'MB/s':>8} {'client CPU s/GB':>15} {'gw CPU s/GB':>11} "
          f"{'machine %':>9}  study limited_by", flush=True)
    ratios: dict = {}
    for r in range(1, rounds + 1):
        order = sides[(r - 1) % len(sides):] + sides[:(r - 1) % len(sides)]
        for s in get_keys:
            for c in concs:
                for op in ("get", "put"):
                    point = f"{op.upper()} {size_label(s)} c{c}"
                    got = {}
                    for side in order:
                        keys = get_keys[s] if op == "get" else [f"put/{side.replace(' ', '')}/{size_label(s)}/"
                                                                f"obj-{i:06d}" for i in range(len(get_keys[s]))]
                        got[side] = row = batch(side, gw, op, s, c, keys)
                        if op == "put":
                            _delete(admin, keys)
                        print(f"{r:>5} {point:>14} {side:>10} {row['mb_per_s']:>8.1f} {row['cpu_s_per_gb']:>15.2f} "
                              f"{row['gateway_cpu_s_per_gb']:>11.2f} {row['machine_busy_percent']:>9.0f}  "
                              + (f"{row['limited_by'] or '-'} ({row['limited_by_reason']})" if "limited_by" in row
                                 else ""), flush=True)
                    for side in sides[:-1]:
                        ratio = got[side]["mb_per_s"] / got["reference"]["mb_per_s"]
                        ratios.setdefault((point, side), []).append((ratio, got[side]["limited_by"]))
                        print(f"{r:>5} {point:>14} {side} ÷ reference = {ratio:.2f}", flush=True)
    return ratios


if __name__ == "__main__":
    sys.exit(main())
