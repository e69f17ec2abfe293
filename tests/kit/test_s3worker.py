"""kit/s3worker: the object sweep's compiled client, started as the study starts it, its counts turned into the
batch the sweep judges (a compiled client: its usable cores are its requests in flight, capped by its CPUs)."""
from __future__ import annotations

import os

import pytest

from storagebrief.kit import s3worker
from storagebrief.kit.client_bound import thread_sched
from conftest import needs_gateway


def test_missing_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv(s3worker.BINARY_ENV, str(tmp_path / "none"))
    assert "run `make s3worker`" in s3worker.missing()


@pytest.mark.skipif(s3worker.missing() is not None, reason=str(s3worker.missing()))
def test_a_batch_on_a_folder_is_counted_and_judged_as_a_compiled_client(tmp_path):
    for k in ("a", "b", "c"):
        (tmp_path / k).write_bytes(b"z" * 8192)
    w = s3worker.start({"op": "get", "size": 8192, "concurrency": 2, "seed": 0, "keys": ["a", "b", "c"],
                        "store": {"folder": str(tmp_path)}}, {}, tmp_path / "w.log", "test worker", None)
    try:
        w.expect("ready", 30)
        before = thread_sched(w.pid)
        w.send({"cmd": "go"})
        done = w.expect("done", 30)
        b = s3worker.batch(done, w.pid, before, thread_sched(w.pid))
    finally:
        w.stop()
    row = b.row()
    assert row["objects"] == 3 and row["bytes_moved"] == 3 * 8192 and len(b.latencies_s) == 3
    proc = b.processes[0]
    assert proc.pid == w.pid and "(Go)" in proc.label
    assert proc.usable_cores == min(2, len(os.sched_getaffinity(0)))      # not one core: no interpreter lock


def test_the_object_sweep_refuses_to_start_without_it(tmp_path, monkeypatch):
    """Checked with the other tools before anything is made (core.machine_fit.check_tools): one line naming the make
    target, for a directory-only sweep too (its files go through the same client)."""
    from storagebrief.core import config, machine_fit
    monkeypatch.setenv(s3worker.BINARY_ENV, str(tmp_path / "none"))
    params = config.validate({"targets": [{"name": "d", "path": str(tmp_path / "d")}], "object_sweep": {},
                              "kv_cache": {}}, root=tmp_path)
    with pytest.raises(config.ParamsError, match=r"^object_sweep: .* is not built: run `make s3worker`"):
        machine_fit.check_tools(params, ["object_sweep"])
    machine_fit.check_tools(params, ["kv_cache"])          # another study does not need it


@pytest.mark.skipif(s3worker.missing() is not None, reason=str(s3worker.missing()))
@needs_gateway
def test_a_put_sends_its_body_whole_with_a_crc32c_the_gateway_keeps(tmp_path):
    """A PUT is signed as the AWS SDKs sign one by default (unsigned payload, a CRC32C of the body in a trailer the
    store checks), not with a SHA-256 per 64 KiB chunk (main.go putOptions, issue 58): the objects read back whole,
    incompressible, each the worker's one body, and the gateway keeps the checksum the body arrived with."""
    import base64
    import zlib

    from storagebrief.core import s3store
    from storagebrief.core.s3gateway import Gateway
    gw = Gateway(tmp_path / "gw", tmp_path / "gw.log").start()
    try:
        c = s3store.client(gw.endpoint, "us-east-1", gw.credentials, pool=2)
        c.create_bucket(Bucket="bench")
        size = (1 << 20) + 12345
        w = s3worker.start({"op": "put", "size": size, "concurrency": 2, "seed": 5, "keys": ["x", "y"],
                            "store": {"folder": None, "s3": {"endpoint": gw.endpoint, "bucket": "bench",
                                                             "region": "us-east-1", "addressing": "path"}}},
                           {"STORAGEBRIEF_S3_ACCESS": gw.access_key, "STORAGEBRIEF_S3_SECRET": gw.secret_key},
                           tmp_path / "w.log", "test worker", None)
        try:
            w.expect("ready", 30)
            w.send({"cmd": "go"})
            done = w.expect("done", 60)
        finally:
            w.stop()
        assert "error" not in done and done["batch"]["bytes_moved"] == 2 * size, done
        x, y = (c.get_object(Bucket="bench", Key=k)["Body"].read() for k in ("x", "y"))
        assert len(x) == size and x == y and len(zlib.compress(x, 1)) > 0.99 * size
        head = c.head_object(Bucket="bench", Key="x", ChecksumMode="ENABLED")
        crc = _crc32c(x)
        assert base64.b64decode(head["ChecksumCRC32C"]) == crc.to_bytes(4, "big"), head
    finally:
        gw.stop()
        gw.remove_buckets()


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bitwise over a table: enough for a test's few MiB."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
