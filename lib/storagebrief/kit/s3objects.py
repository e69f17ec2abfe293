"""Objects as training data and checkpoints use them: multipart PUT in fixed parts and ranged GET.

For the emulate and checkpoint studies on S3 targets (docs/studies/object_sweep.md, "Studies on object
targets", says which use it). A checkpoint rank writes its file as one multipart upload of `part_bytes` parts (the study's
`write_block_mib`), as MLPerf Storage v3.0's s3 checkpoint writers do; a loader reads a sample whole or in
`read_block` ranges (HTTP Range). Every call goes through an ObjectStore (core.s3store), so keys stay below
the run's own bucket or prefix and failures are one line; an interrupted multipart upload is aborted, so no
invisible parts are left behind on the store.
"""
from __future__ import annotations

import time


def multipart_put(store, key: str, parts, part_bytes: int) -> dict:
    """Upload the byte chunks of `parts` (each exactly part_bytes, the last one at most) as one object.

    Returns {"bytes", "parts", "seconds", "part_seconds": [...]} (time from the first request to the
    completed upload). S3 needs every part but the last to be at least 5 MiB."""
    if part_bytes < 5 << 20:
        raise ValueError(f"multipart part size {part_bytes} bytes is below S3's 5 MiB minimum (write_block_mib >= 5)")
    c, bucket, full = store.client, store.bucket, store.key(key)
    t0 = time.perf_counter()
    up = store._call(c.create_multipart_upload, Bucket=bucket, Key=full)["UploadId"]
    done, times, total = [], [], 0
    try:
        for n, chunk in enumerate(parts, start=1):
            if len(chunk) > part_bytes:
                raise ValueError(f"part {n} is {len(chunk)} bytes, more than part_bytes = {part_bytes}")
            p0 = time.perf_counter()
            etag = store._call(c.upload_part, Bucket=bucket, Key=full, UploadId=up, PartNumber=n, Body=chunk)["ETag"]
            times.append(time.perf_counter() - p0)
            done.append({"ETag": etag, "PartNumber": n})
            total += len(chunk)
        store._call(c.complete_multipart_upload, Bucket=bucket, Key=full, UploadId=up,
                    MultipartUpload={"Parts": done})
    except BaseException:
        try:
            c.abort_multipart_upload(Bucket=bucket, Key=full, UploadId=up)
        except Exception:   # noqa: BLE001 -- the store is gone; the run's close() lists and aborts again
            pass
        raise
    return {"bytes": total, "parts": len(done), "seconds": time.perf_counter() - t0, "part_seconds": times}


def ranged_get(store, key: str, offset: int, length: int) -> bytes:
    """Bytes [offset, offset + length) of an object (HTTP Range), as a loader reads a block of a sample."""
    body = store._call(store.client.get_object, Bucket=store.bucket, Key=store.key(key),
                       Range=f"bytes={offset}-{offset + length - 1}")["Body"]
    return body.read()


def read_whole(store, key: str, block: int = 1 << 20) -> int:
    """Read an object to its end in `block` reads (the body streamed, not held); returns the bytes read."""
    body = store._call(store.client.get_object, Bucket=store.bucket, Key=store.key(key))["Body"]
    n = 0
    while chunk := body.read(block):
        n += len(chunk)
    return n
