"""The `s3:` block of an object-storage target in params.yaml, and what a run needs to reach it.

Two kinds, one block:
  * local gateway (no `endpoint`): the study starts versitygw (core.s3gateway) over the target's
    `path`, so objects are files on the same device as a directory target, under the same profile;
  * external endpoint (`endpoint: https://...`, `bucket`, optional `prefix`): your MinIO, Ceph, VAST or
    cloud bucket. Credentials come only from the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
    / AWS_SESSION_TOKEN) or an AWS profile (`profile`, ~/.aws): params never hold them, so results,
    logs and the brief cannot. storagebrief writes only below its own run prefix (core.s3store).
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .targets import TargetError

# S3 bucket naming rules (AWS): 3-63 characters, lower-case letters, digits, dots and hyphens.
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
CREDENTIAL_KEYS = ("access_key", "secret_key", "aws_access_key_id", "aws_secret_access_key", "session_token",
                   "aws_session_token", "password", "secret", "access")


USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")


def redact_url(text: str) -> str:
    """`text` with the user:password part of any URL in it replaced by ***: an error line may quote the value."""
    return USERINFO.sub(r"\1***@", text)


class S3TargetParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    endpoint: str | None = None        # None: the local gateway over the target's path
    bucket: str | None = None          # external: required; local: the run makes its own bucket
    prefix: str = ""                   # external: everything storagebrief writes lies below it
    region: str = "us-east-1"
    profile: str | None = None         # an AWS profile (~/.aws/credentials); None: the environment
    port: int | None = Field(None, ge=1024, le=65535)   # local gateway: None = a free loopback port
    verify_tls: bool = True
    addressing: str = Field("path", pattern=r"^(path|virtual)$")

    @model_validator(mode="before")
    @classmethod
    def _no_credentials(cls, data):
        if isinstance(data, dict):
            bad = [k for k in data if str(k).lower() in CREDENTIAL_KEYS]
            if bad:
                raise ValueError(f"credentials are never read from params ({', '.join(bad)}): set AWS_ACCESS_KEY_ID "
                                 "and AWS_SECRET_ACCESS_KEY in the environment, or name an AWS profile (s3.profile)")
        return data

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        u = urlparse(v)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"'{v}' is not an http(s) URL such as https://s3.example.com:9000")
        if u.username or u.password:
            raise ValueError("the endpoint URL holds credentials; give them in the environment or an AWS profile")
        return v.rstrip("/")

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str | None) -> str | None:
        if v is not None and (not BUCKET.match(v) or ".." in v):
            raise ValueError(f"'{v}' is not an S3 bucket name (3-63 characters: a-z, 0-9, '.', '-')")
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        v = v.strip("/")
        if any(part in ("", ".", "..") for part in v.split("/")) and v:
            raise ValueError(f"'{v}' has an empty, '.' or '..' part; write e.g. team/bench")
        return v

    @model_validator(mode="after")
    def _kind(self):
        if self.endpoint is not None and self.bucket is None:
            raise ValueError("an external endpoint needs a bucket (s3.bucket): storagebrief never creates or "
                             "deletes buckets on your store")
        if self.endpoint is None and (self.bucket or self.prefix or self.profile):
            raise ValueError("bucket, prefix and profile belong to an external endpoint (s3.endpoint); the local "
                             "gateway makes its own bucket under the target's path")
        if self.endpoint is not None and self.port is not None:
            raise ValueError("port is the local gateway's; an external endpoint carries its port in its URL")
        return self

    @property
    def external(self) -> bool:
        return self.endpoint is not None

    def describe(self) -> dict:
        """What the brief and inventory show: no credentials (params hold none)."""
        return {"kind": "external endpoint" if self.external else "local gateway (versitygw posix)",
                "endpoint": self.endpoint or "127.0.0.1 (started per run)", "bucket": self.bucket or "(per run)",
                "prefix": self.prefix, "region": self.region,
                "credentials": (f"AWS profile '{self.profile}'" if self.profile else "environment")
                if self.external else "random per run"}


def check_kind(name: str, kind: str, s3: S3TargetParams | None, profile: str | None) -> None:
    """A target's kind and s3 block agree; an external store cannot carry an emulated profile."""
    if kind == "s3" and s3 is None:
        raise ValueError(f"target '{name}' has kind s3 but no s3: block (an empty one, s3: {{}}, is the local "
                         "gateway)")
    if kind == "directory" and s3 is not None:
        raise ValueError(f"target '{name}' has an s3: block but kind directory; write kind: s3")
    if s3 is not None and s3.external and profile:
        raise ValueError(f"target '{name}': profile '{profile}' throttles a device of this machine; an external "
                         "endpoint's storage is not here, so it cannot be emulated")


def refuse_object_target(target, study: str) -> None:
    raise TargetError(f"target '{target.name}' is an S3 target; {study} measures directories only")
