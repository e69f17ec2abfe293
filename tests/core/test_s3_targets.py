"""Object-storage targets against the real S3 gateway (versitygw, built by `make s3`), never a mock:
params rules, the gateway's lifecycle and faults, and an external bucket whose foreign objects are
never touched (a second local versitygw stands in for the user's store)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storagebrief.core import config, leftovers, runlease, s3gateway, s3store, targets
from conftest import REPO, needs_gateway, process_alive, wait_for



def _params(tmp: Path, **s3) -> config.Params:
    data = {"targets": [{"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": s3}]}
    return config.validate(data, root=tmp)


def _target(tmp: Path, **s3) -> targets.Target:
    return targets.resolve_all(_params(tmp, **s3), create=True)[0]


# --------------------------------------------------------------------------- params
@pytest.mark.parametrize("s3, says", [
    ({"secret_key": "x"}, "credentials are never read from params"),
    ({"endpoint": "http://127.0.0.1:9"}, "needs a bucket"),
    ({"endpoint": "ftp://host", "bucket": "abc"}, "not an http(s) URL"),
    ({"endpoint": "http://u:p@host", "bucket": "abc"}, "holds credentials"),
    ({"endpoint": "http://host", "bucket": "Bad_Bucket"}, "not an S3 bucket name"),
    ({"bucket": "abc"}, "belong to an external endpoint"),
    ({"endpoint": "http://host", "bucket": "abc", "prefix": "a/../b"}, "'..'"),
])
def test_bad_s3_blocks_are_refused_with_the_key(tmp_path, s3, says):
    with pytest.raises(config.ParamsError, match="targets.0") as e:
        _params(tmp_path, **s3)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_kind_and_block_must_agree_and_external_cannot_be_emulated(tmp_path):
    for t, says in (({"kind": "s3"}, "no s3: block"), ({"s3": {}}, "write kind: s3"),
                    ({"kind": "s3", "profile": "hdd_7200", "s3": {"endpoint": "http://h", "bucket": "abc"}},
                     "cannot be emulated")):
        with pytest.raises(config.ParamsError, match=says):
            config.validate({"targets": [{"name": "x", "path": str(tmp_path / "x"), **t}]}, root=tmp_path)


def test_external_target_has_no_local_device_and_describes_no_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-shown-anywhere")
    t = _target(tmp_path, endpoint="http://127.0.0.1:9", bucket="abc", prefix="p")
    assert t.kind == "s3" and t.device.major is None and "external S3 endpoint" in t.device.reason
    assert "never-shown-anywhere" not in json.dumps(t.describe(), default=str)


# --------------------------------------------------------------------------- the local gateway
@needs_gateway
def test_local_gateway_keeps_objects_as_files_and_leaves_nothing(tmp_path):
    t = _target(tmp_path)
    st = s3store.ObjectStore(t, tmp_path / "logs").open()
    pid = st.gateway.proc.pid
    st.client.put_object(Bucket=st.bucket, Key="a/b.bin", Body=b"z" * 5000)
    on_disk = t.path / "storagebrief" / "s3gw" / st.bucket / "a" / "b.bin"
    assert on_disk.read_bytes() == b"z" * 5000            # an ordinary file on the target's device
    assert st.client.get_object(Bucket=st.bucket, Key="a/b.bin")["Body"].read() == b"z" * 5000
    st.close()
    assert not process_alive(pid) and not on_disk.parent.parent.exists()
    assert (tmp_path / "logs" / "obj-versitygw.log").exists()          # its log is kept
    assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{os.getpid()}-*"))


@needs_gateway
def test_port_in_use_is_one_line_before_any_work(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t = _target(tmp_path, port=port)
        with pytest.raises(s3gateway.GatewaySetupError, match=f"s3.port = {port}: port already in use"):
            s3store.ObjectStore(t, tmp_path / "logs").open()
    assert not (t.path / "storagebrief" / "s3gw").exists() or not any(
        p.name.startswith("sb-") for p in (t.path / "storagebrief" / "s3gw").iterdir())


@needs_gateway
def test_gateway_dying_mid_run_is_named_as_the_cause(tmp_path):
    st = s3store.ObjectStore(_target(tmp_path), tmp_path / "logs").open()
    try:
        st.gateway.proc.send_signal(signal.SIGKILL)
        st.gateway.proc.wait()
        with pytest.raises(Exception) as e:
            st.client.put_object(Bucket=st.bucket, Key="k", Body=b"1")
        err = st.failure(e.value)
        assert isinstance(err, s3gateway.GatewayDied) and "killed by SIGKILL" in str(err)
    finally:
        st.close()
    assert not (st.gateway.root / st.bucket).exists()


KILLED_RUN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from storagebrief.core import config, targets, s3store
    p = config.validate({"targets": [{"name": "obj", "path": sys.argv[1], "kind": "s3", "s3": {}}]}, root=Path(sys.argv[1]).parent)
    st = s3store.ObjectStore(targets.resolve_all(p, create=True)[0], Path(sys.argv[2])).open()
    st.client.put_object(Bucket=st.bucket, Key="partial", Body=b"x" * 1000)
    print(st.gateway.proc.pid, st.bucket, flush=True)
    time.sleep(600)
""")


@needs_gateway
def test_kill_9_leaves_no_gateway_and_the_sweep_removes_the_runs_bucket(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(tmp_path / "obj"), str(tmp_path / "logs")],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    gw_pid, bucket = proc.stdout.readline().split()
    bucket_dir = tmp_path / "obj" / "storagebrief" / "s3gw" / bucket
    assert (bucket_dir / "partial").exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_for(lambda: not process_alive(int(gw_pid)), 30)          # died with its parent
    lines = leftovers.remove_leftovers()
    assert any(f"removed bucket {bucket_dir}" in line for line in lines), lines
    assert not bucket_dir.exists()
    assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{proc.pid}-*"))


# --------------------------------------------------------------------------- an external endpoint
@pytest.fixture
def external(tmp_path, monkeypatch):
    """A second versitygw standing in for the user's own store, with a bucket holding their objects."""
    gw = s3gateway.Gateway(tmp_path / "their-store", tmp_path / "their.log").start()
    c = s3store.client(gw.endpoint, "us-east-1", gw.credentials)
    c.create_bucket(Bucket="theirs")
    c.put_object(Bucket="theirs", Key="datasets/keep.bin", Body=b"their bytes")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", gw.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", gw.secret_key)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield gw, c
    gw.stop()


def _objects(c) -> dict[str, bytes]:
    keys = [o["Key"] for o in c.list_objects_v2(Bucket="theirs").get("Contents", [])]
    return {k: c.get_object(Bucket="theirs", Key=k)["Body"].read() for k in keys}


@needs_gateway
def test_external_bucket_foreign_objects_are_never_touched(tmp_path, external):
    gw, c = external
    before = _objects(c)
    st = s3store.ObjectStore(_target(tmp_path, endpoint=gw.endpoint, bucket="theirs", prefix="bench"),
                             tmp_path / "logs").open()
    assert st.prefix.startswith("bench/storagebrief-run-") and st.gateway is None
    st.client.put_object(Bucket="theirs", Key=st.key("obj-0"), Body=b"ours")
    assert _objects(c)[st.key("obj-0")] == b"ours"
    st.close()
    assert _objects(c) == before                # ours gone, theirs byte for byte as they were


@needs_gateway
@pytest.mark.parametrize("prefix, foreign", [("bench", "bench/their-file"), ("", "datasets/keep.bin")])
def test_a_prefix_holding_foreign_objects_is_refused_and_left_as_it_was(tmp_path, external, prefix, foreign):
    gw, c = external
    c.put_object(Bucket="theirs", Key="bench/their-file", Body=b"also theirs")
    before = _objects(c)
    with pytest.raises(s3store.S3Error, match="storagebrief did not write") as e:
        s3store.ObjectStore(_target(tmp_path, endpoint=gw.endpoint, bucket="theirs", prefix=prefix),
                            tmp_path / "logs").open()
    assert "\n" not in str(e.value)
    assert _objects(c) == before


@needs_gateway
def test_a_killed_runs_folder_is_removed_but_only_it(tmp_path, external):
    gw, c = external
    dead = "bench/storagebrief-run-x-1-abc/"
    c.put_object(Bucket="theirs", Key=dead + s3store.MARKER,      # written here (machine, boot, PID namespace)
                 Body=json.dumps(runlease.marker_doc("999999999:1")).encode())
    c.put_object(Bucket="theirs", Key=dead + "obj-0", Body=b"partial")
    st = s3store.ObjectStore(_target(tmp_path, endpoint=gw.endpoint, bucket="theirs", prefix="bench"),
                             tmp_path / "logs").open()
    st.close()
    assert st.removed_stale and not [k for k in _objects(c) if k.startswith(dead)]
    assert _objects(c)["datasets/keep.bin"] == b"their bytes"


@needs_gateway
def test_wrong_endpoint_refused_credentials_and_missing_bucket_are_one_line_each(tmp_path, external, monkeypatch):
    gw, _ = external
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    cases = [({"endpoint": f"http://127.0.0.1:{closed}", "bucket": "theirs"}, {}, "cannot connect"),
             ({"endpoint": gw.endpoint, "bucket": "theirs"}, {"AWS_SECRET_ACCESS_KEY": "wrong"}, "refused the credentials"),
             ({"endpoint": gw.endpoint, "bucket": "nosuchbucket"}, {}, "no such bucket")]
    for s3, env, says in cases:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            t0 = time.monotonic()
            with pytest.raises(s3store.S3Error) as e:
                s3store.ObjectStore(_target(tmp_path, **s3), tmp_path / "logs").open()
            assert says in str(e.value) and "\n" not in str(e.value), str(e.value)
            assert "wrong" not in str(e.value) and gw.secret_key not in str(e.value)
            assert time.monotonic() - t0 < 120


def test_no_credentials_anywhere_is_one_line(tmp_path, monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(s3store.S3Error, match="no S3 credentials"):
        s3store.ObjectStore(_target(tmp_path, endpoint="http://127.0.0.1:9", bucket="abc"), tmp_path / "l").open()




@needs_gateway
@pytest.mark.privileged
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a full device) needs root")
def test_a_full_device_under_the_gateway_is_one_line(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        st = s3store.ObjectStore(_target(mnt), tmp_path / "logs").open()
        pid = st.gateway.proc.pid
        try:
            with pytest.raises(s3store.S3Error) as e:
                st.put("big", b"x" * (4 << 20))
            assert "No space left on device" in str(e.value) and "\n" not in str(e.value)
        finally:
            st.close()
        assert not process_alive(pid)
    finally:
        subprocess.run(["umount", str(mnt)])
