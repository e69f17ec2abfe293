"""One storage face: what a study does with the place its data lives, a target's directory or an S3 target's
bucket (DLIO's `DataStorage` lesson). A study holds one `Store` per target and calls it; it never asks
"directory or S3?", and never reaches into a boto3 client: a faster S3 client plugs in here, once.

  * `DirStore`  a folder storagebrief owns on a directory target (`<target>/storagebrief/<study>/...`);
  * `ObjectStore` (core.s3store)  one run's bucket (local gateway) or run prefix (external endpoint);
  * `S3Client` (core.s3store)  a child process's own client (a rank, a worker), built from the dict the
    run's store hands it (`child_config`): a boto3 client is not fork-safe, so a child makes its own.

Keys are what `key(name)` returns (the run's prefix included; a directory's: the path below its root). Every
call that writes or deletes refuses a key outside the store's own space: a store deletes only what
storagebrief wrote there (an external bucket's other objects are never touched). S3 deletes go in batches
of DELETE_BATCH (DeleteObjects' limit), in one place.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Protocol, runtime_checkable

DELETE_BATCH = 1000      # S3 DeleteObjects takes at most 1,000 keys a request


@runtime_checkable
class Store(Protocol):
    """The public face every study uses (see the module docstring)."""
    access: str            # 'files' | 'S3 local gateway' | 'S3 external': the row's `access`
    client_reads_device: bool   # the client's own I/O reaches the device (a directory), not a server's
    group: object          # the cgroup its server runs in (a local gateway's), or None

    def key(self, name: str) -> str: ...
    def url(self, key: str) -> str: ...
    def put(self, key: str, body) -> None: ...
    def put_parts(self, key: str, parts: Iterable[bytes], part_bytes: int) -> dict: ...
    def get(self, key: str, offset: int = 0, length: int | None = None) -> bytes: ...
    def read_whole(self, key: str, block: int = 1 << 20) -> int: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete(self, keys: Iterable[str]) -> int: ...
    def delete_under(self, prefix: str) -> int: ...
    def files(self, keys: Iterable[str]) -> list[Path] | None: ...
    files_here: bool
    def evict_cold(self, run, keys: Iterable[str], what: str = "", drop: bool = False) -> str: ...
    def describe(self) -> dict: ...
    def child_config(self) -> dict: ...
    def server_cpu_seconds(self) -> float | None: ...
    def check(self) -> None: ...
    def failure(self, exc: BaseException) -> BaseException: ...
    def close(self) -> None: ...


class StoreBase:
    """What every store does the same way."""
    access = ""
    client_reads_device = False
    group = None           # the cgroup its server runs in (a local gateway's), kept by whoever opened it

    def key(self, name: str) -> str:
        return name

    def files(self, keys: Iterable[str]) -> list[Path] | None:
        """The files behind these keys on this machine (a cold cache evicts them); None: not here."""
        return None

    @property
    def files_here(self) -> bool:
        """Its data are files on this machine (a directory, a local gateway's): their page cache is ours to drop."""
        return self.files([]) is not None

    def evict_cold(self, run, keys: Iterable[str], what: str = "", drop: bool = False) -> str:
        """The next reads of `keys` come from the device: the run's `evict` (these files' pages) or, with
        `drop`, its `cold_cache` (drop_caches as root); a store whose files are elsewhere: not controlled.
        The method used becomes the row's cache_method (the engine's Run sets it)."""
        files = self.files(keys)
        if files is None:
            return run.cache_not_controlled()
        return run.cold_cache(files) if drop else run.evict(files, what)

    def read_whole(self, key: str, block: int = 1 << 20) -> int:
        """Read to the end in `block` reads (streamed, not held); returns the bytes read."""
        n = 0
        with self.open_read(key) as body:
            while chunk := body.read(block):
                n += len(chunk)
        return n

    def server_cpu_seconds(self) -> float | None:
        """CPU seconds of the store's server on this machine (a local gateway); None: no such server."""
        return None

    def check(self) -> None:
        """Raise when the store's server died (a local gateway); nothing else to check."""

    def failure(self, exc: BaseException) -> BaseException:
        """An exception from a measured operation, made one line where the store knows better."""
        return exc

    def close(self) -> None:
        """Nothing to stop."""


class DirStore(StoreBase):
    """A folder storagebrief owns on a directory target: keys are paths below it. Files are written whole
    (temp file + rename) and persist across sweeps (a study's dataset is reused); delete removes only
    paths inside the folder (core.outdir's guard)."""
    access = "files"
    client_reads_device = True

    def __init__(self, root: str | Path):
        self.root = Path(root)

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

    def child_config(self) -> dict:
        return {"folder": str(self.root)}

    def url(self, key: str) -> str:
        return f"files below {self.root / key}"


def batches(keys: list[str], size: int = DELETE_BATCH):
    """`keys` in consecutive slices of at most `size` (S3 DeleteObjects' limit)."""
    for i in range(0, len(keys), size):
        yield keys[i:i + size]


def for_target(target, root: str | Path, open_s3=None) -> Store:
    """The target's store: a DirStore at `root` on a directory target; on an S3 target, `open_s3()` (the
    caller opens it: a local gateway starts in a cgroup the caller owns, kit.s3study.open_store)."""
    if getattr(target, "s3", None) is None:
        return DirStore(root)
    return open_s3()

