"""What every store shares, below both kinds (core.store: the directory store and `open_store`; core.s3store: the S3
ones): the `Store` face, `StoreBase`, the picklable `StoreHandle` a worker opens its own store from
(`store.open_store(handle)`), and S3 deletes in batches. Its own module so the S3 side needs nothing of the
directory side, and opening a handle (which needs both) is core.store's alone: no import cycle.
"""
from __future__ import annotations

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
    def fill(self, prefix: str, make, staging: Path, log=print) -> dict: ...
    def warm(self, key: str) -> None: ...
    def transfer(self, op: str, key: str, body) -> int: ...
    def connect(self, key: str | None, concurrency: int) -> None: ...
    def read_spans(self, spans, block: int, parallel: int = 1) -> tuple[int, list[float]]: ...
    def make_body(self, nbytes: int, seed: int = 0, make=None): ...
    def data_path_cpu_seconds(self) -> float: ...
    def disconnect(self) -> None: ...
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

    def prepare_puts(self, keys) -> None:
        """Whatever a timed batch of puts to `keys` needs made first (a directory's folders); nothing here."""

    def connect(self, key: str | None, concurrency: int) -> None:
        """Before a clock: whatever a worker's reads need started (an S3 store's compiled client); nothing here."""

    def make_body(self, nbytes: int, seed: int = 0, make=None):
        """Before a clock: the body this store's writes send. A directory's writes send the caller's own buffer:
        `make(nbytes)` made here, in the caller's process, and returned (None without `make`)."""
        return make(nbytes) if make is not None else None

    def data_path_cpu_seconds(self) -> float:
        """CPU seconds of the process moving this store's bytes for this one (an S3 store's compiled client)."""
        return 0.0

    def disconnect(self) -> None:
        """Whatever `connect` started, stopped."""

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


def batches(keys: list[str], size: int = DELETE_BATCH):
    """`keys` in consecutive slices of at most `size` (S3 DeleteObjects' limit)."""
    for i in range(0, len(keys), size):
        yield keys[i:i + size]
