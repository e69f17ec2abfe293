"""kv_cache, fault round 4 (issue 44): names a user gives are refused where they would become paths or markup,
shape dimensions are bounded, a prefill past its timeout is a note (the sweep finishes and is promoted), and the
brief reads every result the study can leave (prefill off, every run failed, side files missing, a partial
study.json, results made with another params file). Each test failed on the code before the fix (fdbeda7)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import REPO
from storagebrief import studies
from storagebrief.brief import assemble, inputs
from storagebrief.core import config
from storagebrief.studies.kv_cache import breakeven, metrics
from storagebrief.studies.kv_cache.workload import ModelShape

STUDY = studies.get("kv_cache")
SMALL = {"run": ["w"], "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 2, "concurrency": 2}},
         "clients": 2, "contexts": [{"tokens": 16, "weight": 1}], "turns": [{"tokens": 3, "weight": 1}],
         "turn_tokens": 8, "duration_s": 0.3, "repeats": 1, "write_block_mib": 1, "prefill": {"measure": False}}
# The bounds docs/studies/kv_cache.md states (room above llama3.1-405b and 10M-token windows; workload.SHAPE_BOUNDS)
SHAPE_BOUNDS = {"layers": 1024, "hidden": 1 << 18, "heads": 1024, "kv_heads": 1024, "head_dim": 2048,
                "ffn": 1 << 20, "context_window": 1 << 24}
SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128, "context_window": 4096}


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _params(tmp_path, section: dict):
    (tmp_path / "t").mkdir(exist_ok=True)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}], "kv_cache": section}))
    return f


def _validate(tmp_path, section: dict) -> subprocess.CompletedProcess:
    return _cli("validate", "--params", str(_params(tmp_path, section)))


# --------------------------------------------------------------------------- names (defect 5)
@pytest.mark.parametrize("name", ["../x", "/etc/x", "<script>alert(1)</script>", "<b>x</b>", ".hidden"])
@pytest.mark.parametrize("where", ["shape", "workload"])
def test_a_shape_or_workload_named_like_a_path_or_markup_is_one_line(tmp_path, name, where):
    if where == "shape":
        section = {**SMALL, "shapes": {name: SHAPE}, "workloads": {"w": {"model": name}}, "contexts":
                   [{"tokens": 16, "weight": 1}]}
    else:
        section = {**SMALL, "run": [name], "workloads": {name: SMALL["workloads"]["w"]}}
    res = _validate(tmp_path, section)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and repr(name) in lines[0] and "not allowed" in lines[0], res.stderr


def test_workload_overrides_and_checkpoint_shape_names_follow_the_same_rule():
    from storagebrief.core import checkpoint_workloads, workloads
    with pytest.raises(ValueError, match="not allowed"):
        workloads.merged_spec("<b>x</b>", {"<b>x</b>": {}})
    raw = {**{k: v for k, v in checkpoint_workloads.WORKLOADS["llama3-8b"].__dict__.items()}, "name": "../x"}
    with pytest.raises(checkpoint_workloads.CheckpointWorkloadError, match="not allowed"):
        checkpoint_workloads.CheckpointWorkload(**raw)


# --------------------------------------------------------------------------- bounds (defect 6)
@pytest.mark.parametrize("key", list(SHAPE_BOUNDS))
def test_a_shape_dimension_beyond_its_bound_is_one_line_naming_the_range(tmp_path, key):
    shape = {**SHAPE, key: 10 ** 30}
    res = _validate(tmp_path, {**SMALL, "shapes": {"huge": shape}, "workloads": {"w": {"model": "huge"}}})
    assert res.returncode == 2, res.stdout + res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and f"shapes.huge.{key}" in line and f"1 to {SHAPE_BOUNDS[key]:,}" in line, line


def test_the_break_even_at_every_bound_is_a_finite_answer():
    """The largest shape the bounds allow, the slowest rate: the arithmetic stays in floats (an unbounded layers
    count raised OverflowError here and ended a finished sweep as 'a bug')."""
    big = ModelShape("big", **{k: v for k, v in SHAPE_BOUNDS.items()})
    for tflops, rate, lat in ((1e-6, 1.0, 100.0), (1e6, 1e12, 0.0), (0.001, 1e-9, 1e9)):
        a = breakeven.answer(big, tflops, rate, lat, 1 << 24, 1 << 24)
        assert a["break_even_tokens"] is None or a["break_even_tokens"] >= 1
        assert breakeven.sentence(a)


# --------------------------------------------------------------------------- the prefill timeout (defect 6)
def test_a_prefill_past_its_timeout_is_a_note_and_the_sweep_is_promoted(tmp_path):
    f = _params(tmp_path, {**SMALL, "prefill": {"measure": True, "contexts": [64, 128], "repeats": 1,
                                                 "timeout_s": 0.2}})
    out = tmp_path / "out"
    res = _cli("kv-cache", "--params", str(f), "--out", str(out), "--progress", "off")
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "status.json").read_text())["complete"] is True
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    said = [n for n in notes if "prefill.timeout_s = 0.2 s" in n]
    assert said, notes
    assert not (out / "prefill-work").exists()
    shown = _section(out)
    assert "This machine's prefill" in shown and "prefill.timeout_s = 0.2 s" in shown


# --------------------------------------------------------------------------- the brief's minors
@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """One real tiny run on two targets (prefill off: the study's own tiny setting)."""
    tmp = tmp_path_factory.mktemp("kv4")
    data = {"targets": [{"name": n, "path": str(tmp / n)} for n in ("a", "b")],
            "run": {"cold_cache": True, "trace": False}, "kv_cache": SMALL}
    STUDY.run(config.validate(data, root=REPO), tmp / "out", log=lambda *_: None, progress="off")
    return tmp / "out"


@pytest.fixture
def copy(result, tmp_path):
    dest = tmp_path / "kv_cache"
    shutil.copytree(result, dest)
    return dest


def _section(d) -> str:
    """The kv section of the brief as shown (its HTML, figures dropped), read through the brief's gate."""
    import IPython.display
    s = inputs.read_study("kv_cache", d)
    assert s.ok, s.problem
    shown = []
    saved = IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.extend(str(getattr(o, "data", "")) for o in objs)
    try:
        STUDY.brief_section(d, s.frame, s.names)
    finally:
        IPython.display.display = saved
    return "\n".join(x for x in shown if "<img" not in x)


def test_prefill_off_shows_the_section_and_says_prefill_was_not_measured(copy):
    assert (copy / "prefill.csv").read_text().strip() == ""           # the study's own empty table
    shown = _section(copy)
    assert "What ran" in shown and "Reload or recompute" in shown
    assert "This machine's prefill" in shown and "prefill.measure = false" in shown


def test_a_result_whose_runs_all_failed_shows_each_failure_and_its_cause(copy):
    runs = pd.read_csv(copy / "runs.csv")
    keep = {"workload", "model", "kv_bytes_per_token", "launcher", "clients", "users_per_client", "concurrency",
            "cpu_tier_bytes", "duration_s"}       # what a failed run's row holds (run._columns)
    study_cols = {c.name for c in metrics.COLUMNS} - keep
    runs = runs[[c for c in runs.columns if c not in study_cols]].assign(
        status="failed", failure_reason="kv client 1 died: killed by signal 9 (from outside the run)")
    runs.to_csv(copy / "runs.csv", index=False)
    (copy / "breakeven.csv").write_text((copy / "breakeven.csv").read_text().splitlines()[0] + "\n")
    shown = _section(copy)
    assert "What failed" in shown and "2 of 2 run(s) failed" in shown
    assert "killed by signal 9" in shown and "No KV-cache run measured" in shown
    assert "no break-even" not in shown                 # nothing measured: no claim about reload rates
    assert STUDY.headlines(inputs.read_study("kv_cache", copy).frame, ["a", "b"]) == []


@pytest.mark.parametrize("missing", ["breakeven.csv", "study.json", "latency.csv"])
def test_a_missing_side_file_is_named_not_read_as_nothing_measured(copy, missing):
    (copy / missing).unlink()
    shown = _section(copy)
    assert f"missing: {missing}" in shown, shown[:3000]
    assert "no break-even" not in shown and "?" not in re.sub(r"<[^>]+>", "", shown).replace("?)", "")


def test_a_partial_study_json_says_what_is_not_recorded_instead_of_question_marks(copy):
    study = json.loads((copy / "study.json").read_text())
    for key in ("clients", "duration_s", "turn_tokens", "write_block_mib", "contexts"):
        study.pop(key)
    (copy / "study.json").write_text(json.dumps(study))
    what_ran = next(x for x in _section(copy).split("\n") if "What ran" in x)
    assert "?" not in what_ran and "(not recorded)" in what_ran, what_ran


def test_object_sweep_names_its_missing_side_files(tmp_path):
    """The same rule in the object sweep: a missing points.csv or pairs.csv is named, not "No pair ran"."""
    import IPython.display
    obj = studies.get("object_sweep")
    shown = []
    saved = IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.extend(str(getattr(o, "data", "")) for o in objs)
    try:
        frame = pd.DataFrame([{"target": "a", "status": "ok", "failure_reason": ""}])
        obj.brief_section(tmp_path, frame, ["a"])
    finally:
        IPython.display.display = saved
    text = "\n".join(shown)
    assert "missing: points.csv" in text and "missing: pairs.csv" in text
    assert "No object points were measured" not in text and "No pair ran" not in text


def test_appendix_b_says_when_the_results_were_made_with_other_params(result, tmp_path, monkeypatch):
    root = tmp_path / "proj"
    reports = root / "reports"
    shutil.copytree(result, reports / "kv_cache")
    (root / "t").mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump({"targets": [{"name": "a", "path": str(root / "t")}]}))
    from storagebrief.report import display
    shown = []
    monkeypatch.setattr(display, "show_html", shown.append)
    monkeypatch.setattr(assemble, "show_html", shown.append)
    assemble.appendix_procedure(reports, root / "params.yaml")
    text = "\n".join(shown)
    recorded = json.loads((reports / "kv_cache" / "inventory.json").read_text())["params_hash"]
    assert "were not made with" in text and recorded in text, text[:2000]
    assert "The parameters that ran" not in text
