"""One storage face: what a study does with the place its data lives, a target's directory or an S3 target's
bucket (DLIO's `DataStorage` lesson). A study holds one `Store` per target and calls it; it never asks
"directory or S3?", and never reaches into a boto3 client: a faster S3 client plugs in here, once.

  * `DirStore`  a folder storagebrief owns on a directory target (`<target>/storagebrief/<study>/...`);
  * `ObjectStore` (core.s3store)  one run's bucket (local gateway) or run prefix (external endpoint);
  * `StoreHandle`  what a worker process (a rank, an accelerator, a sweep worker) opens the same store from
    (`store.handle()`, picklable, in memory only): `open_store(handle)` gives a DirStore on the same folder, or an
    `S3Client` (core.s3store) on the run's bucket: a boto3 client is not fork-safe, so a child makes its own.

The store, not the study, says where its device reads are throttled and counted: `client_group(run)` is the
cgroup the client's own processes go in (a directory's: the target's throttle, or one that only counts), and
`io_group(client)` the cgroup whose counters hold the device reads (a directory's: the client's; a local
gateway's: the gateway's own, which holds the throttle; an external store's: none here). The engine opens one
store per target for a run (`sweep.store(target)`, core.stores) and closes it when the run ends.

Keys are what `key(name)` returns (the run's prefix included; a directory's: the path below its root). Every
call that writes or deletes refuses a key outside the store's own space: a store deletes only what
storagebrief wrote there (an external bucket's other objects are never touched). S3 deletes go in batches
of DELETE_BATCH (DeleteObjects' limit), in one place.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

# the shared face (core.storebase), here under the names every caller uses
from .storebase import (DELETE_BATCH, SECRET_ENV, UPLOAD_THREADS, Store, StoreBase, StoreHandle,  # noqa: F401
                        batches)

class DirStore(StoreBase):
    """A folder storagebrief owns on a directory target: keys are paths below it. Files are written whole
    (temp file + rename) and persist across sweeps (a study's dataset is reused); delete removes only
    paths inside the folder (core.outdir's guard)."""
    access = "files"

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def client_group(self, run, memory_limit_bytes: int | None = None):
        """The client reads the device itself: the target's throttle, or a cgroup that only counts its reads, with
        `memory_limit_bytes` capping its page cache (Run.client_cgroup: None where cgroups cannot be had, noted)."""
        return run.client_cgroup(memory_limit_bytes)

    def io_group(self, client_group):
        return client_group

    def transfer(self, op: str, key: str, body) -> int:
        """A whole file written and closed (no fsync, no rename: a plain file write; its folder exists, made by
        `prepare_puts` before the clock, as a bucket does) or read to its end in 1 MiB reads."""
        if op == "put":
            with open(self.path(key), "wb") as fh:
                fh.write(body)
            return len(body)
        n = 0
        with open(self.path(key), "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                n += len(chunk)
        return n

    def read_spans(self, spans, block: int, parallel: int = 1) -> tuple[int, list[float]]:
        """Every (key, offset, length, whole) span read in `block` reads here, one after another (`parallel`
        unused): (bytes read, every read's seconds)."""
        import time
        total, lats, clock = 0, [], time.perf_counter
        for key, offset, length, _ in spans:
            got = 0
            with open(self.path(key), "rb", buffering=0) as fh:
                fh.seek(offset)
                while got < length:
                    t0 = clock()
                    chunk = fh.read(min(block, length - got))
                    if not chunk:
                        raise OSError(f"{self.path(key)}: {got} of {length} bytes at {offset}: a short file")
                    lats.append(clock() - t0)
                    got += len(chunk)
            total += got
        return total, lats

    def fill(self, prefix: str, make, staging: Path, log=print) -> dict:
        """The files made in place (`make(folder)` below this store's root; `staging` unused): "files" stay
        their paths, "backing" is their folder."""
        from .folders import folder_below
        folder = folder_below(self.root, *Path(prefix).parts, create=False)
        data = make(folder)
        return {**data, "sizes": [Path(f).stat().st_size for f in data["files"]], "backing": str(folder)}

    def prepare_puts(self, keys) -> None:
        """The folders of these keys made (real folders below the root), before a timed batch of puts."""
        from .folders import folder_below
        for parent in {Path(k).parent for k in keys}:
            folder_below(self.root, *parent.parts)

    def path(self, key: str) -> Path:
        """The file of `key`; a key that leaves the folder ('..', absolute) is refused."""
        rel = Path(key)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"refusing key '{key}': outside {self.root}, the folder this store owns")
        return self.root / rel

    def _new_file(self, key: str):
        """`key`'s file open for writing, its folders real ones below the root (outdir.folder_below: a symlink
        there is refused) and the file itself never opened through a symlink."""
        from .folders import folder_below
        rel = Path(key)
        folder = folder_below(self.root, *rel.parts[:-1])
        return open(os.open(folder / rel.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666), "wb")

    def put(self, key: str, body) -> None:
        f = self.path(key)
        tmp = f"{key[:-len(f.name)]}.{f.name}.tmp"
        with self._new_file(tmp) as fh:
            fh.write(body if isinstance(body, (bytes, bytearray, memoryview)) else body.read())
        os.rename(self.path(tmp), f)

    def put_parts(self, key: str, parts: Iterable[bytes], part_bytes: int) -> dict:
        import time
        self.path(key)
        t0, times, total = time.perf_counter(), [], 0
        with self._new_file(key) as fh:
            for chunk in parts:
                p0 = time.perf_counter()
                fh.write(chunk)
                times.append(time.perf_counter() - p0)
                total += len(chunk)
        return {"bytes": total, "parts": len(times), "seconds": time.perf_counter() - t0, "part_seconds": times}

    def get(self, key: str, offset: int = 0, length: int | None = None) -> bytes:
        with open(self.path(key), "rb") as fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def open_read(self, key: str):
        return open(self.path(key), "rb", buffering=0)

    def list(self, prefix: str = "") -> list[str]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return [prefix] if base.is_file() else []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*")
                      if p.is_file() and not p.name.endswith(".tmp"))

    def delete(self, keys: Iterable[str]) -> int:
        from .outdir import check_inside
        n = 0
        for k in keys:
            p = check_inside(self.path(k), self.root)        # no symlinked folder leads out either
            if p.exists() or p.is_symlink():
                p.unlink()
                n += 1
        return n

    def delete_under(self, prefix: str) -> int:
        from .outdir import remove_tree
        n = len(self.list(prefix))
        remove_tree(self.root / prefix, self.root)
        return n

    def files(self, keys: Iterable[str]) -> list[Path]:
        return [self.path(k) for k in keys]

    def describe(self) -> dict:
        return {}

    def handle(self) -> StoreHandle:
        return StoreHandle(folder=str(self.root))

    def url(self, key: str) -> str:
        return f"files below {self.root / key}"


def open_store(handle: StoreHandle, pool: int = 10) -> Store:
    """This process's own store on the handle's data: a DirStore, or an S3Client with `pool` connections."""
    if handle.folder is not None:
        return DirStore(handle.folder)
    from .s3store import S3Client
    return S3Client({**handle.s3, "pool": pool})


def for_target(target, root: str | Path, open_s3=None) -> Store:
    """The target's store: a DirStore at `root` on a directory target; on an S3 target, `open_s3()` (the
    engine opens it: a local gateway starts in a cgroup the sweep owns, core.stores)."""
    if getattr(target, "s3", None) is None:
        return DirStore(root)
    return open_s3()

