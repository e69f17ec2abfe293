"""Output folders (core.outdir through the engine): a run never clobbers or mixes results, never
deletes what it did not write, and an interrupted re-run leaves the earlier complete results whole."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.core import config, lock, outdir, sweep
from another_user import NOBODY, _plant, as_root, precious, shared  # noqa: F401  (precious, shared: fixtures)
from test_sweep import _quiet, _study, params  # noqa: F401  (the fake study and its params fixture)


def _status(folder):
    return json.loads((folder / "status.json").read_text())


def test_a_complete_run_is_marked_and_lists_its_files(params, tmp_path):
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    st = _status(out)
    assert st["complete"] is True and st["runs_done"] == st["runs_planned"] == 8 and st["study"] == "fake"
    assert "runs.csv" in st["files"] and "metrics.json" in st["files"] and st["stopped_by"] is None


def test_no_out_dir_means_a_fresh_run_folder_beside_the_params_file(params, tmp_path):
    frame = sweep.run(_study(), params, None, **_quiet())
    final = tmp_path / frame.attrs["out_dir"]
    assert final.parent.parent == tmp_path / "reports" / "runs" and final.name == "fake"
    assert _status(final)["complete"] is True
    again = sweep.run(_study(), params, None, **_quiet())
    assert again.attrs["out_dir"] != frame.attrs["out_dir"]        # never the same folder twice


def test_interrupted_rerun_leaves_the_earlier_complete_result_whole(params, tmp_path):
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def run_one(run, c):
        if c == "b":
            raise KeyboardInterrupt
        return sweep.Measurement({"config": c, "value_s": 2.0})
    with pytest.raises(KeyboardInterrupt):
        sweep.run(_study(run_one=run_one), params, out, **_quiet())
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before                                   # not one byte of the complete result changed
    partial = [d for d in tmp_path.iterdir() if d.name.startswith("out.incomplete-")]
    assert len(partial) == 1
    st = _status(partial[0])
    assert st["complete"] is False and st["runs_done"] == 4 and "Ctrl-C" in st["stopped_by"]
    assert set(pd.read_csv(partial[0] / "runs.csv").value_s) == {2.0}

    # the next complete run replaces the earlier result as a whole
    sweep.run(_study(run_one=lambda run, c: sweep.Measurement({"config": c, "value_s": 3.0})), params, out,
              **_quiet())
    assert set(pd.read_csv(out / "runs.csv").value_s) == {3.0} and _status(out)["complete"] is True
    assert not [d for d in tmp_path.iterdir() if d.name.startswith(".out.swap")]


def test_a_users_file_in_an_earlier_result_is_never_deleted(params, tmp_path):
    """A file no run listed (a user's note) keeps the whole earlier folder, beside the new results."""
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    mine = out / "timeseries" / "my-notes.txt"
    mine.write_text("keep me")
    said = []
    sweep.run(_study(), params, out, log=said.append, progress="off")
    kept = [d for d in tmp_path.iterdir() if d.name.startswith("out.previous-")]
    assert len(kept) == 1 and (kept[0] / "timeseries" / "my-notes.txt").read_text() == "keep me"
    assert _status(out)["complete"] is True and not (out / "timeseries" / "my-notes.txt").exists()
    assert any("my-notes.txt" in line and str(kept[0]) in line for line in said)


def test_a_killed_runs_partial_folder_is_replaced_by_the_next_run(params, tmp_path):
    """kill -9 leaves files the status list never saw: the next run still runs, deleting none of them."""
    out = tmp_path / "out"
    sweep.run(_study(), params, out, **_quiet())
    st = _status(out)
    st["complete"] = False
    (out / "status.json").write_text(json.dumps(st))
    (out / "fio").mkdir()
    (out / "fio" / ".run.json.tmp").write_text("{")           # written after the last status update
    sweep.run(_study(), params, out, **_quiet())
    assert _status(out)["complete"] is True
    kept = [d for d in tmp_path.iterdir() if d.name.startswith("out.previous-")]
    assert len(kept) == 1 and (kept[0] / "fio" / ".run.json.tmp").exists()


@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
@pytest.mark.slow
def test_cli_refuses_an_out_folder_holding_user_files_in_every_subfolder(study, tmp_path):
    """A user file in each subfolder any study writes (and at the top) survives; exit 2, one line."""
    out = tmp_path / "out"
    kept = {}
    for sub in ("", "logs", "timeseries", "jobs", "traces", "fio", "brokers"):
        f = out / sub / "mine.txt"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(sub or "top")
        kept[f] = sub or "top"
    params = tmp_path / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {tmp_path / 't'}}}]\n{study.name}: {{}}\n")
    proc = subprocess.run([sys.executable, "-m", "storagebrief.cli", study.command, "--params", str(params),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds files no" in lines[0] and str(out) in lines[0], proc.stderr
    assert all(f.read_text() == text for f, text in kept.items())
    assert not (tmp_path / "t").exists()          # refused before touching the target


@pytest.mark.slow
@pytest.mark.e2e
def test_ctrl_c_of_a_real_rerun_keeps_the_earlier_results_and_marks_the_partial_one(tmp_path):
    """The CLI (same engine as the notebooks): a complete preprocess study, then a re-run into the same
    folder stopped by SIGINT after its first row: the first result is untouched, the second is kept
    beside it, marked incomplete."""
    import signal
    import time

    params = tmp_path / "params.yaml"
    params.write_text(
        f"targets: [{{name: t, path: {tmp_path / 't'}}}]\nrun: {{trace: false, monitor_interval_s: 0.1}}\n"
        "preprocess: {image_count: 8, image_counts: [], processes: [1], repeats: 6, image_width: 640,"
        " image_height: 480, num_classes: 2, resize_width: 32, resize_height: 32}\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "storagebrief.cli", "preprocess", "--params", str(params), "--out", str(out)]
    subprocess.run(cmd + ["-S", "preprocess.repeats=1"], check=True, capture_output=True, timeout=300)  # 6: 11 s more
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        partial = [d for d in tmp_path.iterdir() if d.name.startswith("out.incomplete-")]
        if partial and (partial[0] / "runs.csv").exists():
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the re-run wrote no row in its own folder")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    st = _status(partial[0])
    assert st["complete"] is False and st["stopped_by"] == "interrupted (Ctrl-C)" and st["runs_done"] >= 1
    assert f"the partial run is in {partial[0]}" in err and f"{out} keeps the earlier results" in err


@pytest.mark.parametrize("fresh", [True, False], ids=["new folder", "empty folder"])
def test_a_run_stopped_before_its_first_row_leaves_nothing(params, tmp_path, fresh):
    out = tmp_path / "out"
    if not fresh:
        out.mkdir()
        (out / "notebook.ipynb").write_text("{}")       # what papermill writes before the study starts

    def run_one(run, c):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        sweep.run(_study(run_one=run_one), params, out, **_quiet())
    left = sorted(str(p.relative_to(tmp_path)) for p in out.rglob("*")) if out.exists() else None
    assert left == (None if fresh else ["out/notebook.ipynb"])
    sweep.run(_study(), params, out, **_quiet())          # and the next run is not refused
    assert _status(out)["complete"] is True


# --------------------------------------------------------------------------- every delete is guarded (issue 36)
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


# --------------------------------------------------------------------------- a user's hidden file is theirs (issue 36)
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


# --------------------------------------------------------------------------- abandoning removes only ours (issue 36)
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


# --------------------------------------------------------------------------- one writer per output folder (issue 36)
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


# --------------------------------------------------------------------------- an --out symlink (issue 36)
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


# --------------------------------------------------------------------------- a killed run's own trace (issue 44)
def _killed_runs_trace(path: Path) -> None:
    """What the trace reader leaves when killed -9 mid-run: the gzip stream up to its first flush (magic and
    header line, core.blocktrace), no end."""
    import gzip
    import io
    from storagebrief.core.traceformat import file_start
    buf = io.BytesIO()
    gz = gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1)
    gz.write(file_start({"page_size": 4096, "cpus": [0]}))
    gz.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("users_file", [False, True])
def test_a_killed_runs_own_raw_trace_is_ours_not_a_users_file(tmp_path, users_file):
    """An earlier result holding a raw trace its status.json does not list (the run was killed while tracing):
    the next complete run replaces it whole, no `.previous-` folder. A user's file named like a trace but not
    one (and any other unlisted file) still keeps it. Before: the trace counted as the user's, kept whole."""
    out = tmp_path / "out"
    first = outdir.OutputFolder(out, "kv_cache").check().create()
    (out / "runs.csv").write_text("run_id\nr0\n")
    first.progress(1, 3)
    first.release()
    _killed_runs_trace(out / "traces" / "kv_cache-t-r1.tracefs-raw.gz")
    if users_file:
        (out / "traces" / "notes.tracefs-raw.gz").write_bytes(b"\x1f\x8b not a trace of ours")
    second = outdir.OutputFolder(out, "kv_cache").check().create()
    (second.work / "runs.csv").write_text("run_id\nr0\nr1\n")
    second.complete()
    second.release()
    kept = [p.name for p in tmp_path.iterdir() if ".previous-" in p.name]
    assert (kept != []) == users_file, kept
    assert (out / "runs.csv").read_text().count("\n") == 3


# --------------------------------------------------------------------------- an --out in a shared folder (issue 44)
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
