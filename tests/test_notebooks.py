"""The notebooks as users open them: the kernel starts in notebooks/ (as JupyterLab starts it), the
parameters cell holds the study's knobs, errors read as one message, and running a notebook changes
nothing git or DVC track. The real-browser walk through JupyterLab is tests/test_jupyterlab.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from storagebrief import cli, notebook, notebooks, studies
from storagebrief.core import config
from conftest import REPO, notebook_outputs

jupytext = pytest.importorskip("jupytext")
papermill = pytest.importorskip("papermill")

STUDIES = list(studies.REGISTRY.values())


def _git_status() -> str:
    # what running a notebook could touch: the notebooks, their params and the pipeline's files
    return subprocess.run(["git", "status", "--porcelain", "--", "notebooks", "params.yaml", "params",
                           "dvc.yaml", "dvc.lock"], cwd=REPO, capture_output=True, text=True, check=True).stdout


def _targets(tmp: Path, throttled: bool = True) -> list[dict]:
    fast = [{"name": "fast", "path": str(tmp / "fast")}]
    return fast + ([{"name": "slow", "path": str(tmp / "slow"), "profile": "hdd_7200"}] if throttled else [])


def _execute(study, tmp: Path, knobs: dict, **extra):
    """papermill with the kernel started in notebooks/, as JupyterLab starts it."""
    out = tmp / "executed.ipynb"
    params = {study.name: knobs, "targets": _targets(tmp, extra.pop("throttled", True)), **extra}
    papermill.execute_notebook(jupytext.read(REPO / study.notebook), str(out), parameters=params,
                               cwd=str(REPO / "notebooks"), kernel_name="python3", progress_bar=False)
    return json.loads(out.read_text())


def test_every_notebook_shows_params_yaml_section_as_its_knobs():
    assert notebooks.sync_knobs(REPO) == [], "run `storagebrief notebooks --write`"
    for study in STUDIES:
        nb = jupytext.read(REPO / study.notebook)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        space: dict = {}
        exec(cell.source, space)
        assert space[study.name] == yaml.safe_load((REPO / "params.yaml").read_text())[study.name]
        assert space["out_dir"] is None and space["targets"] is None
        # one key per line at every depth: a nested group is not one long line behind a scrollbar
        for line in [line for line in cell.source.splitlines() if not line.lstrip().startswith("#")]:
            code = line.split("  #")[0]
            assert len(re.findall(r"'\w+': ", code)) <= 1 and len(code) <= 100, line


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
    assert notebook.column_title("stall_s_per_checkpoint") == "stall per checkpoint (s)"
    assert notebook.column_title("honest_save_gib_per_s") == "measured save (GiB/s)"      # issue 62: not "honest"
    assert [notebook._fmt(v) for v in (1234.5678, 12.345, 1.23456, 0.012345, 3, float("nan"), "x")] == \
        ["1,235", "12.3", "1.23", "0.0123", "3", "–", "x"]


@pytest.mark.e2e
def test_a_notebook_runs_as_opened_from_notebooks_folder(tmp_path):
    """Run All as JupyterLab runs it (kernel in notebooks/, params.yaml found above it), tiny knobs on one
    unthrottled target: no error, the knobs changed here named, the runs table and the study's results shown,
    results in the out folder, complete, and no tracked file changed. Finding the project from notebooks/ is
    notebook.py's, the same for every study, so one study answers it here (the KV-cache study: its tiny run takes
    seconds); every study's notebook runs in the tiny DVC chain (test_brief_e2e.py checks the same things on
    each) and the preprocess notebook in a real JupyterLab (test_jupyterlab.py)."""
    study = studies.get("kv_cache")
    before = _git_status()
    nb = _execute(study, tmp_path, study.tiny, out_dir=str(tmp_path / "out"), throttled=False)
    errors, text = notebook_outputs(nb)
    assert not errors
    assert "Knobs changed here over" in text and "measured runs (runs.csv)" in text
    assert "results go to" in text and "runs complete" in text
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["complete"] is True and status["runs_done"] > 0
    assert _git_status() == before


@pytest.mark.e2e
def test_the_brief_notebook_runs_as_opened_from_notebooks_folder(tmp_path):
    """Issue 48: brief.ipynb read its "params.yaml" and "reports" from notebooks/, where JupyterLab starts its kernel:
    the cover could not be rendered and no study was found. Relative paths are the project's now."""
    out = tmp_path / "executed.ipynb"
    papermill.execute_notebook(jupytext.read(REPO / "notebooks" / "brief.py"), str(out), cwd=str(REPO / "notebooks"),
                               kernel_name="python3", progress_bar=False)
    errors, text = notebook_outputs(json.loads(out.read_text()))
    assert not errors and "Storage performance brief" in text and "could not be rendered" not in text, text[-2000:]


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


def _project(tmp: Path) -> Path:
    for rel in ("params.yaml", "dvc.yaml", "jupytext.toml", *[f"notebooks/{study.notebook.split('/')[-1]}"
                                                                for study in STUDIES]):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp / rel)
    return tmp


def _cell(nb, index=None, tag="parameters"):
    return nb.cells[index] if index is not None else next(c for c in nb.cells if tag in c.metadata.get("tags", []))


def test_a_knob_edit_stays_in_the_ipynb_code_edits_go_into_the_py_and_drift_refreshes(tmp_path):
    """The researcher's loop without a browser: the .ipynb is made from the .py, not paired with it."""
    import nbformat

    root = _project(tmp_path)
    script, ipynb = root / "notebooks/01_preprocess.py", root / "notebooks/01_preprocess.ipynb"
    tracked = script.read_text()
    assert ipynb in notebooks.refresh(root, log=lambda m: None)
    assert "jupytext" not in nbformat.read(ipynb, as_version=4).metadata       # no pairing metadata
    nb = nbformat.read(ipynb, as_version=4)
    _cell(nb).source = _cell(nb).source.replace("'processes': [1, 2, 4]", "'processes': [1, 2]")
    run_cell = next(c for c in nb.cells if "run_study" in c.source)
    run_cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Knobs changed here …")]
    nbformat.write(nb, ipynb)
    assert notebooks.stale(root) == [] and notebooks.sync_knobs(root) == []   # a knob edit is no drift
    assert notebooks.refresh(root, log=lambda m: None) == []                        # nothing to do
    notebooks.save_code(ipynb)
    assert script.read_text() == tracked                      # the knob edit does not reach the tracked file
    # a code edit in JupyterLab: named as drift, then taken into the .py (parameters cell still params.yaml's)
    nb.cells.append(nbformat.v4.new_code_cell("runs.describe()"))
    nbformat.write(nb, ipynb)
    assert notebooks.stale(root) == [ipynb]
    notebooks.save_code(ipynb)
    assert "runs.describe()" in script.read_text() and "'processes': [1, 2, 4]," in script.read_text()
    assert notebooks.sync_knobs(root) == [] and notebooks.stale(root) == []
    # the .py moves on (a git pull): refresh brings the code, keeps the knob edit and unchanged outputs
    script.write_text(script.read_text().replace("runs.describe()", "runs.head()"))
    messages = []
    assert notebooks.refresh(root, log=messages.append) == [ipynb]
    new = nbformat.read(ipynb, as_version=4)
    assert "runs.head()" in new.cells[-1].source and "'processes': [1, 2]," in _cell(new).source
    assert next(c for c in new.cells if "run_study" in c.source).outputs[0]["text"] == "Knobs changed here …"
    kept = list((root / "notebooks" / "before-refresh").glob("*/01_preprocess.ipynb"))
    assert len(kept) == 1 and "runs.describe()" in kept[0].read_text()
    assert str(kept[0].relative_to(root)) in messages[0]
    assert [c.source for c in new.cells].count("runs.head()") == 1 and "runs.describe()" not in ipynb.read_text()
    assert script.exists()                                     # nothing tracked is ever deleted


def test_save_code_refuses_a_notebook_without_its_script(tmp_path):
    (tmp_path / "x.ipynb").write_text("{}")
    with pytest.raises(config.ParamsError, match="expected a notebook beside its tracked script"):
        notebooks.save_code(tmp_path / "x.ipynb")


def test_library_info_lines_on_the_process_stderr_are_dropped_and_the_rest_kept(capfd):
    noise = (b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
             b"I0000 00:00:1795676996.097811   14598 port.cc:153] oneDNN custom operations are on. You may see\n")
    kept = b"W0000 00:00:1795676996.1   14598 gpu.cc:1] a real warning\nour own line\n"
    with notebook.quiet_library_logs():
        os.write(2, noise + kept)
        subprocess.run(["sh", "-c", "printf 'I1126 07:00:00.000001 1 port.cc:1] child info\\nchild line\\n' >&2"],
                       check=True)
        os.write(2, b"\r 40%|####  | 4/10")       # a progress bar redrawn in place: no newline
        os.write(2, b"\r 50%|#####  | 5/10\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "absl" not in err and "oneDNN" not in err and "child info" not in err
    assert "a real warning" in err and "our own line" in err and "child line" in err and err.endswith("after\n")
    assert "\r 40%|####  | 4/10\r 50%" in err                              # the partial line passed whole


def test_the_printed_brief_command_works_from_the_notebooks_folder(tmp_path, monkeypatch, capsys):
    root = _project(tmp_path / "project")
    run = root / "reports/runs/20261126T070000/preprocess"
    hint = notebook.brief_hint(run, "preprocess", root)
    assert "storagebrief brief --reports reports/runs/20261126T070000\n" in hint
    # issue 62: a run in the project's reports/ also gets the chosen-studies form (not one outside it, below)
    assert "each from its newest complete run: storagebrief brief --studies preprocess\n" in hint
    assert notebook.brief_hint(tmp_path / "x" / "preprocess", "preprocess", root, pipeline=False) == \
        f"A brief of this run alone: storagebrief brief --reports {tmp_path / 'x'}\n(in a terminal as it is; in a " \
        f"console or a cell: !storagebrief brief --reports {tmp_path / 'x'})"
    assert "out_dir whose last folder is 'preprocess'" in notebook.brief_hint(tmp_path / "out", "preprocess", root)
    monkeypatch.chdir(root / "notebooks")          # where JupyterLab's kernel and console start
    seen = {}
    monkeypatch.setattr("storagebrief.brief.render", lambda reports, *a, **k: seen.setdefault("r", reports) and
                        {"html": str(reports / "brief.html"), "pdf": None})
    assert cli.main(["brief", "--reports", "reports/runs/20261126T070000", "--no-pdf"]) == 2  # not there yet
    assert "no reports folder at " + str(root / "reports/runs/20261126T070000") in capsys.readouterr().err
    run.mkdir(parents=True)
    assert cli.main(["brief", "--reports", "reports/runs/20261126T070000", "--no-pdf"]) == 0
    assert seen["r"] == root / "reports/runs/20261126T070000"


def test_runs_table_shows_each_sweeps_measurements_and_says_a_repeated_explanation_once(monkeypatch):
    import pandas as pd
    from storagebrief.report import display

    shown = []
    monkeypatch.setattr(display, "show_table", lambda t, caption="", **k: shown.append(("table", t, caption)))
    monkeypatch.setattr(display, "show_md", lambda text, **k: shown.append(("md", text, "")))
    cache = "page cache dropped before every run (echo 3 > /proc/sys/vm/drop_caches, as root)"
    frame = pd.DataFrame([
        {"target": "fast", "sweep": "protocol", "honest_save_gib_per_s": 1.23456, "overhead_percent": None,
         "cache_method": cache},
        {"target": "slow", "sweep": "protocol", "honest_save_gib_per_s": 0.5, "overhead_percent": None,
         "cache_method": cache},
        {"target": "fast", "sweep": "cost", "honest_save_gib_per_s": None, "overhead_percent": 94.6,
         "cache_method": cache}])
    notebook.show_runs(frame, ["target", "sweep", "honest_save_gib_per_s", "overhead_percent", "cache_method"])
    tables = [s for s in shown if s[0] == "table"]
    assert [t[2] for t in tables] == ["2 measured runs (runs.csv), protocol sweep",
                                      "1 measured runs (runs.csv), cost sweep"]
    assert list(tables[0][1].columns) == ["target", "measured save (GiB/s)"]         # no column of dashes
    assert tables[0][1]["measured save (GiB/s)"].tolist() == ["1.23", "0.50"]
    assert list(tables[1][1].columns) == ["target", "overhead (%)", "cache method"]  # one row: said in it
    assert [s[1] for s in shown if s[0] == "md"] == [f"*cache method* (every run above): {cache}"]


TOOL_STUDIES = {"checkpoint", "emulate", "object_sweep", "stream_inference"}   # their defaults: local-s3, Kafka


def _tool_project(tmp: Path) -> Path:
    root = _project(tmp / "project")
    shutil.copytree(REPO / "params", root / "params")
    (root / "data" / "targets").mkdir(parents=True)
    return root


def test_a_notebook_run_checks_the_tools_its_targets_need_before_any_work(tmp_path, monkeypatch):
    """Issue 48: notebooks 02 and 08 stopped on the missing gateway after they had printed their results folder and
    written objects. Every study whose defaults need a tool (versitygw for local-s3, Kafka's jars) refuses as
    opened (out_dir None) with one line naming it and how to get it, before any folder or file is made."""
    from storagebrief.core import machine_fit, outdir

    root = _tool_project(tmp_path)
    monkeypatch.setenv("STORAGEBRIEF_VERSITYGW", str(tmp_path / "no-versitygw"))
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["stream_inference"]["kafka_lib"] = str(tmp_path / "no-jars")
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(outdir.OutputFolder, "create", lambda self: pytest.fail("work started before the tool check"))
    needing = set()
    params = config.load(root / "params.yaml")
    for study in STUDIES:
        try:
            machine_fit.check_tools(params, [study.name])
        except config.ParamsError:
            needing.add(study.name)
    assert needing == TOOL_STUDIES
    for name in sorted(needing):
        shown = []
        with pytest.raises(config.ParamsError) as exc:
            notebook.run_study(name, raw[name], params_file=root / "params.yaml", progress="off", show=shown.append)
        assert ("`make s3`" if name != "stream_inference" else "`make kafka`") in str(exc.value), str(exc.value)
        assert "\n" not in str(exc.value) and not any("results go to" in line for line in shown)
    assert not (root / "reports").exists() and list((root / "data").rglob("*")) == [root / "data" / "targets"]


def test_a_run_that_fails_before_its_first_row_leaves_no_empty_run_folder(tmp_path, monkeypatch):
    root = _tool_project(tmp_path)
    run_room = studies.get("kv_cache").room("run")
    monkeypatch.setattr(run_room, "prepare", lambda sweep: (_ for _ in ()).throw(config.ParamsError("refused")))
    knobs = yaml.safe_load((root / "params.yaml").read_text())["kv_cache"]
    with pytest.raises(config.ParamsError, match="refused"):
        notebook.run_study("kv_cache", knobs, targets=[{"name": "t", "path": str(tmp_path / "t")}],
                           params_file=root / "params.yaml", progress="off", show=lambda m: None)
    assert list((root / "reports").rglob("*")) == [root / "reports" / "runs"]    # no empty runs/<time>/ in it


def _edit(nb, start: str, new_source: str) -> None:
    cell = next(c for c in nb.cells if c.source.startswith(start))
    cell.source = new_source


def test_a_two_sided_edit_survives_make_notebooks_in_the_notebook_itself(tmp_path):
    """Issue 48: with edits on both sides, `make notebooks` kept the pulled .py change and dropped the user's own
    code edit (it survived only in a backup). Now: a cell only you changed stays yours, a cell only the .py changed
    takes the .py's, a cell both changed is kept twice (the .py's, then yours, marked), and the drift note names it."""
    import nbformat
    from storagebrief import notebook_merge

    root = _project(tmp_path)
    script, ipynb = root / "notebooks/08_object_sweep.py", root / "notebooks/08_object_sweep.ipynb"
    notebooks.refresh(root, log=lambda m: None)
    nb = nbformat.read(ipynb, as_version=4)
    _edit(nb, "notebook.show_runs(", 'notebook.show_runs(runs, ["target", "op", "throughput_mb_per_s"])  # mine')
    _edit(nb, "## Runs", "## Runs\nMy own note on the runs.")
    _cell(nb).source = _cell(nb).source.replace("'repeats': 2,", "'repeats': 1,")
    nbformat.write(nb, ipynb)
    text = script.read_text()            # the pull: the same cell changed otherwise, and a cell of its own
    text = text.replace('notebook.show_runs(runs, ["target", "access",', 'notebook.show_runs(runs, ["target", "op", "access",')
    text = text.replace('brief.study_section("object_sweep", runs.attrs["out_dir"])',
                        'brief.study_section("object_sweep", runs.attrs["out_dir"])  # pulled')
    script.write_text(text)
    said = []
    assert notebooks.refresh(root, log=said.append) == [ipynb]
    cells = nbformat.read(ipynb, as_version=4).cells
    sources = [c.source for c in cells]
    pulled = next(i for i, s in enumerate(sources) if s.startswith('notebook.show_runs(runs, ["target", "op", "access",'))
    mine = cells[pulled + 1]                                       # yours right below the .py's, marked
    assert mine.source.endswith("# mine") and mine.source.startswith("# kept by make notebooks")
    assert notebook_merge.TAG in mine.metadata["tags"]
    assert "## Runs\nMy own note on the runs." in sources                                # one-sided: yours
    assert any(s.endswith("# pulled") for s in sources)                                 # one-sided: the .py's
    assert "'repeats': 1," in _cell(nbformat.read(ipynb, as_version=4)).source           # your knobs
    from ipykernel.ipkernel import IPythonKernel     # what JupyterLab would add on open (the unsaved dot)
    assert nbformat.read(ipynb, as_version=4).metadata["language_info"] == IPythonKernel.language_info
    assert "changed on both sides" in said[0] and "before-refresh/" in said[0]
    assert any("kept by make notebooks" in line for line in notebooks.drift(ipynb))      # the drift note names it
    assert notebooks.refresh(root, log=said.append) == [] and len(said) == 1      # only yours differ now: left alone


def test_a_notebook_without_the_record_keeps_every_cell_of_its_own_marked(tmp_path):
    """A notebook made before the merge's record (by jupytext alone) has no base: nothing of it is dropped."""
    import nbformat

    root = _project(tmp_path)
    script, ipynb = root / "notebooks/01_preprocess.py", root / "notebooks/01_preprocess.ipynb"
    notebooks.refresh(root, log=lambda m: None)
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata.pop("storagebrief", None)
    _edit(nb, "notebook.show_runs(", "notebook.show_runs(runs, ['target'])  # mine")
    nbformat.write(nb, ipynb)
    script.write_text(script.read_text().replace("notebook.show_runs(runs, [", "notebook.show_runs(runs, ['repeat', "))
    notebooks.refresh(root, log=lambda m: None)
    sources = [c.source for c in nbformat.read(ipynb, as_version=4).cells]
    assert any(s.startswith("notebook.show_runs(runs, ['repeat', ") for s in sources)
    assert any(s.startswith("# kept by make notebooks") and s.endswith("# mine") for s in sources)


def test_make_notebooks_refuses_a_notebook_open_in_a_running_jupyter_server(tmp_path, monkeypatch):
    """Issue 48: after `make notebooks` under an open notebook, JupyterLab's next save ("File Changed … Overwrite")
    put the stale notebook back. A notebook with a session in a running server of this user is refused, unchanged."""
    import signal
    import socket
    import sys
    import time
    import urllib.request

    root = _project(tmp_path / "project")
    notebooks.refresh(root, log=lambda m: None)
    ipynb, script = root / "notebooks/01_preprocess.ipynb", root / "notebooks/01_preprocess.py"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(Path(sys.executable).parent / "jupyter"), "server", "--no-browser", "--allow-root",
                               "--ip=127.0.0.1", f"--port={port}", "--IdentityProvider.token=t",
                               f"--ServerApp.root_dir={root}"], env={**os.environ}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        api = f"http://127.0.0.1:{port}/api/sessions"
        body = json.dumps({"path": "notebooks/01_preprocess.ipynb", "type": "notebook", "name": "",
                           "kernel": {"name": "python3"}}).encode()
        for _ in range(120):
            try:
                urllib.request.urlopen(urllib.request.Request(api, data=body, method="POST", headers={
                    "Authorization": "token t", "Content-Type": "application/json"}), timeout=30)
                break
            except OSError:
                time.sleep(0.5)
        script.write_text(script.read_text().replace("notebook.show_runs(runs, [", "notebook.show_runs(runs, ['x', "))
        before = ipynb.read_bytes()
        with pytest.raises(notebooks.NotebookOpen, match="01_preprocess.ipynb .*open in JupyterLab.*Close and Shut Down"):
            notebooks.refresh(root, log=lambda m: None)
        assert ipynb.read_bytes() == before and not (root / "notebooks" / "before-refresh").exists()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    assert notebooks.refresh(root, log=lambda m: None) == [ipynb]                    # closed: refreshed


def test_a_one_key_change_in_a_nested_group_names_that_key_once():
    """Issue 48: changing one key of the KV-cache study's nested `workloads` printed the whole dict twice."""
    import copy
    section = yaml.safe_load((REPO / "params.yaml").read_text())["kv_cache"]
    group = next(k for k, v in section.items() if isinstance(v, dict) and any(isinstance(x, dict) for x in v.values()))
    inner = next(k for k, v in section[group].items() if isinstance(v, dict))
    leaf, old = next(iter(section[group][inner].items()))
    knobs = copy.deepcopy(section)
    knobs[group][inner][leaf] = "changed"
    said = notebook._describe_changes("kv_cache", notebook._changes("kv_cache", knobs, section), section, False,
                                      Path("params.yaml"))
    assert said == f"Knobs changed here over params.yaml: {group}.{inner}.{leaf} = 'changed' (params.yaml: {old!r})"


def test_a_notebook_that_is_not_json_is_one_line_naming_it(tmp_path):
    """Issue 57 (minor): a cut-short .ipynb made `storagebrief notebooks` end in nbformat's message with no file named,
    and other readers in "a bug"; now one line naming the file and the way back, the file's own text escaped."""
    nb = tmp_path / "01_x.ipynb"
    nb.write_text('{"cells": [\x1b[31m')
    with pytest.raises(config.ParamsError) as err:
        notebooks.read_ipynb(nb)
    said = str(err.value)
    assert str(nb) in said and "make notebooks" in said and "\n" not in said and "\x1b" not in said


def _results(d: Path, study: str, complete: bool, finished: str) -> None:
    d.mkdir(parents=True)
    (d / "runs.csv").write_text("study,target\n")
    (d / "status.json").write_text(json.dumps({"study": study, "complete": complete, "finished_at": finished}))


def test_start_here_lists_every_study_and_the_brief_command_of_those_with_results(tmp_path, monkeypatch):
    """notebooks/00_start_here (issue 62): each study with its notebook and command, its newest complete results
    (the pipeline's or a run's), and `storagebrief brief --studies` of exactly the studies that have them."""
    from storagebrief.report import display
    said = []
    monkeypatch.setattr(display, "show_md", said.append)
    monkeypatch.setattr(display, "show_table", lambda *a, **k: None)
    reports = tmp_path / "reports"
    _results(reports / "kv_cache", "kv_cache", True, "2026-12-01T10:00:00+00:00")
    _results(reports / "runs" / "20261207-100000" / "vector_search", "vector_search", True, "2026-12-07T10:00:00+00:00")
    _results(reports / "runs" / "20261207-110000" / "emulate", "emulate", False, "2026-12-07T11:00:00+00:00")
    table = notebook.start_here(reports)
    assert len(table) == len(STUDIES) and list(table["notebook"])[:2] == ["01_preprocess.ipynb",
                                                                          "02_emulated_training.ipynb"]
    newest = dict(zip(table["command"], table["newest complete results"]))
    assert newest["storagebrief emulate"] == "none yet"                      # cut short: not complete results
    assert "20261207-100000/vector_search (run 20261207-100000, 2026-12-07 10:00 UTC)" in \
        newest["storagebrief vector-search"]
    assert newest["storagebrief kv-cache"].endswith("(the pipeline, 2026-12-01 10:00 UTC)")
    assert "`storagebrief brief --studies kv_cache,vector_search`" in said[-1], said
    said.clear()
    notebook.start_here(tmp_path / "empty")
    assert said[-1].startswith("No study has complete results yet"), said


@pytest.mark.e2e
def test_the_start_here_notebook_runs_as_opened_from_notebooks_folder(tmp_path):
    """As JupyterLab runs it (kernel in notebooks/): it reads the project's reports/ and says what to run."""
    out = tmp_path / "executed.ipynb"
    papermill.execute_notebook(jupytext.read(REPO / "notebooks" / "00_start_here.py"), str(out),
                               cwd=str(REPO / "notebooks"), kernel_name="python3", progress_bar=False)
    errors, text = notebook_outputs(json.loads(out.read_text()))
    assert not errors and "newest complete results" in text and "storagebrief emulate" in text, text[-2000:]
