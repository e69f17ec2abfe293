"""Which S3 client should the object studies use? boto3 and s3dlio side by side on the local gateway.

    python benchmarks/s3_clients.py [--dir data/targets/local] [--size-mib 4] [--objects 32]
                                    [--concurrency 4] [--rounds 3]

One versitygw (the object target's gateway) over --dir; each round runs, in a fresh process per
client (s3dlio's client is a process-wide singleton bound to its first endpoint), PUT of --objects
objects of --size-mib MiB at --concurrency requests in flight, then GET of them all; the two clients
alternate, first one then the other, so drift spreads over both. Prints per round and client:
MB/s, the client's CPU seconds per GB moved (user + system, all its threads) and the gateway's, then
the ratio s3dlio ÷ boto3 of each. Not a test: figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = r"""
import json, os, sys
from storagebrief.kit import s3ops
cfg = json.loads(sys.argv[1])
body = s3ops.payload(cfg["size"])
keys = [f"{cfg['client']}/obj-{i:05d}" for i in range(cfg["objects"])]
out = {}
if cfg["client"] == "boto3":
    from storagebrief.core.store import StoreHandle
    c = StoreHandle(s3={"endpoint": cfg["endpoint"], "bucket": cfg["bucket"], "region": "us-east-1", "credentials":
                        {"aws_access_key_id": cfg["ak"], "aws_secret_access_key": cfg["sk"]}}).open(cfg["concurrency"])
    for op in ("put", "get"):
        out[op] = s3ops.store_batch(c, op, keys, body if op == "put" else len(body), cfg["concurrency"]).row()
else:
    os.environ.update({"AWS_ACCESS_KEY_ID": cfg["ak"], "AWS_SECRET_ACCESS_KEY": cfg["sk"]})
    import s3dlio
    s3dlio.configure_s3(endpoint_url=cfg["endpoint"], region="us-east-1")
    for op in ("put", "get"):
        out[op] = s3ops.s3dlio_batch(cfg["bucket"], op, keys, body, cfg["concurrency"]).row()
print(json.dumps(out))
"""


def _gateway_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _one(client: str, gw, bucket: str, args) -> dict:
    cfg = {"client": client, "endpoint": gw.endpoint, "ak": gw.access_key, "sk": gw.secret_key, "bucket": bucket,
           "size": args.size_mib << 20, "objects": args.objects, "concurrency": args.concurrency}
    g0 = _gateway_cpu(gw.proc.pid)
    out = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(cfg)], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "lib")})
    if out.returncode:
        raise SystemExit(f"{client} failed: {out.stderr[-1500:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    gb = 2 * args.objects * (args.size_mib << 20) / 1e9
    res["gateway_cpu_s_per_gb"] = (_gateway_cpu(gw.proc.pid) - g0) / gb
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="data/targets/local", help="folder the gateway serves (a sub-folder is made)")
    ap.add_argument("--size-mib", type=int, default=4)
    ap.add_argument("--objects", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from storagebrief.core import s3gateway, s3store

    Path(args.dir).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".s3-clients-", dir=args.dir))
    gw = s3gateway.Gateway(root / "gw", root / "versitygw.log").start()
    try:
        admin = s3store.client(gw.endpoint, "us-east-1", gw.credentials)
        admin.create_bucket(Bucket="bench")
        print(f"{args.objects} objects x {args.size_mib} MiB, {args.concurrency} in flight, versitygw on {args.dir}; "
              f"{os.cpu_count()} CPUs")
        print(f"{'round':>5} {'client':>7} {'op':>4} {'MB/s':>8} {'client CPU s/GB':>16} {'gateway CPU s/GB (put+get)':>27}")
        figures: dict = {}
        for r in range(1, args.rounds + 1):
            for client in (("boto3", "s3dlio") if r % 2 else ("s3dlio", "boto3")):
                res = _one(client, gw, "bench", args)
                for op in ("put", "get"):
                    row = res[op]
                    figures.setdefault((client, op), []).append(row)
                    print(f"{r:>5} {client:>7} {op:>4} {row['throughput_mb_per_s']:>8.0f} "
                          f"{row['client_cpu_s_per_gb']:>16.2f} {res['gateway_cpu_s_per_gb']:>27.2f}")
        for op in ("put", "get"):
            for what in ("throughput_mb_per_s", "client_cpu_s_per_gb"):
                b = [x[what] for x in figures[("boto3", op)]]
                s = [x[what] for x in figures[("s3dlio", op)]]
                ratios = " ".join(f"{y / x:.2f}" for x, y in zip(b, s))
                print(f"{op} {what}: s3dlio / boto3 per round = {ratios}")
    finally:
        gw.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
