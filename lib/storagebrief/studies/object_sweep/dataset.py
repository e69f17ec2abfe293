"""The objects every GET point reads, written once per target before any measured run (not timed):
objects_for(size) objects of each size, random bytes (incompressible), under data/<size>/ -- keys in
the run's bucket or prefix on an S3 target, files below the study folder on a directory target."""
from __future__ import annotations

from pathlib import Path

from ...kit.s3ops import payload
from ...kit.sizes import size_label

STUDY = "object_sweep"


def names(size: int, count: int, kind: str = "data", tag: str = "") -> list[str]:
    folder = f"{kind}/{size_label(size)}" + (f"-{tag}" if tag else "")
    return [f"{folder}/obj-{i:05d}" for i in range(count)]


def dir_root(target) -> Path:
    return target.study_dir(STUDY)


def needed_bytes(p, ops) -> int:
    """Bytes a target holds at most: the GET objects plus one PUT point's objects."""
    data = sum(p.objects_for(s) * s for s in p.object_sizes) if "get" in ops else 0
    put = max(p.objects_for(s) * s for s in p.object_sizes) if "put" in ops else 0
    return data + put


def write_dir(target, p, log=print) -> None:
    root = dir_root(target)
    for size in p.object_sizes:
        body = payload(size, p.seed)
        for n in names(size, p.objects_for(size)):
            f = root / n
            if f.exists() and f.stat().st_size == size:
                continue
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_name(f".{f.name}.tmp")
            tmp.write_bytes(body)
            tmp.rename(f)
    log(f"object_sweep: GET objects ready on '{target.name}' (files below {root / 'data'})")


def write_s3(store, p, log=print) -> None:
    for size in p.object_sizes:
        body = payload(size, p.seed)
        for n in names(size, p.objects_for(size)):
            store._call(store.client.put_object, Bucket=store.bucket, Key=store.key(n), Body=body)
    log(f"object_sweep: GET objects ready on '{store.target.name}' (s3://{store.bucket}/{store.prefix}data/)")


def object_files(target, store, size: int, count: int) -> list[Path]:
    """The files behind the GET objects of one size (cold cache), or [] on an external store."""
    if store is None:
        return [dir_root(target) / n for n in names(size, count)]
    if store.gateway is None:
        return []
    return [store.gateway.root / store.bucket / store.key(n) for n in names(size, count)]
