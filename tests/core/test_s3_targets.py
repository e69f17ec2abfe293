"""Object-storage targets against the real S3 gateway (versitygw, built by `make s3`), never a mock:
params rules, the gateway's lifecycle and faults, and an external bucket whose foreign objects are
never touched (a second local versitygw stands in for the user's store), and two runs on one store that never
take each other for dead (a lease by the store's clock, or this machine + boot + PID namespace)."""
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


# --------------------------------------------------------------------------- the S3 set-up (issue 44)
def test_a_secret_in_an_endpoint_url_is_refused_without_echoing_it(tmp_path):
    data = {"targets": [{"name": "o", "path": str(tmp_path / "o"), "kind": "s3",
                         "s3": {"endpoint": "http://alice:hunter2secret@s3.example.com:9000", "bucket": "abc"}}]}
    with pytest.raises(config.ParamsError, match="holds credentials") as e:
        config.validate(data, root=tmp_path, check_targets=False)
    assert "hunter2secret" not in str(e.value) and "alice" not in str(e.value) and "***@s3.example.com" in str(e.value)


def _s3_params(tmp_path: Path, **sections) -> dict:
    return {"targets": [{"name": "dir", "path": str(tmp_path / "dir")},
                        {"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}}], **sections}


@needs_gateway
@pytest.mark.parametrize("sections, says", [
    ({"checkpoint": {"launcher": "mpi"}}, "checkpoint.launcher = mpi: S3 targets (obj) run with forked ranks only"),
    ({"checkpoint": {"write_block_mib": 1}}, "checkpoint.write_block_mib = 1: S3 targets (obj) upload every file"),
    ({"emulate": {"launcher": "mpi"}}, "emulate.launcher = mpi: S3 targets (obj) run with launcher: fork only"),
])
def test_validate_refuses_what_the_run_refuses_on_s3_targets(tmp_path, sections, says):
    data = _s3_params(tmp_path, **sections)
    with pytest.raises(config.ParamsError) as e:
        config.validate(data, root=tmp_path)
    assert says in str(e.value) and "\n" not in str(e.value)
    config.validate(data, root=tmp_path, check_targets=False)          # readers of results: not refused
    config.validate({**data, "targets": data["targets"][:1]}, root=tmp_path)    # no S3 target: fine


def test_validate_refuses_a_local_gateway_target_without_versitygw(tmp_path, monkeypatch, capsys):
    from storagebrief import cli
    monkeypatch.setenv(s3gateway.BINARY_ENV, str(tmp_path / "no-versitygw"))
    f = tmp_path / "params.yaml"
    f.write_text(json.dumps(_s3_params(tmp_path, emulate={})))
    assert cli.main(["validate", "--params", str(f)]) == 2
    err = capsys.readouterr().err
    assert "S3 target(s) obj (local gateway): " in err and "no-versitygw: no such file" in err and err.count("\n") == 1
    config.load(f)                      # a run of a study that measures no S3 target does not need versitygw
    f.write_text(json.dumps(_s3_params(tmp_path)))                     # no study measures it: nothing to refuse
    assert cli.main(["validate", "--params", str(f)]) == 0


# --------------------------------------------------------------------------- liveness across hosts (issue 44)
def _store(tmp: Path, gw) -> s3store.ObjectStore:
    data = {"targets": [{"name": "ext", "path": str(tmp / "ext"), "kind": "s3",
                         "s3": {"endpoint": gw.endpoint, "bucket": "theirs", "prefix": "bench"}}]}
    return s3store.ObjectStore(targets.resolve_all(config.validate(data, root=tmp), create=True)[0], tmp / "logs")


def _keys(c) -> set[str]:
    return {o["Key"] for o in c.list_objects_v2(Bucket="theirs").get("Contents", [])}


def _dead_pid() -> str:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{proc.pid}:1"          # a PID that ran here and ended


def _plant(c, gw, run: str, doc: dict, age_s: float = 0) -> str:
    """A run folder with its marker and one object; an `age_s` old marker: its file's mtime on the store's disk
    (versitygw's posix backend reports it as LastModified), so the store itself says how old it is."""
    folder = f"bench/storagebrief-run-{run}/"
    c.put_object(Bucket="theirs", Key=folder + s3store.MARKER, Body=json.dumps(doc).encode())
    c.put_object(Bucket="theirs", Key=folder + "obj-0", Body=b"live bytes")
    if age_s:
        f = gw.root / "theirs" / folder / s3store.MARKER
        os.utime(f, (time.time() - age_s, time.time() - age_s))
    return folder


@needs_gateway
def test_a_live_run_in_another_pid_namespace_or_host_of_the_same_name_is_kept(tmp_path, external):
    """Markers with this hostname and a PID that is not running here, freshly renewed: another PID namespace
    (same machine and boot), another machine of the same name, and an old marker without identity. All kept.
    Before: each was taken for a killed run and its live objects deleted (the first run died with NoSuchKey)."""
    gw, c = external
    mine, dead = runlease.identity(), _dead_pid()
    folders = [_plant(c, gw, "other-ns", {**runlease.marker_doc(dead), "pid_ns": "0:1"}),
               _plant(c, gw, "other-host", {**runlease.marker_doc(dead), "machine_id": "f" * 32}),
               _plant(c, gw, "old", {"host": __import__("socket").gethostname(), "owner": dead})]
    assert mine["boot_id"] and mine["pid_ns"]
    st = _store(tmp_path, gw).open()
    try:
        assert st.removed_stale == []
        assert all(f + "obj-0" in _keys(c) for f in folders)
    finally:
        st.close()
    assert all(f + "obj-0" in _keys(c) for f in folders) and "datasets/keep.bin" in _keys(c)


SECOND_RUN = """
import sys
from pathlib import Path
from storagebrief.core import config, targets, s3store
data = {"targets": [{"name": "ext", "path": sys.argv[1], "kind": "s3",
                     "s3": {"endpoint": sys.argv[2], "bucket": "theirs", "prefix": "bench"}}]}
st = s3store.ObjectStore(targets.resolve_all(config.validate(data, root=Path(sys.argv[1]).parent), create=True)[0],
                         Path(sys.argv[3])).open()
print(len(st.removed_stale), flush=True)
st.close()
"""


@needs_gateway
@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of its own (unshare --pid) needs root")
def test_a_second_run_in_its_own_pid_namespace_keeps_the_first_runs_live_objects(tmp_path, external):
    """The case as found: a live run on the external store, a second run with the same hostname in a PID namespace
    of its own (its /proc shows none of ours). The first run's objects stay and it reads them after. Before: the
    second deleted them as a killed run's, the first died with NoSuchKey."""
    gw, c = external
    first = _store(tmp_path, gw).open()
    try:
        first.put(first.key("obj-0"), b"live bytes")
        res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", SECOND_RUN,
                              str(tmp_path / "ext2"), gw.endpoint, str(tmp_path / "logs2")],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
        if res.returncode and "unshare" in res.stderr and "Traceback" not in res.stderr:
            pytest.skip(f"no PID namespace here: {res.stderr.strip()}")
        assert res.returncode == 0 and res.stdout.strip() == "0", res.stderr[-2000:]
        assert first.get(first.key("obj-0")) == b"live bytes"
    finally:
        first.close()


@needs_gateway
def test_an_expired_lease_and_a_dead_run_of_this_namespace_are_removed(tmp_path, external):
    """A marker not renewed for longer than the lease (by the store's clock; from another host, even one whose
    process might run) goes; so does a fresh one written in this machine, boot and PID namespace whose process
    has ended. Their neighbours and the user's object stay."""
    gw, c = external
    alive_elsewhere = {**runlease.marker_doc(f"{os.getpid()}:1"), "machine_id": "f" * 32}
    expired = _plant(c, gw, "expired", alive_elsewhere, age_s=runlease.LEASE_S + 120)
    same_ns_dead = _plant(c, gw, "dead-here", runlease.marker_doc(_dead_pid()))
    fresh_elsewhere = _plant(c, gw, "fresh", alive_elsewhere, age_s=runlease.LEASE_S - 120)
    st = _store(tmp_path, gw).open()
    try:
        said = " ".join(st.removed_stale)
        assert "lease expired" in said and "on this machine has ended" in said, st.removed_stale
    finally:
        st.close()
    keys = _keys(c)
    assert not [k for k in keys if k.startswith((expired, same_ns_dead))]
    assert fresh_elsewhere + "obj-0" in keys and "datasets/keep.bin" in keys


@needs_gateway
@pytest.mark.slow
def test_the_lease_is_renewed_while_the_run_lives_and_never_after_it_closed(tmp_path, external, monkeypatch):
    gw, c = external
    monkeypatch.setattr(runlease, "RENEW_S", 0.3)
    st = _store(tmp_path, gw).open()
    key = st.prefix + s3store.MARKER
    first = c.head_object(Bucket="theirs", Key=key)["LastModified"]
    time.sleep(2.2)                 # LastModified has one-second resolution
    assert c.head_object(Bucket="theirs", Key=key)["LastModified"] > first
    doc = json.loads(c.get_object(Bucket="theirs", Key=key)["Body"].read())
    assert doc["lease_s"] == runlease.LEASE_S and doc["pid_ns"] == runlease.identity()["pid_ns"]
    st.close()
    assert not st.lease.alive
    time.sleep(1)
    assert not [k for k in _keys(c) if k.startswith(st.prefix)]      # no renewal wrote it back


def test_liveness_rules_without_a_store():
    dead = _dead_pid()
    here = runlease.marker_doc(dead)
    assert runlease.why_dead(here, 5) and runlease.why_dead({**here, "pid_ns": "x"}, 5) is None
    assert runlease.why_dead(runlease.marker_doc(f"{os.getpid()}:999"), 5)         # the PID reused by a later one
    assert runlease.why_dead(runlease.marker_doc(f"{os.getpid()}:{runlease.start_ticks(os.getpid())}"), 5) is None
    assert runlease.why_dead({"owner": dead}, None) is None                       # old, age unknown: kept
    assert runlease.why_dead({"owner": dead}, runlease.LEASE_S + 1)
    assert runlease.why_dead({**here, "pid_ns": "x", "lease_s": 10 * runlease.LEASE_S}, 2 * runlease.LEASE_S) is None
    assert runlease.why_dead({"owner": "1:1", "machine_id": "", "boot_id": "", "pid_ns": ""}, 5) is None
