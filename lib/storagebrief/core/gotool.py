"""Go for building versitygw (the local S3 gateway), without a system Go: `make s3` runs this file.

A user's machine usually has no Go, and Debian 12's golang-go (1.19) is too old for versitygw's
go.mod (1.25) and the object sweep's client (s3worker: minio-go v7.4.1 needs 1.26). This installs the official toolchain the way Go's own toolchain switch
(GOTOOLCHAIN=auto) does: the module zip `golang.org/toolchain@v0.0.1-go<version>.<os>-<arch>` from
the Go module proxy, checked against the Go checksum database (sum.golang.org) before it is
unpacked into the project's tool folder (.tools/go, outside git). Standard library only: it runs
before the virtualenv exists.

    python3 lib/storagebrief/core/gotool.py install DEST VERSION   # prints DEST/bin/go
    python3 lib/storagebrief/core/gotool.py ok GO MIN_VERSION       # exit 0 if GO runs and is >= MIN
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

PROXY = os.environ.get("STORAGEBRIEF_GOPROXY", "https://proxy.golang.org").rstrip("/")
# the checksum database read through the proxy, as the go command does (sum.golang.org itself may be unreachable)
SUMDB = f"{PROXY}/sumdb/sum.golang.org"
ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def version_tuple(text: str) -> tuple[int, ...]:
    m = re.search(r"go(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"not a Go version: {text!r}")
    return tuple(int(x or 0) for x in m.groups())


def go_version(go: str) -> tuple[int, ...] | None:
    """The version of the `go` executable, or None when it does not run."""
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "GOTOOLCHAIN": "local"}).stdout
        return version_tuple(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def module_version(version: str) -> str:
    machine = platform.machine().lower()
    if machine not in ARCH:
        raise SystemExit(f"storagebrief: no Go toolchain download for CPU '{machine}'; install Go >= "
                         f"{version} yourself and put it on PATH")
    return f"v0.0.1-go{version}.linux-{ARCH[machine]}"


def dirhash_h1(archive: zipfile.ZipFile) -> str:
    """Go's module hash (golang.org/x/mod/sumdb/dirhash Hash1) of a module zip."""
    summary = "".join(f"{hashlib.sha256(archive.read(name)).hexdigest()}  {name}\n"
                      for name in sorted(n for n in archive.namelist() if not n.endswith("/")))
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=300) as r:      # noqa: S310 -- fixed https hosts
        return r.read()


def install(dest: Path, version: str) -> Path:
    """Download, verify and unpack Go `version` into dest; returns dest/bin/go."""
    mod = module_version(version)
    data = _get(f"{PROXY}/golang.org/toolchain/@v/{mod}.zip")
    archive = zipfile.ZipFile(io.BytesIO(data))
    want = re.search(rf"^golang\.org/toolchain {re.escape(mod)} (h1:\S+)$",
                     _get(f"{SUMDB}/lookup/golang.org/toolchain@{mod}").decode(), re.M)
    got = dirhash_h1(archive)
    if want is None or want.group(1) != got:
        raise SystemExit(f"storagebrief: the Go {version} toolchain from {PROXY} does not match the Go checksum "
                         f"database ({want.group(1) if want else 'no entry'} != {got}); not installed")
    prefix = f"golang.org/toolchain@{mod}/"
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for info in archive.infolist():
        if info.filename.endswith("/") or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):]
        out = staging / rel
        if ".." in Path(rel).parts:
            raise SystemExit(f"storagebrief: unsafe path in the Go toolchain zip: {info.filename}")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(archive.read(info))
        # module zips keep no file modes: Go's own switch marks bin/ and pkg/tool/ executable, as here
        if rel.startswith("bin/") or rel.startswith("pkg/tool/"):
            out.chmod(0o755)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest / "bin" / "go"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "ok":
        have = go_version(argv[1])
        return 0 if have is not None and have >= version_tuple("go" + argv[2]) else 1
    if len(argv) == 3 and argv[0] == "install":
        print(install(Path(argv[1]).resolve(), argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
