"""Does the object sweep measure the store or its client? The study's client beside a DIFFERENT implementation.

    python benchmarks/object_clients.py --other-python .tools/s3dlio-venv/bin/python
        [--dir data/targets/local] [--points 4] [--rounds 3] [--mib 48] [--seed N]

The study's client is the compiled s3worker (Go, minio-go v7.4.1; kit/s3worker, started as a sweep run starts it).
The other side is s3dlio 0.10.0 (Rust; the library MLPerf Storage v3.0 runs its object workloads through), in a
Python of its own that has it (`python3.11 -m venv .tools/s3dlio-venv && .tools/s3dlio-venv/bin/pip install
s3dlio==0.10.0`): `put_many` for PUTs, `get_many_stats` for GETs (its count-only GET: no object becomes a Python
object, as the study's client drops the bytes it counts). What s3dlio does about connections and retries is its
own (its Rust runtime's pool; its defaults), stated as found, not tuned.

Each invocation draws --points points at random (the seed is printed, --seed repeats a draw) from the documented
ranges: object size log-uniform in 4 KiB-64 MiB, 1-64 requests in flight (log-uniform), GET or PUT. Per point, one
versitygw (core.s3gateway, as the sweep starts it) over a fresh folder under --dir holds the GET objects (--mib of
them, at least one per request in flight, at most 400 and 256 MiB, which can lower a large point's requests in
flight to its objects: the printed point is what ran), written once with boto3 (in the page cache for both sides); a PUT writes as many fresh keys,
removed after each batch outside the clock. Rounds alternate the order (odd rounds the study first, even rounds
s3dlio first). Every batch is printed: MB/s, the client's CPU seconds per GB (user + system, every thread, its own
getrusage) and the gateway's (/proc), the study side's limited_by and its evidence as the sweep judges them
(kit/s3study: its cores against the cores it can use, its readiness sampled from outside, every CPU's busy share
over the batch from /proc/stat); then per round the ratio study ÷ s3dlio. Not a test: figures depend on the
machine. STORAGEBRIEF_S3WORKER names another build of the study's client (core.s3mover.binary).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_BATCH = 256 << 20       # bytes one batch moves at most (and the gateway holds for a GET point)
sys.path.insert(0, str(REPO / "lib"))

OTHER = r"""
import json, os, resource, sys, time
cfg = json.loads(sys.stdin.readline())
os.environ.update({"AWS_ACCESS_KEY_ID": cfg["ak"], "AWS_SECRET_ACCESS_KEY": cfg["sk"], "AWS_REGION": "us-east-1"})
import s3dlio
s3dlio.configure_s3(endpoint_url=cfg["endpoint"], region="us-east-1")
uris = [f"s3://{cfg['bucket']}/{k}" for k in cfg["keys"]]
body = os.urandom(cfg["size"]) if cfg["op"] == "put" else None
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t0 = cpu(), time.perf_counter()
if cfg["op"] == "put":
    s3dlio.put_many([(u, body) for u in uris], max_in_flight=cfg["concurrency"])
    got = len(uris) * cfg["size"]
else:
    stats = s3dlio.get_many_stats(uris, max_in_flight=cfg["concurrency"])
    got = stats[1] if isinstance(stats, (tuple, list)) else stats.get("total_bytes", stats.get("bytes"))
wall, used = time.perf_counter() - t0, cpu() - c0
print(json.dumps({"wall_seconds": wall, "client_cpu_seconds": used, "bytes": got, "stats": repr(stats) if cfg["op"] == "get" else ""}), flush=True)
"""


def draw(rng: random.Random, n: int) -> list[tuple[str, int, int]]:
    """n points: (op, object bytes log-uniform 4 KiB-64 MiB rounded to 4 KiB, in flight log-uniform 1-64)."""
    out = []
    for _ in range(n):
        size = max(4096, int(2 ** rng.uniform(12, 26)) // 4096 * 4096)
        conc = min(64, max(1, int(round(2 ** rng.uniform(0, 6)))))
        out.append((rng.choice(["get", "put"]), size, conc))
    return out


def _gateway_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def study_side(gw, op, size, conc, keys, log_dir):
    from storagebrief.kit import s3worker
    from storagebrief.kit.client_bound import ReadySampler, add_ready, thread_sched
    from storagebrief.kit.client_check import CoreBusy
    from storagebrief.kit.s3study import judge_row
    cfg = {"op": op, "size": size, "concurrency": conc, "seed": 1, "keys": keys,
           "store": {"folder": None, "s3": {"endpoint": gw.endpoint, "bucket": "bench", "region": "us-east-1",
                                            "profile": None, "verify_tls": True, "addressing": "path"}}}
    env = {"STORAGEBRIEF_S3_ACCESS": gw.access_key, "STORAGEBRIEF_S3_SECRET": gw.secret_key}
    w = s3worker.start(cfg, env, log_dir / "s3worker.log", "study s3worker", None)
    try:
        w.expect("ready", 60)
        s0, g0, cores = thread_sched(w.pid), _gateway_cpu(gw.proc.pid), CoreBusy()
        with ReadySampler([w.pid]) as ready:          # as the sweep samples its workers, from outside
            cores.start()
            w.send({"cmd": "go"})
            done = w.expect("done", 900)
            cores.stop()
        g1 = _gateway_cpu(gw.proc.pid)
        if "error" in done:
            raise RuntimeError(f"s3worker: {done['error']}")
        part = s3worker.batch(done, w.pid, s0, thread_sched(w.pid)).part()
    finally:
        w.stop()
    part["client_processes"] = add_ready(part["client_processes"], ready.fractions())
    row = {**part, "gateway_cpu_seconds": g1 - g0, "access": "S3 local gateway"}
    busy = cores.percents()
    label, why = judge_row(row, sum(busy) / len(busy) if busy else None)   # the sweep's rule, the monitor's figure
    return row["bytes_moved"], row["wall_seconds"], row["client_cpu_seconds"], g1 - g0, label or "-", why


def other_side(python, gw, op, size, conc, keys):
    cfg = {"op": op, "size": size, "concurrency": conc, "keys": keys, "bucket": "bench", "endpoint": gw.endpoint,
           "ak": gw.access_key, "sk": gw.secret_key}
    proc = subprocess.Popen([python, "-c", OTHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(json.dumps(cfg) + "\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"s3dlio side did not start (exit {proc.wait()})")
        g0 = _gateway_cpu(gw.proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline())
        g1 = _gateway_cpu(gw.proc.pid)
    finally:
        proc.kill()
        proc.wait()
    if op == "get" and out["bytes"] != len(keys) * size:
        raise RuntimeError(f"s3dlio get_many_stats counted {out['bytes']} of {len(keys) * size} bytes: {out['stats']}")
    return out["bytes"], out["wall_seconds"], out["client_cpu_seconds"], g1 - g0, "-", ""


def main() -> int:  # long: a benchmark's driver, read top to bottom
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other-python", required=True, help="a Python with s3dlio 0.10.0 installed")
    ap.add_argument("--dir", default=str(REPO / "data" / "targets" / "local"))
    ap.add_argument("--points", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=float, default=48.0, help="bytes per batch (MiB), at least one object per request")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    from storagebrief.core import s3store
    from storagebrief.core.s3gateway import Gateway
    from storagebrief.kit.s3ops import payload
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    points = draw(random.Random(seed), a.points)
    print(f"seed {seed}; points: " + ", ".join(f"{op.upper()} {s / 1024:.0f} KiB x{c}" for op, s, c in points))
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    print("point | round | side (order) | MB/s | client CPU s/GB | gateway CPU s/GB | study limited_by | evidence")
    for op, size, conc in points:
        n = min(max(conc, min(400, math.ceil(a.mib * 2**20 / size))), max(1, MAX_BATCH // size))
        conc = min(conc, n)             # a 64 MiB point: at most MAX_BATCH in flight, so its drawn x64 may shrink
        with tempfile.TemporaryDirectory(dir=a.dir, prefix="object-clients-") as tmp:
            gw = Gateway(Path(tmp) / "gw", Path(tmp) / "gw.log").start()
            try:
                c = s3store.client(gw.endpoint, "us-east-1", gw.credentials, pool=16)
                c.create_bucket(Bucket="bench")
                keys = [f"data/obj-{i:05d}" for i in range(n)]
                if op == "get":
                    body = payload(size, 7)
                    for k in keys:
                        c.put_object(Bucket="bench", Key=k, Body=body)
                    del body
                for r in range(1, a.rounds + 1):
                    sides = ["study", "s3dlio"] if r % 2 else ["s3dlio", "study"]
                    got = {}
                    for i, side in enumerate(sides):
                        ks = keys if op == "get" else [f"put-{side}-r{r}/obj-{j:05d}" for j in range(n)]
                        res = (study_side(gw, op, size, conc, ks, Path(tmp)) if side == "study" else
                               other_side(a.other_python, gw, op, size, conc, ks))
                        if op == "put":
                            for j in range(0, n, 1000):
                                c.delete_objects(Bucket="bench", Delete={"Objects": [{"Key": k} for k in ks[j:j + 1000]]})
                        moved, wall, cpu, gcpu, lim, why = res
                        gb = moved / 1e9
                        got[side] = (moved / wall / 1e6, cpu / gb)
                        print(f"{op.upper()} {size / 1024:.0f} KiB x{conc} ({n} objects) | {r} | {side} ({i + 1}) | "
                              f"{moved / wall / 1e6:.1f} | {cpu / gb:.2f} | {gcpu / gb:.2f} | {lim}"
                              + (f" | {why}" if why else ""), flush=True)
                    print(f"{op.upper()} {size / 1024:.0f} KiB x{conc} | {r} | study ÷ s3dlio: MB/s "
                          f"{got['study'][0] / got['s3dlio'][0]:.2f}, client CPU s/GB {got['study'][1] / got['s3dlio'][1]:.2f}",
                          flush=True)
            finally:
                gw.stop()
                gw.remove_buckets()
    return 0


if __name__ == "__main__":
    sys.exit(main())
