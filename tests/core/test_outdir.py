"""Output folders (core.outdir through the engine): a run never clobbers or mixes results, never
deletes what it did not write, and an interrupted re-run leaves the earlier complete results whole."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import sweep
from test_sweep import _study, params  # noqa: F401  (the fake study and its params fixture)


def _quiet(**kw):
    return dict(log=lambda *_: None, progress="off", **kw)


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
