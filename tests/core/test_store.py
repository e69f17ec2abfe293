"""One storage face (core/store.py): the same contract for a directory (DirStore) and an S3 target's store
(core.s3store.ObjectStore on the local gateway, versitygw, built by `make s3`): put whole and in parts, get
whole and ranged, list, delete only what this run wrote, evict cold, describe; S3 deletes in batches of 1,000."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from storagebrief.core import config, outdir, s3gateway, s3store, targets
from storagebrief.core.store import DELETE_BATCH, DirStore, Store, open_store
from storagebrief.kit import s3ops
from users_folder import _unchanged, _victim

try:
    s3gateway.binary()
    NO_GATEWAY = None
except s3gateway.GatewaySetupError as exc:
    NO_GATEWAY = str(exc)


def _s3_target(tmp: Path) -> targets.Target:
    data = {"targets": [{"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": {}}]}
    return targets.resolve_all(config.validate(data, root=tmp), create=True)[0]


def _theirs(c) -> dict[str, bytes]:
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="theirs").get("Contents", [])]
    return {k: c.get_object(Bucket="theirs", Key=k)["Body"].read() for k in keys}


@pytest.fixture(params=["dir", "s3", "s3-external"])
def store(request, tmp_path, monkeypatch):
    """The same contract on a directory, the local gateway, and an external endpoint (a second versitygw standing
    in for the user's store: a bucket holding their objects, which must be byte for byte as they were after)."""
    if request.param == "dir":
        yield DirStore(tmp_path / "dir" / "storagebrief" / "study")
        return
    if NO_GATEWAY is not None:
        pytest.skip(NO_GATEWAY)
    if request.param == "s3":
        st = s3store.ObjectStore(_s3_target(tmp_path), tmp_path / "logs").open()
        try:
            yield st
        finally:
            st.close()
        return
    gw = s3gateway.Gateway(tmp_path / "their-store", tmp_path / "their.log").start()
    try:
        c = s3store.client(gw.endpoint, "us-east-1", gw.credentials)
        c.create_bucket(Bucket="theirs")
        c.put_object(Bucket="theirs", Key="bench-their-file", Body=b"their bytes")
        c.put_object(Bucket="theirs", Key="datasets/ckpt/keep.bin", Body=b"theirs too")
        before = _theirs(c)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", gw.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", gw.secret_key)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        data = {"targets": [{"name": "ext", "path": str(tmp_path / "ext"), "kind": "s3",
                             "s3": {"endpoint": gw.endpoint, "bucket": "theirs", "prefix": "bench"}}]}
        t = targets.resolve_all(config.validate(data, root=tmp_path), create=True)[0]
        st = s3store.ObjectStore(t, tmp_path / "logs").open()
        try:
            yield st
            with pytest.raises(AssertionError, match="refusing"):
                st.delete(["datasets/ckpt/keep.bin"])
            with pytest.raises(AssertionError, match="refusing"):
                st.delete_under("datasets/")
        finally:
            st.close()
        assert _theirs(c) == before            # everything of ours gone, theirs as it was
    finally:
        gw.stop()


class FakeRun:
    """The engine's Run methods that set cache_method (core.run_limits), recorded."""
    def __init__(self):
        self.calls = []

    def evict(self, paths, what):
        self.calls.append(("evict", list(paths)))
        return "fadvise"

    def cold_cache(self, paths):
        self.calls.append(("cold_cache", list(paths)))
        return "drop_caches"

    def cache_not_controlled(self, where="remote store"):
        self.calls.append(("not controlled", []))
        return f"{where}: not controlled"


def test_the_contract(store):
    assert isinstance(store, Store)
    part = 5 << 20
    data = s3ops.payload(2 * part + 1234, seed=3)
    k = store.key("ckpt/rank-0")
    res = store.put_parts(k, [data[i:i + part] for i in range(0, len(data), part)], part)
    assert res["parts"] == 3 and res["bytes"] == len(data) and len(res["part_seconds"]) == 3
    assert store.get(k) == data
    assert store.get(k, part - 10, 20) == data[part - 10:part + 10]
    assert store.read_whole(k, 1 << 20) == len(data)
    store.put(store.key("ckpt/small"), b"abc")
    store.put(store.key("other/x"), b"x")
    assert sorted(store.list(store.key("ckpt/"))) == [store.key("ckpt/rank-0"), store.key("ckpt/small")]
    files = store.files([k])
    if files is not None:                      # on this machine: the same bytes in a plain file
        assert files[0].read_bytes() == data
    run = FakeRun()
    store.evict_cold(run, [k], "the data")
    store.evict_cold(run, [k], drop=True)
    assert [c[0] for c in run.calls] == (["not controlled"] * 2 if files is None else ["evict", "cold_cache"])
    assert store.delete([store.key("other/x")]) == 1
    assert store.delete_under(store.key("ckpt/")) == 2
    assert store.list(store.key("ckpt/")) == [] and store.list(store.key("other/")) == []
    assert isinstance(store.describe(), dict) and store.access in ("files", "S3 local gateway", "S3 external")
    assert store.server_cpu_seconds() is None or store.server_cpu_seconds() >= 0


def test_a_worker_opens_the_same_store_from_its_handle(store, tmp_path):
    """A worker process gets the store's handle (pickled by a fork launcher, JSON through a child's stdin, its
    credentials in its environment) and opens the same data: a DirStore on the folder, or its own S3 client."""
    import dataclasses, json, pickle
    from storagebrief.core.store import SECRET_ENV, StoreHandle
    k = store.key("w/one")
    store.prepare_puts([k])
    assert store.transfer("put", k, b"x" * 3000) == 3000
    bare, env = store.handle().without_secrets()
    assert not (bare.s3 or {}).get("credentials")                    # never in what a child reads on stdin
    assert set(env) == (set(SECRET_ENV) if store.access == "S3 local gateway" else set())
    handle = StoreHandle(**json.loads(json.dumps(dataclasses.asdict(bare)))).with_secrets(dict(env))
    for h in (handle, pickle.loads(pickle.dumps(store.handle()))):
        worker = open_store(h, pool=2)
        assert worker.get(k) == b"x" * 3000 and worker.transfer("get", k, 3000) == 3000
    assert store.delete([k]) == 1


def test_a_workers_reads_count_what_arrived_and_on_s3_never_go_through_boto3(store, tmp_path, monkeypatch):
    """read_spans, a worker's data path: every span one read (S3: one GET by the compiled client, core.s3mover),
    the bytes received counted, every block read timed, a span the object cannot fill refused with its key; the
    worker's store makes no boto3 request (every request boto3 would send is recorded by the trace hook)."""
    import math
    from storagebrief.core.s3mover import MoverFailed
    k = store.key("spans/a")
    data = s3ops.payload(300_000, seed=5)
    store.prepare_puts([k])
    store.put(k, data)
    trace = tmp_path / "boto3-requests"
    monkeypatch.setenv(s3store.TRACE_ENV, str(trace))
    worker = open_store(store.handle(), pool=2)
    try:
        worker.connect(k, 2)
        got, lats = worker.read_spans([(k, 0, len(data), True), (k, 1000, 65536, False)], 16384, parallel=2)
        assert got == len(data) + 65536 and len(lats) == math.ceil(len(data) / 16384) + 4
        assert all(t >= 0 for t in lats)
        with pytest.raises(OSError, match="spans/a"):
            worker.read_spans([(k, 299_000, 2000, False)], 16384)      # 1,000 bytes there: short
        if store.access != "files":
            assert worker.data_path_cpu_seconds() >= 0
            os.kill(worker.mover.pid, signal.SIGKILL)
            with pytest.raises(MoverFailed, match="killed"):
                worker.read_spans([(k, 0, 10, False)], 16384)
    finally:
        worker.disconnect()
    assert not trace.exists(), trace.read_text()
    monkeypatch.delenv(s3store.TRACE_ENV)
    assert store.delete([k]) == 1


def test_an_s3_part_below_5_mib_is_refused_and_a_failed_upload_leaves_no_parts(tmp_path):
    if NO_GATEWAY is not None:
        pytest.skip(NO_GATEWAY)
    st = s3store.ObjectStore(_s3_target(tmp_path), tmp_path / "logs").open()
    try:
        with pytest.raises(ValueError, match="5 MiB minimum"):
            st.put_parts("x", [b"1"], 1 << 20)
        part = 5 << 20

        def failing():
            yield b"\0" * part
            raise RuntimeError("rank died")
        with pytest.raises(RuntimeError):
            st.put_parts("ckpt/rank-1", failing(), part)
        assert not st.client.list_multipart_uploads(Bucket=st.bucket).get("Uploads")     # aborted, no parts left
        assert "ckpt/rank-1" not in st.list("ckpt/")
    finally:
        st.close()


def test_a_directory_store_deletes_only_inside_its_folder(tmp_path):
    d = DirStore(tmp_path / "own")
    (tmp_path / "theirs").write_bytes(b"keep")
    with pytest.raises(Exception, match="refusing"):
        d.delete(["../theirs"])
    with pytest.raises(Exception, match="refusing"):
        d.delete_under("..")
    assert (tmp_path / "theirs").read_bytes() == b"keep"


class CountingClient:
    """A stub boto3 client: counts DeleteObjects requests and their sizes."""
    def __init__(self, keys):
        self.keys, self.deletes = list(keys), []

    def list_objects_v2(self, Bucket, Prefix, **kw):
        return {"Contents": [{"Key": k} for k in self.keys if k.startswith(Prefix)], "IsTruncated": False}

    def delete_objects(self, Bucket, Delete):
        self.deletes.append(len(Delete["Objects"]))
        return {}


def _external(prefix: str, client) -> s3store.ObjectStore:
    """An external store as open() leaves it: the run's own prefix in someone's bucket."""
    st = s3store.ObjectStore(SimpleNamespace(s3=SimpleNamespace(external=True, prefix="bench"), name="ext"), Path("."))
    st.client, st.bucket, st.prefix = client, "theirs", prefix
    return st


def test_deletes_go_in_batches_of_1000_and_only_below_the_runs_prefix():
    run = "bench/storagebrief-run-h-1-abc/"
    keys = [f"{run}k{i:05d}" for i in range(2 * DELETE_BATCH + 1)]
    c = CountingClient(keys + ["bench/someone-else", "bench/storagebrief-run-h-2-def/x"])
    st = _external(run, c)
    assert st.delete_under(st.key("")) == len(keys)
    assert c.deletes == [DELETE_BATCH, DELETE_BATCH, 1]
    c.deletes.clear()
    assert st.delete(keys[:1500]) == 1500 and c.deletes == [DELETE_BATCH, 500]
    for foreign in (["bench/someone-else"], [keys[0], "bench/storagebrief-run-h-2-def/x"]):
        with pytest.raises(AssertionError, match="refusing"):
            st.delete(foreign)
    with pytest.raises(AssertionError, match="refusing"):
        st.delete_under("bench/")
    with pytest.raises(AssertionError, match="refusing"):
        st.put("bench/someone-else", b"x")
    assert c.deletes == [DELETE_BATCH, 500]        # nothing else was sent


# --------------------------------------------------------------------------- a symlink in a directory store (issue 44)
def test_a_directory_store_never_writes_through_a_symlinked_folder_or_file(tmp_path):
    """The object sweep's files on a directory target (core.store.DirStore): a folder below the store's root
    that is a symlink is refused, and a file that is one is never opened through it."""
    from storagebrief.core.store import DirStore
    victim, files = _victim(tmp_path)
    root = tmp_path / "t" / "storagebrief" / "object_sweep"
    root.mkdir(parents=True)
    (root / "data").symlink_to(victim / "data")
    st = DirStore(root)
    with pytest.raises(outdir.UnsafeFolder, match="data is a symlink"):
        st.put("data/obj-00000", b"random")
    (root / "put").mkdir()
    (root / "put" / "obj-00000").symlink_to(victim / "precious.txt")
    with pytest.raises(OSError):
        st.put_parts("put/obj-00000", [b"x" * 10], 10)
    st.put("put/obj-00000", b"ours")           # whole-object put: the link alone is replaced by our file
    assert (root / "put" / "obj-00000").read_bytes() == b"ours"
    _unchanged(victim, files)
