"""The notebooks as users open them: the kernel starts in notebooks/ (as JupyterLab starts it), the
parameters cell holds the study's knobs, errors read as one message, and running a notebook changes
nothing git or DVC track. The real-browser walk through JupyterLab is tests/test_jupyterlab.py."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from storagebrief import notebook, studies
from storagebrief.core import config
from conftest import REPO

jupytext = pytest.importorskip("jupytext")
papermill = pytest.importorskip("papermill")

STUDIES = list(studies.REGISTRY.values())


def _git_status() -> str:
    # what running a notebook could touch: the notebooks, their params and the pipeline's files
    return subprocess.run(["git", "status", "--porcelain", "--", "notebooks", "params.yaml", "params",
                           "dvc.yaml", "dvc.lock"], cwd=REPO, capture_output=True, text=True, check=True).stdout


def _targets(tmp: Path) -> list[dict]:
    return [{"name": "fast", "path": str(tmp / "fast")},
            {"name": "slow", "path": str(tmp / "slow"), "profile": "hdd_7200"}]


def _execute(study, tmp: Path, knobs: dict, **extra):
    """papermill with the kernel started in notebooks/, as JupyterLab starts it."""
    out = tmp / "executed.ipynb"
    params = {study.name: knobs, "targets": _targets(tmp), **extra}
    papermill.execute_notebook(jupytext.read(REPO / study.notebook), str(out), parameters=params,
                               cwd=str(REPO / "notebooks"), kernel_name="python3", progress_bar=False)
    return json.loads(out.read_text())


def _outputs(nb: dict) -> str:
    texts = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            texts.append("".join(o.get("text", "")) + json.dumps(o.get("data", {})) + "".join(o.get("traceback", [])))
    return "\n".join(texts)


def test_every_notebook_shows_params_yaml_section_as_its_knobs():
    assert notebook.sync_knobs(REPO) == [], "run `storagebrief notebooks --write`"
    for study in STUDIES:
        nb = jupytext.read(REPO / study.notebook)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        space: dict = {}
        exec(cell.source, space)
        assert space[study.name] == yaml.safe_load((REPO / "params.yaml").read_text())[study.name]
        assert space["out_dir"] is None and space["targets"] is None


def test_project_found_from_a_subfolder_and_relative_paths_resolve_against_params(tmp_path, monkeypatch):
    (tmp_path / "params.yaml").write_text("targets: [{name: a, path: data/a}]\npreprocess: {source_dir: null}\n")
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert config.project_root() == tmp_path
    params = config.load()
    assert params.targets[0].path == str(tmp_path / "data" / "a") and params.root == str(tmp_path)
    monkeypatch.chdir("/")
    with pytest.raises(config.ParamsError, match="no storagebrief project above /"):
        config.project_root()


def test_only_changed_knobs_go_over_params_yaml_and_the_paper_overlay_stays_under_them():
    section = {"repeats": 3, "processes": [1, 2, 4]}
    assert notebook._changes("preprocess", dict(section), section) == {}
    assert notebook._changes("preprocess", {"repeats": 1, "processes": [1, 2, 4]}, section) == {"repeats": 1}
    assert notebook._changes("preprocess", None, section) == {}
    with pytest.raises(config.ParamsError, match="must be a dict .* got str"):
        notebook._changes("preprocess", "processes=[1,2]", section)
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["scale"] = "paper"
    paper = config.validate(data, root=REPO, changes={"preprocess": {"repeats": 1}})
    overlay = yaml.safe_load((REPO / "params" / "paper.yaml").read_text())["preprocess"]
    assert paper.section("preprocess").repeats == 1
    assert paper.section("preprocess").image_count == overlay["image_count"]


def test_runs_table_headers_carry_units_and_numbers_fit():
    assert notebook.column_title("completion_time_s") == "completion time (s)"
    assert notebook.column_title("input_mb_per_s") == "input (MB/s)"
    assert notebook.column_title("read_latency_us_p99") == "read latency (µs, p99)"
    assert notebook.column_title("device_read_mb_per_s_avg") == "device read (MB/s, avg)"
    assert notebook.column_title("images_per_s") == "images /s"
    assert notebook.column_title("read_share_percent") == "read share (%)"
    assert [notebook._fmt(v) for v in (1234.5678, 12.345, 1.23456, 0.012345, 3, float("nan"), "x")] == \
        ["1,235", "12.3", "1.23", "0.0123", "3", "–", "x"]


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_notebook_runs_as_opened_from_notebooks_folder(study, tmp_path):
    """Run All as JupyterLab runs it (kernel in notebooks/, params.yaml found above it), tiny knobs:
    no error, the runs table and the study's results shown, results in the out folder, complete,
    and no tracked file changed."""
    before = _git_status()
    nb = _execute(study, tmp_path, study.tiny, out_dir=str(tmp_path / "out"))
    text = _outputs(nb)
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert "Knobs changed here over" in text and "measured runs (runs.csv)" in text
    assert "results go to" in text and "runs complete" in text
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["complete"] is True and status["runs_done"] > 0
    assert _git_status() == before


def test_a_typo_in_the_knobs_is_one_short_message_naming_the_near_miss(tmp_path):
    study = studies.get("preprocess")
    with pytest.raises(papermill.PapermillExecutionError) as exc:
        _execute(study, tmp_path, {**studies.get("preprocess").tiny, "proceses": [1, 2]})
    err = exc.value
    assert "did you mean 'processes'?" in err.evalue
    shown = [line for line in err.traceback if line.strip()]
    assert len(shown) == 1 and shown[0].count("storagebrief: error: invalid parameter preprocess.proceses") == 1
    assert "Traceback" not in "".join(err.traceback) and not (tmp_path / "fast").exists()


def test_error_display_shortens_only_what_storagebrief_raised():
    """In IPython: our expected errors become the CLI's line; a user's own error keeps its traceback."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell._showtraceback = lambda etype, value, stb: shown.append(stb)
    notebook.install_error_display()
    shell.run_cell("from storagebrief.core import config\nconfig.load('/nonexistent/params.yaml')")
    shell.run_cell("raise ValueError('a user bug')")
    shell.run_cell("raise KeyboardInterrupt")
    assert shown[0] == ["\x1b[0;31mstoragebrief: error: params file '/nonexistent/params.yaml' does not exist "
                        "(resolved: /nonexistent/params.yaml)\x1b[0m"]
    assert len(shown[1]) > 1 and "a user bug" in "".join(shown[1])            # the full traceback
    assert not any("storagebrief" in line for line in shown[2])                # not ours: not our message
