"""make s3's Go check: a Go older than versitygw's go.mod needs, or none that runs, means install one."""
from __future__ import annotations

import io
import zipfile

from storagebrief.core import gotool


def _fake_go(tmp_path, version: str):
    go = tmp_path / f"go-{version}"
    go.write_text(f"#!/bin/sh\necho {version}\n")
    go.chmod(0o755)
    return str(go)


def test_versions_compare_as_numbers():
    assert gotool.version_tuple("go1.25.5") > gotool.version_tuple("go1.9")
    assert gotool.version_tuple("go1.26") == (1, 26, 0)


def test_ok_needs_a_go_that_runs_and_is_new_enough(tmp_path):
    assert gotool.main(["ok", _fake_go(tmp_path, "go1.26.8"), "1.25"]) == 0
    assert gotool.main(["ok", _fake_go(tmp_path, "go1.19.8"), "1.25"]) == 1      # Debian 12's golang-go
    assert gotool.main(["ok", str(tmp_path / "no-such-go"), "1.25"]) == 1


def test_module_hash_is_gos_h1_of_the_sorted_file_list():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("m@v1/b.txt", b"b")
        z.writestr("m@v1/a.txt", b"a")
    h1 = gotool.dirhash_h1(zipfile.ZipFile(buf))
    import base64
    import hashlib
    lines = "".join(f"{hashlib.sha256(c).hexdigest()}  {n}\n" for n, c in (("m@v1/a.txt", b"a"), ("m@v1/b.txt", b"b")))
    assert h1 == "h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode()
