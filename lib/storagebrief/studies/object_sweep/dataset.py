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


def write(target, store, p, log=print) -> None:
    """Every GET object through the target's store (core.store): the ones already there are kept (a directory
    target's files persist across sweeps; a run's bucket or prefix starts empty)."""
    have = set(store.list(store.key("data/")))
    for size in p.object_sizes:
        missing = [store.key(n) for n in names(size, p.objects_for(size)) if store.key(n) not in have]
        body = payload(size, p.seed) if missing else b""      # one size's body at a time (the budget's arithmetic)
        for key in missing:
            store.put(key, body)
        del body
    log(f"object_sweep: GET objects ready on '{target.name}' ({store.url(store.key('data/'))})")

