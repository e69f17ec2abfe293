"""One storage face: what a study does with the place its data lives, a target's directory or an S3 target's
bucket (DLIO's `DataStorage` lesson). A study holds one `Store` per target and calls it; it never asks
"directory or S3?", and never reaches into a boto3 client: a faster S3 client plugs in here, once.

  * `DirStore`  a folder storagebrief owns on a directory target (`<target>/storagebrief/<study>/...`);
  * `ObjectStore` (core.s3store)  one run's bucket (local gateway) or run prefix (external endpoint);
  * `StoreHandle`  what a worker process (a rank, an accelerator, a sweep worker) opens the same store from
    (`store.handle()`, picklable, in memory only): `handle.open()` gives a DirStore on the same folder, or an
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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol, runtime_checkable

DELETE_BATCH = 1000      # S3 DeleteObjects takes at most 1,000 keys a request
UPLOAD_THREADS = 4       # fill(): files PUT at once (a dataset's generation is not timed)


@runtime_checkable
class Store(Protocol):
    """The public face every study uses (see the module docstring)."""
    access: str            # 'files' | 'S3 local gateway' | 'S3 external': the row's `access`
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
    def handle(self) -> "StoreHandle": ...
    def client_group(self, run, memory_limit_bytes: int | None = None): ...
    def io_group(self, client_group): ...
    def prepare_puts(self, keys) -> None: ...
    def send_buffer(self, buf): ...
    def fill(self, prefix: str, make, staging: Path, log=print) -> dict: ...
    def warm(self, key: str) -> None: ...
    def transfer(self, op: str, key: str, body) -> int: ...
    def server_cpu_seconds(self) -> float | None: ...
    def check(self) -> None: ...
    def failure(self, exc: BaseException) -> BaseException: ...


@dataclass(frozen=True)
class StoreHandle:
    """What a worker process opens the target's store from (Store.handle()): a directory store's folder, or an
    S3 store's reach (endpoint, bucket, region, profile, verify_tls, addressing, credentials). Picklable; kept in
    memory only (a local gateway's credentials are in it): never written to a file or an argument list."""
    folder: str | None = None
    s3: dict | None = None

    def open(self, pool: int = 10) -> "Store":
        """This process's own store on the same data: a DirStore, or an S3Client with `pool` connections."""
        if self.folder is not None:
            return DirStore(self.folder)
        from .s3store import S3Client
        return S3Client({**self.s3, "pool": pool})

    def without_secrets(self) -> tuple["StoreHandle", dict]:
        """(this handle with no credentials, the credentials as environment variables) for a child started with
        its configuration on stdin: credentials go in its environment only (with_secrets gives them back)."""
        creds = (self.s3 or {}).get("credentials") or {}
        if not creds:
            return self, {}
        return (StoreHandle(self.folder, {**self.s3, "credentials": None}),
                {SECRET_ENV[0]: creds["aws_access_key_id"], SECRET_ENV[1]: creds["aws_secret_access_key"]})

    def with_secrets(self, environ) -> "StoreHandle":
        """The handle with the credentials a parent put in this process's environment (taken out of it)."""
        if self.s3 is None or SECRET_ENV[0] not in environ:
            return self
        creds = {"aws_access_key_id": environ.pop(SECRET_ENV[0]), "aws_secret_access_key": environ.pop(SECRET_ENV[1])}
        return StoreHandle(None, {**self.s3, "credentials": creds})


SECRET_ENV = ("STORAGEBRIEF_S3_ACCESS", "STORAGEBRIEF_S3_SECRET")


class StoreBase:
    """What every store does the same way."""
    access = ""
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

    def client_group(self, run, memory_limit_bytes: int | None = None):
        """The cgroup the run's client processes go in: none where a server does the device I/O (a local
        gateway, in its own cgroup holding the throttle: the engine records the run emulated while it lives) or
        the device is elsewhere (an external store). A page-cache cap has nothing to cap there either: the
        client's reads are not file reads."""
        return None

    def io_group(self, client_group):
        """The cgroup whose counters hold the run's device reads: the gateway's (None: not counted here)."""
        return self.group

    def send_buffer(self, buf):
        """`buf` as this store sends it without a copy per request (an S3 client: bytes); a directory: as it is."""
        return buf

    def prepare_puts(self, keys) -> None:
        """Whatever a timed batch of puts to `keys` needs made first (a directory's folders); nothing here."""

    def warm(self, key: str) -> None:
        """After a drop_caches, before a clock: page the store's server back in (a local gateway's code: its
        page-ins would count as the run's device reads) with one small read of `key`, whose file is evicted
        again. Nothing to do without a server on this machine."""

    def fill(self, prefix: str, make, staging: Path, log=print) -> dict:
        """A folder of files as this store's data below `prefix`: `make(folder)` writes them (returning a
        description with "files", their paths) in `staging`, they are PUT UPLOAD_THREADS at a time, and
        `staging` is removed. Returns the description with "files" the keys, "sizes" their bytes and "backing"
        the folder of the server's files on this machine (None: elsewhere)."""
        import shutil
        from concurrent.futures import ThreadPoolExecutor
        shutil.rmtree(staging, ignore_errors=True)
        try:
            data = make(Path(staging))
            keys = [self.key(f"{prefix}/{Path(f).name}") for f in data["files"]]
            sizes = [Path(f).stat().st_size for f in data["files"]]

            def put(i: int) -> None:
                with open(data["files"][i], "rb") as fh:
                    self.put(keys[i], fh)
            with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
                list(pool.map(put, range(len(keys))))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        backing = self.files([self.key(prefix)])
        log(f"PUT {len(keys)} objects ({sum(sizes) / 1e6:.1f} MB) to {self.url(self.key(prefix + '/'))}")
        return {**data, "files": keys, "sizes": sizes, "backing": str(backing[0]) if backing else None}

    def transfer(self, op: str, key: str, body) -> int:
        """One whole-object request, streamed: 'put' `body` (bytes) to `key`, or 'get' `key` read to its end and
        dropped; returns the bytes sent or received."""
        if op == "put":
            self.put(key, body)
            return len(body)
        return self.read_whole(key)

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


def batches(keys: list[str], size: int = DELETE_BATCH):
    """`keys` in consecutive slices of at most `size` (S3 DeleteObjects' limit)."""
    for i in range(0, len(keys), size):
        yield keys[i:i + size]


def for_target(target, root: str | Path, open_s3=None) -> Store:
    """The target's store: a DirStore at `root` on a directory target; on an S3 target, `open_s3()` (the
    engine opens it: a local gateway starts in a cgroup the sweep owns, core.stores)."""
    if getattr(target, "s3", None) is None:
        return DirStore(root)
    return open_s3()

