"""One run's bucket and prefix on an object-storage target, through boto3, with its rules kept.

  * local gateway: versitygw over <target path>/storagebrief/s3gw (core.s3gateway), inside the
    cgroup the caller names; the run creates its own bucket and removes it, objects and all.
  * external endpoint: the bucket must exist (storagebrief never creates or deletes buckets there);
    the run writes only below <prefix>/storagebrief-run-<host>-<pid>-<nonce>/ and first puts an owner
    marker there, which it renews while it runs (a lease, core.runlease). Before any work it lists
    <prefix>/: an object outside a storagebrief run folder (one with a marker) is someone else's, and
    the target is refused; a run folder whose lease expired by the store's clock, or whose process ran
    in this machine, boot and PID namespace and is gone, is a killed run's, and its objects are
    removed. At the end only the run's own keys are deleted, by listing its run prefix.
`S3Calls` holds the object calls (core.store's public face: put, multipart put, whole and ranged get,
list, delete in batches; the data path, never boto3, is core.s3mover's MovedBytes); `ObjectStore` is the
run's store (open, ownership, close), `S3Client` a child process's own client opened from
`ObjectStore.handle()` (core.store.StoreHandle).
Every failure to reach the store is one line naming the key and the cause (S3Error, exit 2):
wrong endpoint, refused credentials, missing bucket, clock skew, a gateway that died.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
from email.utils import parsedate_to_datetime
from pathlib import Path

from . import procs, runlease
from .causes import EnvironmentFailure, one_line
from .s3gateway import Gateway, GatewayDied
from .s3mover import MovedBytes
from .storebase import StoreBase, StoreHandle, batches

RUN_FOLDER = "storagebrief-run-"
MARKER = ".storagebrief-run.json"


class S3Error(ValueError):
    """The store cannot be used as configured: one line, before (or instead of) any work; exit 2."""


class S3Failed(EnvironmentFailure):
    """The store failed during a measured run (not a configuration error): one line, exit 2."""


def client(endpoint: str, region: str, credentials: dict | None = None, profile: str | None = None,
           pool: int = 10, verify_tls: bool = True, addressing: str = "path"):
    """A boto3 S3 client: explicit credentials (the local gateway's), else the AWS profile, else the
    environment (boto3's own chain). No retries: a failure is a finding, not noise to hide."""
    import boto3
    from botocore.config import Config

    session = boto3.Session(profile_name=profile, region_name=region)
    if credentials is None and session.get_credentials() is None:
        where = f"AWS profile '{profile}'" if profile else "the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        raise S3Error(f"no S3 credentials for {endpoint}: none in {where}; storagebrief reads credentials only "
                      "from the environment or an AWS profile (s3.profile)")
    cfg = Config(signature_version="s3v4", max_pool_connections=max(10, pool), connect_timeout=5,
                 read_timeout=120, retries={"max_attempts": 1, "mode": "standard"},
                 s3={"addressing_style": addressing}, request_checksum_calculation="when_required",
                 response_checksum_validation="when_required")
    made = session.client("s3", endpoint_url=endpoint, config=cfg, verify=verify_tls, **(credentials or {}))
    if trace := os.environ.get(TRACE_ENV):
        made.meta.events.register("before-send.s3", lambda event_name, **_: _traced(trace, event_name))
    return made


TRACE_ENV = "STORAGEBRIEF_TRACE_BOTO3"   # test hook: every boto3 request appended to that file, with its process


def _traced(path: str, event_name: str) -> None:
    with open(path, "a") as fh:         # one short line, one write: processes at once do not interleave
        fh.write(f"{os.getpid()} {event_name.rsplit('.', 1)[-1]}\n")


def explain(exc: Exception, endpoint: str, bucket: str, key: str = "s3.endpoint") -> str:
    """One line for an S3 failure: which setting, which value, what the store said."""
    from botocore import exceptions as bx

    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ConnectionClosedError)):
        return f"{key} = {endpoint}: cannot connect ({one_line(str(exc), 160)}); check the URL and port"
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code, status = err.get("Code", "?"), exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("RequestTimeTooSkewed",):
            return (f"{endpoint} refused the request: this machine's clock differs from the store's too much "
                    f"({code}); set the clock (NTP) and run again")
        if code in ("NoSuchBucket",) or (status == 404 and code in ("404", "NotFound")):
            return (f"s3.bucket = {bucket}: no such bucket at {endpoint}; create it yourself (storagebrief never "
                    "creates or deletes buckets on your store)")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
                    "ExpiredToken", "403", "Forbidden") or status == 403:
            return (f"{endpoint} refused the credentials ({code}) for bucket {bucket}: check AWS_ACCESS_KEY_ID / "
                    "AWS_SECRET_ACCESS_KEY or the AWS profile (s3.profile)")
        return f"{endpoint} answered {status} {code} for bucket {bucket}: {one_line(err.get('Message', ''), 160)}"
    if isinstance(exc, bx.NoCredentialsError):
        return f"no S3 credentials for {endpoint}: set them in the environment or name an AWS profile (s3.profile)"
    return f"{endpoint}: {type(exc).__name__}: {one_line(str(exc), 200)}"


class S3Calls(MovedBytes, StoreBase):
    """The object calls on one bucket below one key prefix (core.store.Store). Keys are full keys
    (`key(name)`); a write or delete outside `prefix` is refused."""
    client = None
    bucket = ""
    prefix = ""            # the run's own prefix: every key it writes starts with it
    endpoint = ""
    gateway: Gateway | None = None

    def key(self, name: str) -> str:
        return self.prefix + name

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _own(self, key: str) -> str:
        if not key.startswith(self.prefix) or not key:
            raise AssertionError(f"refusing to write or delete '{key}': outside this run's prefix '{self.prefix}'")
        return key

    def _call(self, fn, **kw):
        """fn(**kw) with S3 failures as one line; a dead gateway is named as the cause."""
        from botocore import exceptions as bx
        try:
            return fn(**kw)
        except (bx.BotoCoreError, bx.ClientError) as exc:
            self.check()
            raise S3Error(explain(exc, self.endpoint, self.bucket)) from None

    def put(self, key: str, body) -> None:
        """One object, whole (bytes or a file open for reading)."""
        key = self._own(key)
        self._call(self.client.put_object, Bucket=self.bucket, Key=key, Body=body)

    def put_parts(self, key: str, parts, part_bytes: int) -> dict:
        """The byte chunks of `parts` (each exactly part_bytes, the last one at most) as one multipart upload,
        as MLPerf Storage v3.0's s3 checkpoint writers do; an interrupted upload is aborted (no invisible
        parts left). Returns {"bytes", "parts", "seconds", "part_seconds": [...]} (from the first request to
        the completed upload). S3 needs every part but the last to be at least 5 MiB."""
        import time
        if part_bytes < 5 << 20:
            raise ValueError(f"multipart part size {part_bytes} bytes is below S3's 5 MiB minimum "
                             "(write_block_mib >= 5)")
        c, bucket, full = self.client, self.bucket, self._own(key)
        t0 = time.perf_counter()
        up = self._call(c.create_multipart_upload, Bucket=bucket, Key=full)["UploadId"]
        done, times, total = [], [], 0
        try:
            for n, chunk in enumerate(parts, start=1):
                if len(chunk) > part_bytes:
                    raise ValueError(f"part {n} is {len(chunk)} bytes, more than part_bytes = {part_bytes}")
                p0 = time.perf_counter()
                etag = self._call(c.upload_part, Bucket=bucket, Key=full, UploadId=up, PartNumber=n, Body=chunk)["ETag"]
                times.append(time.perf_counter() - p0)
                done.append({"ETag": etag, "PartNumber": n})
                total += len(chunk)
            self._call(c.complete_multipart_upload, Bucket=bucket, Key=full, UploadId=up,
                       MultipartUpload={"Parts": done})
        except BaseException:
            try:
                c.abort_multipart_upload(Bucket=bucket, Key=full, UploadId=up)
            except Exception:   # noqa: BLE001 -- the store is gone; the run's close() lists and aborts again
                pass
            raise
        return {"bytes": total, "parts": len(done), "seconds": time.perf_counter() - t0, "part_seconds": times}

    def get(self, key: str, offset: int = 0, length: int | None = None) -> bytes:
        """An object whole, or bytes [offset, offset + length) of it (HTTP Range)."""
        return self.open_read(key, offset, length).read()

    def open_read(self, key: str, offset: int = 0, length: int | None = None):
        """The object's body as it arrives (read(n) until b""), whole or bytes [offset, offset + length)."""
        extra = {} if offset == 0 and length is None else \
            {"Range": f"bytes={offset}-" + ("" if length is None else f"{offset + length - 1}")}
        return self._call(self.client.get_object, Bucket=self.bucket, Key=key, **extra)["Body"]

    def transfer(self, op: str, key: str, body) -> int:
        """One whole-object PUT of `body`, or a GET whose body is read in 1 MiB reads and dropped (no copy kept)."""
        if op == "put":
            self.client.put_object(Bucket=self.bucket, Key=self._own(key), Body=body)
            return len(body)
        stream, got = self.client.get_object(Bucket=self.bucket, Key=key)["Body"], 0
        while chunk := stream.read(1 << 20):
            got += len(chunk)
        return got

    def head(self, key: str) -> int:
        """The object's size (one HEAD: also opens a connection before a clock starts)."""
        return int(self._call(self.client.head_object, Bucket=self.bucket, Key=key)["ContentLength"])

    def list(self, prefix: str) -> list[str]:
        """Every key below `prefix` (full keys)."""
        return list(self.listing(prefix)[0])

    def listing(self, prefix: str) -> tuple[dict, object]:
        """Every key below `prefix` with its LastModified, and the store's own time of the last answer (its
        Date header; None when it sends none)."""
        out, token, now = {}, None, None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix, **({"ContinuationToken": token} if token else {})}
            page = self._call(self.client.list_objects_v2, **kw)
            out.update((o["Key"], o.get("LastModified")) for o in page.get("Contents", []))
            date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
            try:
                now = parsedate_to_datetime(date) if date else now
            except (TypeError, ValueError):
                pass
            if not page.get("IsTruncated"):
                return out, now
            token = page["NextContinuationToken"]

    def delete(self, keys) -> int:
        """These keys of this run's, in DeleteObjects batches of 1,000; returns the count."""
        return self._delete_keys([self._own(k) for k in keys])

    def _delete_keys(self, keys: list[str]) -> int:
        for chunk in batches(keys):
            self._call(self.client.delete_objects, Bucket=self.bucket,
                       Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
        return len(keys)

    def delete_under(self, prefix: str) -> int:
        """Every key below `prefix` (inside this run's own prefix); returns the count."""
        return self._delete_keys(self.list(self._own(prefix)))

    def failure(self, exc: BaseException) -> BaseException:
        """An exception from a measured operation, one line where it is the store's (S3Failed)."""
        from botocore import exceptions as bx
        if isinstance(exc, (bx.BotoCoreError, bx.ClientError)):
            return S3Failed(explain(exc, self.endpoint, self.bucket, "endpoint"))
        return exc

    def describe(self) -> dict:
        """For study.json and the inventory (no credentials)."""
        return {"endpoint": self.endpoint, "gateway": "versitygw posix" if self.gateway else "",
                "bucket": self.bucket, "prefix": self.prefix}


class S3Client(S3Calls):
    """A child process's own client (a rank's, after the fork) on the run's bucket, from
    ObjectStore.handle() (core.store.StoreHandle.open); keys arrive whole (the run's prefix included). Its failures are raised as
    the store raised them: the parent's ObjectStore.failure names the cause."""

    def __init__(self, cfg: dict):
        self.bucket, self.endpoint, self.reach = cfg["bucket"], cfg["endpoint"], cfg
        self._boto = None

    @property
    def client(self):
        """boto3, made on first use: a worker whose bytes all go through the compiled client (connect,
        read_spans) never makes one."""
        if self._boto is None:
            cfg = self.reach
            self._boto = client(cfg["endpoint"], cfg["region"], cfg.get("credentials"), cfg.get("profile"),
                                pool=cfg.get("pool", 10), verify_tls=cfg.get("verify_tls", True),
                                addressing=cfg.get("addressing", "path"))
        return self._boto

    @client.setter
    def client(self, made) -> None:
        self._boto = made

    def _call(self, fn, **kw):
        return fn(**kw)

    def handle(self) -> StoreHandle:
        return StoreHandle(s3={k: v for k, v in self.reach.items() if k != "pool"})


class ObjectStore(S3Calls):
    """The bucket and key prefix one run owns on an S3 target; `open()` then `close()`."""

    def __init__(self, target, log_dir: Path, procs_files: list[str] | None = None, pool: int = 16, tag: str = "run"):
        self.target, self.s3 = target, target.s3
        self.log_dir, self.procs_files, self.pool = Path(log_dir), procs_files, pool
        self.tag = "".join(c if c.isalnum() else "-" for c in tag.lower())[:20].strip("-") or "run"
        self.gateway: Gateway | None = None
        self.client = None
        self.bucket = ""
        self.prefix = ""            # the run's own prefix: every key it writes starts with it
        self.endpoint = ""
        self.removed_stale: list[str] = []
        self.lease: runlease.Renewal | None = None     # rewrites the run's marker while it runs (external store)

    @property
    def external(self) -> bool:
        return self.s3.external

    @property
    def access(self) -> str:
        return "S3 " + ("local gateway" if self.gateway is not None else "external")

    def files(self, keys) -> list[Path] | None:
        """The gateway's plain files behind these keys; None on an external store (its cache is its own)."""
        if self.gateway is None:
            return None
        return [self.gateway.root / self.bucket / k for k in keys]

    def handle(self) -> StoreHandle:
        """What a child process opens its own client (S3Client) from: in memory only, never written anywhere
        (the local gateway's credentials are in it)."""
        s = self.s3
        return StoreHandle(s3={"endpoint": self.endpoint, "bucket": self.bucket, "region": s.region,
                               "profile": s.profile, "verify_tls": s.verify_tls, "addressing": s.addressing,
                               "credentials": self.gateway.credentials if self.gateway is not None else None})

    def warm(self, key: str) -> None:
        """One small GET pages the local gateway's code back in (a drop_caches evicts it too); the object's file is
        evicted again. An external store: nothing here to warm."""
        files = self.files([key])
        if files is None:
            return
        from .cache import fadvise_dontneed
        self.get(key, 0, 1)
        fadvise_dontneed(files)

    def server_cpu_seconds(self) -> float | None:
        """The local gateway's CPU seconds so far (user + system, /proc/<pid>/stat); None: no local gateway."""
        from .pidstat import cpu_seconds_of
        proc = self.gateway.proc if self.gateway is not None else None
        return None if proc is None else cpu_seconds_of(proc.pid)

    # -- open --------------------------------------------------------------------------------------
    def open(self) -> "ObjectStore":
        try:
            self._open_external() if self.external else self._open_local()
        except BaseException:
            self.close()
            raise
        return self

    def _open_local(self) -> None:
        root = self.target.study_dir("s3gw")         # no symlink leads the gateway's files off the target
        self.gateway = Gateway(root, self.log_dir / f"{self.target.name}-versitygw.log", port=self.s3.port,
                               procs_files=self.procs_files, region=self.s3.region,
                               port_key=f"target '{self.target.name}' s3.port").start()
        self.endpoint = self.gateway.endpoint
        self.client = client(self.endpoint, self.s3.region, self.gateway.credentials, pool=self.pool)
        self.bucket = f"sb-{self.tag}-{os.getpid()}-{secrets.token_hex(3)}"
        self.gateway.own_bucket(self.bucket)         # recorded first: a kill -9 during create leaves none
        self._call(self.client.create_bucket, Bucket=self.bucket)

    def _open_external(self) -> None:
        s = self.s3
        self.endpoint, self.bucket = s.endpoint, s.bucket
        self.client = client(s.endpoint, s.region, profile=s.profile, pool=self.pool, verify_tls=s.verify_tls,
                             addressing=s.addressing)
        self._call(self.client.head_bucket, Bucket=s.bucket)
        base = f"{s.prefix}/" if s.prefix else ""
        self._check_ownership(base)
        self.prefix = f"{base}{RUN_FOLDER}{socket.gethostname()[:20]}-{os.getpid()}-{secrets.token_hex(3)}/"
        self._marker_body = json.dumps(runlease.marker_doc(procs.owner_token())).encode()
        self._call(self._write_marker)
        self.lease = runlease.Renewal(self._write_marker)

    def _write_marker(self) -> None:
        """The run's marker, written again: its LastModified is the lease's last renewal, by the store's clock."""
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + MARKER, Body=self._marker_body)

    def _check_ownership(self, base: str) -> None:
        """Refuse a prefix holding objects storagebrief did not write; remove dead runs' folders."""
        stamps, now = self.listing(base)
        keys = list(stamps)
        runs = {k[len(base):].split("/", 1)[0] for k in keys if k[len(base):].startswith(RUN_FOLDER) and "/" in k[len(base):]}
        ours = {r for r in runs if f"{base}{r}/{MARKER}" in keys}
        foreign = [k for k in keys if k[len(base):].split("/", 1)[0] not in ours]
        if foreign:
            where = f"prefix '{self.s3.prefix}'" if self.s3.prefix else "the bucket's top level (no s3.prefix)"
            raise S3Error(f"target '{self.target.name}': s3.bucket = {self.bucket}, {where} holds {len(foreign)} "
                          f"object(s) storagebrief did not write (e.g. '{foreign[0]}'); refusing to write beside "
                          "them: set s3.prefix to an empty prefix of your own")
        for r in sorted(ours):
            key = f"{base}{r}/{MARKER}"
            written = stamps.get(key)
            age = (now - written).total_seconds() if now is not None and written is not None else None
            why = runlease.why_dead(self._marker(key), age)
            if why is not None:
                n = self._delete_under(f"{base}{r}/")
                self.removed_stale.append(f"removed {n} object(s) of a killed storagebrief run in "
                                          f"s3://{self.bucket}/{base}{r}/: {why}")

    def _marker(self, key: str) -> dict:
        try:
            return json.loads(self._call(self.client.get_object, Bucket=self.bucket, Key=key)["Body"].read())
        except (ValueError, S3Error, S3Failed):
            return {}

    # -- calls ---------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise GatewayDied when the local gateway has exited."""
        if self.gateway is not None:
            self.gateway.check()

    def failure(self, exc: BaseException) -> BaseException:
        """An exception from a measured operation, made one line (the gateway's death named first)."""
        try:
            self.check()
        except GatewayDied as died:
            return died
        from botocore import exceptions as bx
        if isinstance(exc, (bx.BotoCoreError, bx.ClientError)):
            return S3Failed(explain(exc, self.endpoint, self.bucket))
        return exc

    def _delete_under(self, prefix: str) -> int:
        """Delete every key below `prefix` (and abort its multipart uploads); returns the count."""
        if not prefix or (self.external and not prefix.startswith(f"{self.s3.prefix}/" if self.s3.prefix else "")):
            raise AssertionError(f"refusing to delete below '{prefix}'")
        n = self._delete_keys(self.list(prefix))
        try:
            ups = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=prefix).get("Uploads", [])
            for u in ups:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"])
        except Exception:   # noqa: BLE001 -- a store without multipart listing: nothing of ours to abort
            pass
        return n

    # -- close ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Everything this run wrote goes (external: its run prefix only); the gateway stops."""
        try:
            self.disconnect()
            if self.lease is not None:
                self.lease.stop()           # first: no renewal writes the marker again once the prefix is gone
            if self.external and self.client is not None and self.prefix:
                self._delete_under(self.prefix)
        finally:
            if self.gateway is not None:
                self.gateway.stop()
                self.gateway.remove_buckets()       # the local run's bucket: a folder of files it wrote
