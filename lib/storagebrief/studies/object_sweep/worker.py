"""One batch of GETs or PUTs in a process of its own (python -m storagebrief.studies.object_sweep.worker).

Its own process so that its CPU time is the client's alone (the engine's monitor and trace readers run
in the study's process) and, on a directory target, so that it can sit in the target's throttle cgroup.
The configuration comes on stdin as JSON, credentials in the environment (never argv or a file):
STORAGEBRIEF_S3_ACCESS / STORAGEBRIEF_S3_SECRET for the local gateway, else boto3's own chain (the
environment or the AWS profile named in the config). Protocol: prints 'ready' once imports, client and
payload are made; runs the batch on 'go'; prints the batch's row as JSON (or {"error": "..."})."""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    from ...kit import s3ops

    body = s3ops.payload(cfg["size"], cfg["seed"]) if cfg["op"] == "put" else b"\0" * cfg["size"]
    client = None
    if cfg.get("endpoint"):      # the run's store's child_config (core.store): this process's own client
        from ...core.s3store import S3Client
        creds = ({"aws_access_key_id": os.environ.pop("STORAGEBRIEF_S3_ACCESS"),
                  "aws_secret_access_key": os.environ.pop("STORAGEBRIEF_S3_SECRET")}
                 if "STORAGEBRIEF_S3_ACCESS" in os.environ else None)
        client = S3Client({**cfg, "credentials": creds, "pool": cfg["concurrency"]}).client
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    try:
        if client is not None:
            batch = s3ops.boto3_batch(client, cfg["bucket"], cfg["op"], cfg["keys"], body, cfg["concurrency"])
        else:
            batch = s3ops.file_batch(cfg["folder"], cfg["op"], cfg["keys"], body, cfg["concurrency"])
    except Exception as exc:   # noqa: BLE001 -- the parent names the cause (a dead gateway first)
        from ...core.s3store import explain
        msg = explain(exc, cfg.get("endpoint") or cfg.get("folder"), cfg.get("bucket", ""), "endpoint")
        print(json.dumps({"error": msg}), flush=True)
        return 0
    print(json.dumps(batch.row()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
