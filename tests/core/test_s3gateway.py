"""The local S3 gateway (core/s3gateway.py) trusts nothing another user wrote (issue 44, defect 1): its registry
lives in this user's private runtime folder, an entry is judged (owner, marker, root) before a gateway is killed
or a bucket folder removed, and its temporary file follows no planted symlink; its set-up and its death are named
(a versitygw that is not executable, a death whose log holds only the IAM info line)."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from storagebrief.core import procs, runtime_dir, s3gateway
from conftest import needs_gateway, process_alive, wait_for
from another_user import NOBODY, _dead_pid, _plant, _stop, as_root, precious  # noqa: F401  (precious: a fixture)


def _versitygw(root: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    """A versitygw storagebrief did not start (no owner marker, or the one in `env`)."""
    root.mkdir(parents=True, exist_ok=True)
    port = s3gateway.free_port()
    base = {k: v for k, v in os.environ.items() if k != procs.OWNER_ENV}
    return subprocess.Popen([str(s3gateway.binary()), "--port", f"127.0.0.1:{port}", "--quiet", "posix", str(root)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**base, "ROOT_ACCESS_KEY_ID": "AKIATEST", "ROOT_SECRET_ACCESS_KEY": "secret-test",
                                 **(env or {})})


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


# --------------------------------------------------------------------------- the set-up and a death say what is wrong
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
