"""Issue 44, defect 1 and the S3 set-up minors: nothing another user wrote steers a run.

Every forged file here is planted by another uid (65534, "nobody": a child that setuid()s to it, or a
file chown()ed to it), as the probe did; those tests need root and are skipped otherwise. The folders
stand in for /tmp and /dev/shm: world-writable and sticky, made for the test.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from storagebrief.core import config, lock, procs, runtime_dir, s3gateway, targets
from conftest import needs_gateway, process_alive, wait_for

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a file as another uid (65534) needs root")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _plant(fn) -> None:
    """Run fn() in a child that is uid 65534 (another local user)."""
    pid = os.fork()
    if pid == 0:
        try:
            _as_nobody()
            fn()
            os._exit(0)
        except BaseException:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0, "the planting child failed"


@pytest.fixture
def shared():
    """A folder like /tmp: mode 1777, every user may create names in it."""
    d = Path(tempfile.mkdtemp(prefix="sb-r4-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def precious(tmp_path):
    """A user's folder inside a mode-700 directory, and a root-owned file: what a forged entry points at."""
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    (vault / "precious").mkdir()
    (vault / "precious" / "keep.txt").write_text("mine")
    victim = vault / "victim.conf"
    victim.write_text("root's own file\n")
    return vault


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _versitygw(root: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    """A versitygw storagebrief did not start (no owner marker, or the one in `env`)."""
    root.mkdir(parents=True, exist_ok=True)
    port = s3gateway.free_port()
    base = {k: v for k, v in os.environ.items() if k != procs.OWNER_ENV}
    return subprocess.Popen([str(s3gateway.binary()), "--port", f"127.0.0.1:{port}", "--quiet", "posix", str(root)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**base, "ROOT_ACCESS_KEY_ID": "AKIATEST", "ROOT_SECRET_ACCESS_KEY": "secret-test",
                                 **(env or {})})


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait()


# --------------------------------------------------------------------------- the gateway registry
@as_root
@needs_gateway
def test_a_registry_entry_another_user_wrote_in_dev_shm_steers_nothing(tmp_path, precious):
    """The probe's 3-line file in /dev/shm, written by uid 65534: no bucket removed, no gateway killed."""
    gw = _versitygw(tmp_path / "gwroot", tmp_path / "gw.log")
    forged = Path("/dev/shm") / f"{s3gateway.REGISTRY_PREFIX}{_dead_pid()}-{secrets.token_hex(4)}.json"
    doc = {"owner": f"{_dead_pid()}:1", "pid": gw.pid, "root": str(precious), "buckets": ["precious"]}
    try:
        assert wait_for(lambda: process_alive(gw.pid), 10)
        time.sleep(0.3)
        _plant(lambda: forged.write_text(json.dumps(doc)))
        assert forged.stat().st_uid == NOBODY
        lines = s3gateway.leftovers()
        assert (precious / "precious" / "keep.txt").read_text() == "mine", lines
        assert gw.poll() is None and process_alive(gw.pid), f"a gateway storagebrief never started was killed: {lines}"
        assert forged in s3gateway.legacy_entries()        # doctor names it as ignored
    finally:
        forged.unlink(missing_ok=True)
        _stop(gw)


@as_root
@needs_gateway
def test_registry_entries_in_the_runtime_folder_are_judged_before_anything_goes(tmp_path, precious):
    """Even in our private folder: a file of another owner is ignored; our own entry kills only a versitygw that
    carries the dead run's marker, and removes only a bucket folder in the very root that run made."""
    reg = runtime_dir.path()
    dead = f"{_dead_pid()}:1"
    unmarked = _versitygw(tmp_path / "gwroot", tmp_path / "gw.log")
    marked = _versitygw(tmp_path / "gwroot2", tmp_path / "gw2.log", {procs.OWNER_ENV: f"{dead}:s3gw-1"})
    gwroot = tmp_path / "gwroot"
    (gwroot / "sb-run-1-aaaaaa").mkdir()
    root_id = [gwroot.lstat().st_dev, gwroot.lstat().st_ino]
    entries = {
        # not ours: its file belongs to another uid
        "foreign": ({"owner": dead, "pid": marked.pid, "marker": f"{dead}:s3gw-1", "root": str(gwroot),
                     "root_id": root_id, "buckets": ["sb-run-1-aaaaaa"]}, NOBODY),
        # ours, but naming a gateway without the marker and a root it did not make (the vault)
        "steered": ({"owner": dead, "pid": unmarked.pid, "marker": f"{dead}:s3gw-1", "root": str(precious),
                     "root_id": root_id, "buckets": ["precious", "../vault"]}, 0),
    }
    paths = []
    try:
        assert wait_for(lambda: process_alive(unmarked.pid) and process_alive(marked.pid), 10)
        time.sleep(0.3)
        for name, (doc, uid) in entries.items():
            f = reg / f"{s3gateway.REGISTRY_PREFIX}{_dead_pid()}-{name}.json"
            f.write_text(json.dumps(doc))
            os.chown(f, uid, uid)
            paths.append(f)
        lines = s3gateway.leftovers()
        assert (precious / "precious" / "keep.txt").read_text() == "mine", lines
        assert unmarked.poll() is None and marked.poll() is None, lines
        assert (gwroot / "sb-run-1-aaaaaa").is_dir(), lines
        # the same entry, ours and naming the marked gateway and its root: both go
        doc = {**entries["foreign"][0]}
        own = reg / f"{s3gateway.REGISTRY_PREFIX}{_dead_pid()}-own.json"
        own.write_text(json.dumps(doc))
        paths.append(own)
        lines = s3gateway.leftovers()
        assert not (gwroot / "sb-run-1-aaaaaa").exists() and wait_for(lambda: marked.poll() is not None, 10), lines
        assert any(f"pid {marked.pid}" in ln for ln in lines) and unmarked.poll() is None
    finally:
        for f in paths:
            f.unlink(missing_ok=True)
        _stop(unmarked)
        _stop(marked)


@as_root
@needs_gateway
def test_the_registrys_temporary_file_follows_no_planted_symlink(tmp_path, precious):
    """The old `<entry>.tmp` in /dev/shm: a symlink planted there by uid 65534 made root write JSON into its
    target. Now entries are made by mkstemp in a 0700 folder of ours."""
    port = s3gateway.free_port()
    planted = [Path("/dev/shm") / f"{s3gateway.REGISTRY_PREFIX}{os.getpid()}-{port}.tmp",
               runtime_dir.path() / f"{s3gateway.REGISTRY_PREFIX}{os.getpid()}-{port}.tmp"]
    victim = precious / "victim.conf"
    _plant(lambda: os.symlink(victim, planted[0]))
    planted[1].symlink_to(victim)          # even in our folder (only we could), nothing follows it
    gw = s3gateway.Gateway(tmp_path / "gw", tmp_path / "gw.log", port=port)
    try:
        gw.start()
        gw.own_bucket("sb-run-1-bbbbbb")
        assert victim.read_text() == "root's own file\n"
        st = os.lstat(gw.registry.parent)
        assert gw.registry.parent == runtime_dir.path() and st.st_uid == os.geteuid() and not st.st_mode & 0o077
    finally:
        gw.stop()
        for f in planted:
            f.unlink(missing_ok=True)


# --------------------------------------------------------------------------- the runtime folder
@as_root
def test_a_squatted_runtime_folder_is_never_used(tmp_path, shared, monkeypatch):
    """Another user made /dev/shm/storagebrief-<uid> first: it is passed over (and said why), never trusted."""
    monkeypatch.setattr(runtime_dir, "SHM", shared)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    squat = shared / f"storagebrief-{os.geteuid()}"
    _plant(lambda: os.mkdir(squat, 0o777))
    got = runtime_dir.path()
    assert got == tmp_path / "home" / ".cache" / "storagebrief" / "runtime"
    assert any(str(squat) in why and f"uid {NOBODY}" in why for why in runtime_dir.skipped())
    assert squat not in runtime_dir.usable() and got in runtime_dir.usable()
    assert not os.lstat(got).st_mode & 0o077
    # a symlink at the name is passed over too
    os.rmdir(squat)
    _plant(lambda: os.symlink(tmp_path, squat))
    assert runtime_dir.path() == got and any("symbolic link" in why for why in runtime_dir.skipped())


# --------------------------------------------------------------------------- locks
@as_root
def test_an_output_folder_lock_in_a_shared_folder_follows_no_planted_symlink(shared, precious):
    out = shared / "out"
    victim = precious / "victim.conf"
    _plant(lambda: os.symlink(victim, shared / f".out{lock.LOCK_NAME}"))
    held = lock.FolderLock(out, "refuse").acquire()
    try:
        assert victim.read_text() == "root's own file\n"
        assert lock.folder_lock_path(out).parent == runtime_dir.path()
    finally:
        held.release()


@as_root
def test_a_lock_file_another_user_holds_beside_a_shared_out_is_not_waited_on(shared):
    """A plain file planted at the lock name, flock()ed by uid 65534: the run neither waits nor refuses on it."""
    planted = shared / f".out{lock.LOCK_NAME}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:          # uid 65534: plants the file and holds a flock on it
        try:
            _as_nobody()
            fd = os.open(planted, os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b'{"pid": 1, "command": "forged"}')
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(w, b"held")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 4) == b"held"
        held = lock.FolderLock(shared / "out", "refuse").acquire()      # would raise FolderBusy naming "forged"
        held.release()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)


@as_root
def test_an_output_folder_lock_file_not_ours_is_refused_naming_its_owner(tmp_path):
    out = tmp_path / "out"
    f = lock.folder_lock_path(out)
    f.write_text("")
    os.chown(f, NOBODY, NOBODY)
    with pytest.raises(lock.FolderBusy, match=f"lock file {f} belongs to .*uid {NOBODY}.*does not wait") as e:
        lock.FolderLock(out, "wait").acquire()
    assert "\n" not in str(e.value)


@as_root
def test_a_symlink_planted_at_a_target_lock_is_refused_not_followed(shared, precious):
    victim = precious / "victim.conf"
    _plant(lambda: os.symlink(victim, shared / lock.LOCK_NAME))
    t = targets.resolve(config.TargetParams(name="x", path=str(shared)), targets.DEVICE_PROFILES)
    with pytest.raises(lock.TargetBusy, match="is a symbolic link"):
        lock.TargetLocks([t], "wait").acquire()
    assert victim.read_text() == "root's own file\n"


# --------------------------------------------------------------------------- the sweep kills and deletes only ours
@as_root
def test_the_sweep_removes_no_scratch_folder_and_kills_no_process_of_another_user(shared):
    dead = _dead_pid()
    theirs = shared / f"{procs.SCRATCH_PREFIX}mpi-{dead}-1"
    _plant(lambda: (theirs.mkdir(), (theirs / "data").write_text("theirs")))
    mine = shared / f"{procs.SCRATCH_PREFIX}mpi-{dead}-2"
    mine.mkdir()
    lines = procs.remove_dead_scratch(shared)
    assert (theirs / "data").read_text() == "theirs" and not mine.exists(), lines
    other = subprocess.Popen(["sleep", "60"], preexec_fn=_as_nobody,
                             env={**os.environ, procs.OWNER_ENV: f"{dead}:1:forged"})
    try:
        assert wait_for(lambda: procs.marker(other.pid) is not None, 10)
        lines = procs.kill_orphans()
        assert other.poll() is None and not any(f"process {other.pid} " in ln for ln in lines), lines
    finally:
        _stop(other)


# --------------------------------------------------------------------------- the S3 set-up minors
def test_a_secret_in_an_endpoint_url_is_refused_without_echoing_it(tmp_path):
    data = {"targets": [{"name": "o", "path": str(tmp_path / "o"), "kind": "s3",
                         "s3": {"endpoint": "http://alice:hunter2secret@s3.example.com:9000", "bucket": "abc"}}]}
    with pytest.raises(config.ParamsError, match="holds credentials") as e:
        config.validate(data, root=tmp_path, check_targets=False)
    assert "hunter2secret" not in str(e.value) and "alice" not in str(e.value) and "***@s3.example.com" in str(e.value)


def test_a_versitygw_that_is_not_executable_is_named_so(tmp_path, monkeypatch):
    exe = tmp_path / "versitygw"
    exe.write_bytes(b"\x7fELF")
    exe.chmod(0o644)
    monkeypatch.setenv(s3gateway.BINARY_ENV, str(exe))
    with pytest.raises(s3gateway.GatewaySetupError, match=f"versitygw at {exe} is not executable") as e:
        s3gateway.binary()
    assert "not built" not in str(e.value)
    monkeypatch.setenv(s3gateway.BINARY_ENV, str(tmp_path / "absent"))
    with pytest.raises(s3gateway.GatewaySetupError, match="absent: no such file"):
        s3gateway.binary()


@pytest.mark.parametrize("log, cause", [
    ("No IAM service configured, enabling single account mode\n", "(its log names no cause)"),
    ("No IAM service configured, enabling single account mode\nlisten tcp: bind: address already in use\n"
     "No IAM service configured, enabling single account mode\n", "listen tcp: bind: address already in use"),
])
def test_a_gateway_death_never_quotes_the_iam_info_line_as_its_cause(tmp_path, log, cause):
    gw = s3gateway.Gateway(tmp_path / "gw", tmp_path / "gw.log")
    gw.log_path.write_text(log)
    gw.proc = subprocess.Popen(["sh", "-c", "exit 3"])
    gw.proc.wait()
    with pytest.raises(s3gateway.GatewayDied) as e:
        gw.check()
    assert cause in str(e.value) and "IAM" not in str(e.value)


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


# --------------------------------------------------------------------------- the output folder in a shared folder
def _earlier_result(out: Path) -> None:
    """An earlier complete result of study 's' in `out`: the next run works in an `.incomplete-` sibling."""
    from storagebrief.core import outdir
    f = outdir.OutputFolder(out, "s", ("runs.csv",), "refuse", lambda *_: None).check().create()
    (out / "runs.csv").write_text("a\n1\n")
    f.complete()
    f.release()


@as_root
def test_a_folder_planted_at_the_working_siblings_name_is_never_used(shared, precious, monkeypatch):
    """`<out>.incomplete-<time>-<pid>` has a predictable name: a symlink to a user's folder planted there by uid
    65534 was taken as the working folder (mkdir exist_ok) and the run wrote into the user's folder."""
    from storagebrief.core import outdir
    out = shared / "out"
    _earlier_result(out)
    monkeypatch.setattr(outdir, "stamp", lambda: "20261128-000000")
    name = f"out.incomplete-20261128-000000-{os.getpid()}"
    _plant(lambda: os.symlink(precious / "precious", shared / name))
    f = outdir.OutputFolder(out, "s", ("runs.csv",), "refuse", lambda *_: None).check().create()
    try:
        assert f.work != shared / name and f.work.is_dir() and not f.work.is_symlink()
        assert sorted(os.listdir(precious / "precious")) == ["keep.txt"]
        assert os.lstat(shared / name).st_uid == NOBODY           # the planted link is left as it was
    finally:
        f.abandon()
        f.release()


@as_root
def test_an_out_folder_another_user_made_in_a_shared_folder_is_refused(shared):
    from storagebrief.core import outdir
    out = shared / "out"
    _plant(lambda: os.mkdir(out))
    with pytest.raises(outdir.OutDirError, match=r"belongs to uid 65534, not to this user.*folder others can write"):
        outdir.OutputFolder(out, "s", ("runs.csv",), "refuse", lambda *_: None).check()
    # refused: its lock (in /dev/shm/storagebrief-<uid>: the folder's parent is shared) went with the refusal; it
    # stayed, held, until the process ended (the make test run left one behind)
    assert not lock.folder_lock_path(out).exists()


def test_an_output_folder_lock_in_the_runtime_folder_goes_with_its_run(shared):
    """Locks of --out folders in /tmp piled up in /dev/shm/storagebrief-<uid> (one per folder, forever): released,
    the file goes; a killed run's, unheld, goes with the next leftovers sweep; a held one stays."""
    held = lock.FolderLock(shared / "a", "refuse").acquire()
    path = lock.folder_lock_path(shared / "a")
    assert path.parent == runtime_dir.path() and path.exists()
    assert str(path) not in lock.stale_runtime_locks()          # held: a live run's
    held.release()
    assert not path.exists()
    again = lock.FolderLock(shared / "a", "refuse").acquire()      # as after a kill -9: the fd closes unreleased
    os.close(again.fd)
    assert path.exists() and str(path) in lock.stale_runtime_locks() and not path.exists()
