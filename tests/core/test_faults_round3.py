"""Faults, round 3 (issue 36), engine side: a name is never a path, a user's file is never ours, one
output folder has one writer, abandoning removes only what the run wrote, every delete is guarded.
Each test injects the fault for real and failed on the code before the fix (d545649)."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from storagebrief.core import config, lock, outdir, sweep
from conftest import REPO
from test_sweep import _study, params  # noqa: F401  (the fake study and its params fixture)


def _quiet(**kw):
    return dict(log=lambda *_: None, progress="off", **kw)


def _cli(*args, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


# --------------------------------------------------------------------------- 1. names are names
@pytest.mark.parametrize("bad", ["../victim", "/abs/victim", "a/b", ".hidden", "..", "", "x" * 65, "sp ace"])
def test_check_name_refuses_what_would_leave_its_folder(bad):
    with pytest.raises(ValueError, match="is not allowed: a name used in file paths"):
        config.check_name(bad, "checkpoint.shapes")


@pytest.mark.parametrize("good", ["llama3-8b", "my_shape.v2", "A1", "1e+06"])
def test_check_name_accepts_names(good):
    assert config.check_name(good, "x") == good


@pytest.mark.parametrize("bad", ["../victim", "/tmp/victim"])
def test_a_target_name_that_is_a_path_is_refused_by_validate(tmp_path, bad):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": bad, "path": str(tmp_path / "t")}]}))
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and "targets.0.name" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_guard_refuses_dotdot_absolute_and_symlinks_out(tmp_path):
    owner, victim = tmp_path / "owner", tmp_path / "victim"
    owner.mkdir()
    victim.mkdir()
    (victim / "precious").write_text("mine")
    (owner / "out").symlink_to(victim)
    for bad in ("../victim", str(victim), "out/precious"):
        with pytest.raises(outdir.UnsafeDelete):
            outdir.remove_tree(bad, owner)
    with pytest.raises(outdir.UnsafeDelete):
        outdir.remove_tree(".", owner)
    assert outdir.remove_tree("out", owner)              # the link goes, never what it points at
    assert (victim / "precious").read_text() == "mine" and not (owner / "out").is_symlink()
    (tmp_path / "t" / "storagebrief").mkdir(parents=True)
    (tmp_path / "t" / "storagebrief" / "checkpoint").symlink_to(victim)
    with pytest.raises(outdir.UnsafeDelete, match="outside the target"):
        outdir.study_folder(tmp_path / "t", "checkpoint")


def test_a_run_id_that_is_a_path_is_refused(params, tmp_path):
    with pytest.raises(ValueError, match="run id"):
        sweep.run(_study(run_id=lambda c, t, r: f"../../{c}"), params, tmp_path / "out", **_quiet())
    assert not (tmp_path.parent / "a.csv").exists()


# --------------------------------------------------------------------------- 2. ours is recorded
@pytest.mark.parametrize("name", [".env.template", ".notes.personal", ".bashrc.original"])
def test_a_users_hidden_file_is_never_taken_for_a_temporary_file(params, tmp_path, name):
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    (out / name).write_text("the user's")
    sweep.run(_study(), params, out, **_quiet())
    kept = [d for d in tmp_path.iterdir() if d.name.startswith("out.previous-")]
    assert len(kept) == 1 and (kept[0] / name).read_text() == "the user's"


def test_a_folder_holding_only_such_a_file_is_refused_in_one_line(params, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".env.template").write_text("the user's")
    with pytest.raises(outdir.OutDirError, match=r"holds files no fake run wrote \('.env.template'\)"):
        sweep.run(_study(), params, out, **_quiet())
    assert (out / ".env.template").read_text() == "the user's"


def test_our_own_temporary_files_are_recognised_by_their_prefix(params, tmp_path):
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    (out / ".storagebrief-tmp.runs.csv.ab12cd34").write_text("half")      # a killed run's atomic write
    sweep.run(_study(), params, out, **_quiet())
    assert not [d for d in tmp_path.iterdir() if d.name.startswith("out.previous-")]


# --------------------------------------------------------------------------- 3. abandon removes only ours
@pytest.mark.parametrize("fresh", [True, False], ids=["new folder", "empty folder"])
def test_abandoning_keeps_a_file_the_user_saved_during_the_run(params, tmp_path, fresh):
    out = tmp_path / "out"
    if not fresh:
        out.mkdir()

    def prepare(sw):
        (sw.out_dir / "my-notes.md").write_text("written while the dataset was built")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt) as info:
        sweep.run(_study(prepare=prepare), params, out, **_quiet())
    assert (out / "my-notes.md").read_text() == "written while the dataset was built"
    assert sorted(p.name for p in out.iterdir()) == ["my-notes.md"]            # status.json and ours gone
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "nothing was kept" in notes and "my-notes.md" in notes and "runs.csv" not in notes


def test_the_stop_message_never_points_at_a_runs_csv_that_is_gone(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                                 "run": {"trace": False},
                                 "checkpoint": {"models": ["llama3-8b"], "scale": 65536, "saves": 1,
                                                "restores": 0, "pause_s": 30, "cost": {"modes": []}}}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "checkpoint", "--params", str(f), "--out",
                             str(out), "--progress", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    import time
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "runs.schema.json").exists():   # inside the 30 s pause
        time.sleep(0.1)
    time.sleep(1)
    (out / "mine.txt").write_text("user")
    proc.send_signal(2)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "runs.csv" not in err and "nothing was kept" in err and (out / "mine.txt").read_text() == "user"
    assert not (out / "runs.csv").exists()


# --------------------------------------------------------------------------- 4. one writer per folder
def test_a_second_run_on_a_folder_in_use_refuses_naming_the_holder(params, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    held = lock.FolderLock(out, "refuse").acquire()
    try:
        refuse = params.model_copy(update={"run": params.run.model_copy(update={"on_busy_target": "refuse"})})
        with pytest.raises(lock.FolderBusy, match=f"output folder '{out}' is in use by PID {os.getpid()}"):
            sweep.run(_study(), refuse, out, **_quiet())
    finally:
        held.release()
    assert list(out.iterdir()) == []


def test_a_second_run_waits_for_the_folder_and_never_mixes_results(params, tmp_path):
    """Two runs, one --out: the second waits until the first has completed, so runs.csv and inventory.json
    come from one run (before: both said 'complete' with one run's rows and the other's inventory)."""
    out = tmp_path / "out"
    inside = threading.Event()
    release = threading.Event()

    def slow(run, c):
        inside.set()
        release.wait(60)
        return sweep.Measurement({"config": c, "value_s": 1.0})
    said = []
    other = config.validate({"targets": [{"name": "three", "path": str(tmp_path / "three")}],
                             "run": {"cold_cache": False}, "fake": {}})       # another target: no target lock shared
    first = threading.Thread(target=lambda: sweep.run(_study(run_one=slow), params, out, **_quiet()))
    first.start()
    assert inside.wait(60)
    second = threading.Thread(target=lambda: sweep.run(
        _study(run_one=lambda r, c: sweep.Measurement({"config": c, "value_s": 2.0})), other, out,
        log=said.append, progress="off"))
    second.start()
    for _ in range(600):
        if said:
            break
        threading.Event().wait(0.1)
    release.set()
    first.join(120)
    second.join(120)
    import pandas as pd
    assert set(pd.read_csv(out / "runs.csv").value_s) == {2.0}
    assert any("is in use by PID" in line and "waiting" in line for line in said)


def test_interactive_folders_are_unique_within_one_second(tmp_path, monkeypatch):
    monkeypatch.setattr(outdir, "stamp", lambda: "20260101-000000")
    made = {outdir.new_run_folder(tmp_path, "fake") for _ in range(3)}
    assert len(made) == 3 and all(m.is_dir() for m in made)


# --------------------------------------------------------------------------- minor: --out symlink
def test_an_out_symlink_stays_a_symlink_on_the_second_run(params, tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    sweep.run(_study(), params, link, **_quiet())
    sweep.run(_study(run_one=lambda r, c: sweep.Measurement({"config": c, "value_s": 5.0})), params, link,
              **_quiet())
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads((real / "status.json").read_text())["complete"] is True
    assert not [d for d in tmp_path.iterdir() if ".incomplete-" in d.name or d.name.startswith("link.")]


# --------------------------------------------------------------------------- minor: params
def test_a_tab_in_params_yaml_is_one_line(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("targets:\n\t- {name: t, path: /x}\n")
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "tab" in res.stderr and "line 2" in res.stderr


@pytest.mark.parametrize("inside", ["reports/t", ".git/t"])
def test_a_target_inside_the_projects_reports_or_git_is_refused(tmp_path, inside):
    root = tmp_path / "proj"
    (root / "reports").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / "params.yaml").write_text(yaml.safe_dump({"targets": [{"name": "t", "path": inside}]}))
    res = _cli("validate", "--params", str(root / "params.yaml"))
    assert res.returncode == 2 and inside.split("/")[0] in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- minor: | head -1
@pytest.mark.slow
def test_a_study_piped_into_head_is_no_broken_pipe(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}], "run": {"trace": False},
                                 "checkpoint": {"models": ["llama3-8b"], "scale": 65536, "saves": 2, "restores": 1,
                                                "pause_s": 0.2, "cost": {"modes": []}}}))
    out = tmp_path / "out"
    res = subprocess.run(["bash", "-c", f"{sys.executable} -m storagebrief.cli checkpoint --params {f} --out {out} "
                                        "--progress off | head -1; echo \"status ${PIPESTATUS[0]}\" >&2"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "BrokenPipe" not in res.stderr and "internal error" not in res.stderr, res.stderr
    assert "status 0" in res.stderr and len(res.stdout.splitlines()) == 1
    assert json.loads((out / "status.json").read_text())["complete"] is True     # the run went on to the end


# --------------------------------------------------------------------------- minor: Open MPI segments
def test_doctor_clean_removes_an_unused_vader_segment_and_keeps_one_in_use(tmp_path):
    import mmap
    import time as _time
    from storagebrief.core import leftovers
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this machine")
    tag = f"{os.getpid()}-{_time.monotonic_ns()}"
    dead, live = shm / f"vader_segment.sbtest.{tag}.0", shm / f"vader_segment.sbtest.{tag}.1"
    for f in (dead, live):
        f.write_bytes(b"\0" * 4096)
        os.utime(f, (_time.time() - 3600, _time.time() - 3600))     # older than a starting job's
    fh = open(live, "r+b")
    mapped = mmap.mmap(fh.fileno(), 4096)             # a rank still running maps its segment
    try:
        res = _cli("doctor", "--clean")
        assert res.returncode == 0, res.stderr
        assert f"removed leftover Open MPI segment {dead}" in res.stdout and not dead.exists()
        assert live.exists() and str(live) not in res.stdout
    finally:
        mapped.close()
        fh.close()
        dead.unlink(missing_ok=True)
        live.unlink(missing_ok=True)


# --------------------------------------------------------------------------- minor: make hosts twice
def test_host_keys_made_twice_in_one_folder_are_replaced_and_a_foreign_key_refused(tmp_path):
    import shutil
    from storagebrief.core import nethosts
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    key = tmp_path / "id_ed25519"
    nethosts._keygen(key)
    first = key.read_text()
    nethosts._keygen(key)                    # before: ssh-keygen refused to overwrite, a traceback
    assert key.read_text() != first and "storagebrief-test-hosts" in key.with_suffix(".pub").read_text()
    mine = tmp_path / "mine"
    mine.write_text("a user's private key")
    (tmp_path / "mine.pub").write_text("ssh-ed25519 AAAA user@laptop")
    with pytest.raises(RuntimeError, match="is not a key storagebrief made"):
        nethosts._keygen(mine)
    assert mine.read_text() == "a user's private key"


@pytest.mark.slow
def test_make_hosts_twice_in_one_folder(tmp_path):
    import signal as _signal
    from storagebrief.core import nethosts
    why = nethosts.unavailable()
    if why:
        pytest.skip(why)
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-m", "storagebrief.core.nethosts", "up", "1", str(tmp_path / "hosts")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C removes them" in line:
                break
        proc.send_signal(_signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and any("Ctrl-C removes them" in x for x in lines), err
