"""A brief of the studies you choose (issue 62): `storagebrief brief --studies a,b` takes each study's newest complete
results (the pipeline's reports/<study>/ or a run's reports/runs/<time>/<study>/) and renders a brief of those only,
appendices included; a bad name or a study without complete results is one line naming --studies, before any work."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from storagebrief import cli
from storagebrief.brief import assemble, choose
from storagebrief.brief.render import relinked
from storagebrief.studies import REGISTRY
from test_brief_faults import brief, make_project, preprocess_rows, sections, stream_rows, study_rows, write_study


def _status(d: Path, complete: bool, finished: str | None, study: str = "preprocess") -> None:
    (d / "status.json").write_text(json.dumps({"schema": 1, "study": study, "complete": complete, "runs_planned": 12,
                                               "runs_done": 12 if complete else 5, "started_at": finished,
                                               "finished_at": finished, "stopped_by": None}))


def _run(reports: Path, stamp: str, complete: bool, finished: str | None, tmp: Path, study: str = "preprocess") -> Path:
    d = write_study(reports / "runs" / stamp, study, preprocess_rows() if study == "preprocess" else study_rows(study),
                    tmp)
    _status(d, complete, finished, study)
    return d


def _entry(d: Path, how: str | None) -> None:
    """The entry point the study's run recorded (core.inventory.entry_point), or none recorded."""
    inv = json.loads((d / "inventory.json").read_text())
    inv.pop("entry", None)
    (d / "inventory.json").write_text(json.dumps({**inv, **({"entry": how} if how else {})}))


def test_a_name_that_is_not_a_study_is_one_line_naming_studies_before_any_work(tmp_path, capsys):
    # the params file does not exist: the name is refused before the params (or anything else) are read
    for bad, said in (("emulate,nope", "'nope' is not a study"), ("emulate,", "an empty name")):
        assert cli.main(["brief", "--studies", bad, "--params", str(tmp_path / "none.yaml"), "--no-pdf"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--studies" in err and repr(bad) in err and said in err, err
        assert "kv_cache (kv-cache)" in err and all(k in err for k in REGISTRY), err
    assert not list(tmp_path.iterdir())
    # keys and command names alike, in the brief's (registry) order, each once
    assert choose.parse("vector-search, kv_cache,emulate,kv-cache") == \
        [k for k in REGISTRY if k in ("emulate", "kv_cache", "vector_search")]
    # brief.ipynb's parameter is named as the notebook spells it, before its reports folder is even looked at
    with pytest.raises(choose.ChoiceError) as exc:
        choose.from_notebook(tmp_path / "no-reports", "emulate,nope")
    assert str(exc.value).startswith("studies = 'emulate,nope': 'nope' is not a study; allowed (comma-separated): ")
    assert "--studies" not in str(exc.value) and "kv_cache (kv-cache)" in str(exc.value)


@pytest.mark.e2e
def test_a_bad_name_in_the_brief_notebooks_parameters_is_one_line_under_papermill(tmp_path):
    import jupytext
    import papermill
    root = make_project(tmp_path)
    with pytest.raises(papermill.PapermillExecutionError) as exc:
        papermill.execute_notebook(jupytext.read(REPO / "notebooks" / "brief.py"), str(tmp_path / "executed.ipynb"),
                                   cwd=str(root / "notebooks"), kernel_name="python3", progress_bar=False,
                                   parameters={"studies": "emulate,nope"})
    shown = [line for line in exc.value.traceback if line.strip()]
    assert len(shown) == 1 and "Traceback" not in shown[0], exc.value.traceback
    assert "storagebrief: error: studies = 'emulate,nope': 'nope' is not a study; allowed" in shown[0], shown
    assert "vector_search (vector-search)" in shown[0]
    assert not (root / "reports" / "briefs").exists() and not (root / "reports" / "brief.html").exists()


def test_a_run_folder_given_as_reports_is_that_run_and_a_top_folder_says_who_wrote_it(tmp_path):
    """Issue 62: `--reports reports/runs/<time> --studies …` labelled the run's results "the pipeline"."""
    reports = tmp_path / "reports"
    run = _run(reports, "20261203-100000", True, "2026-12-03T10:00:00+00:00", tmp_path)
    got = choose.choose(run.parent, ["preprocess"])["preprocess"]
    assert got.origin == "run 20261203-100000" and got.dir == run, got
    assert choose.summary({"preprocess": got})[0].startswith(
        f"{REGISTRY['preprocess'].title}: results of run 20261203-100000 ({run}/, finished 2026-12-03 10:00 UTC)")
    top = write_study(reports, "preprocess", preprocess_rows(), tmp_path)       # reports/preprocess/: who wrote it
    for how, origin in (("CLI", "a CLI run"), ("notebook", "a notebook run"), ("pipeline", "the pipeline"),
                        (None, "the pipeline")):                 # not recorded: results older than the record
        _entry(top, how)
        assert choose.complete_results(reports, "preprocess")[-1].origin == origin, how
    # inside a project, the terminal and Appendix B name the folder from the project's root
    (tmp_path / "params.yaml").write_text("{}")
    (tmp_path / "dvc.yaml").write_text("stages: {}")
    assert choose.shown(run) == "reports/runs/20261203-100000/preprocess"


def test_appendix_b_says_how_each_study_really_ran(tmp_path):
    """Issue 62: Appendix B said every study "ran through its DVC stage", notebook and CLI runs included."""
    reports = tmp_path / "reports"
    pre = write_study(reports, "preprocess", preprocess_rows(), tmp_path)
    stream = write_study(reports, "stream_inference", stream_rows(), tmp_path)
    for d in (pre, stream):
        _entry(d, "pipeline")
    assert assemble.how_ran(reports) == ("Each study ran through its DVC stage (`dvc repro`: papermill executes the "
                                         "numbered notebook, which calls `storagebrief`).")
    _entry(pre, "notebook")
    _entry(stream, None)
    said = assemble.how_ran(reports)
    assert said.startswith("The Preprocessing ingest study ran from its notebook") and "DVC stage" not in said, said
    assert "how the Streaming inference through Kafka study was started was not recorded" in said, said
    _entry(pre, "CLI")
    _entry(stream, "CLI")
    assert assemble.how_ran(reports) == "Each study ran from the command line (`storagebrief <study>`)."


def test_brief_out_that_is_a_symlink_a_file_or_not_ours_is_one_line_before_any_work(tmp_path, capsys):
    root = make_project(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    for out, says in ((link, "is a symlink"), (a_file, "is a file, not a folder"), (shared, "writable by its group"),
                      (Path("/proc/storagebrief-out"), "--out '/proc/storagebrief-out' lies under /proc"),
                      (tmp_path / "t" / "slow" / "storagebrief" / "out", "lies inside target 'slow'")):
        assert cli.main(["brief", "--studies", "preprocess", "--out", str(out), "--params", str(root / "params.yaml"),
                         "--no-pdf"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err and (str(out) in err or "output folder" in err), err
    assert not (root / "reports" / "briefs").exists() and not list(real.iterdir()) and not list(shared.iterdir())
    assert a_file.read_text() == "keep me" and not (tmp_path / "t" / "slow" / "storagebrief").exists()
    # a brief written elsewhere links the studies' CSV files from where it lies
    body = '<a href="#appendix-x">A</a> <a href="preprocess/runs.csv">runs.csv</a> <a href="https://x.org/a">x</a>'
    moved = relinked(body, tmp_path / "reports" / "briefs" / "preprocess", tmp_path / "out")
    assert moved == ('<a href="#appendix-x">A</a> <a href="../reports/briefs/preprocess/preprocess/runs.csv">runs.csv'
                     '</a> <a href="https://x.org/a">x</a>')


def test_the_newest_complete_results_are_chosen_and_an_unfinished_newer_run_is_passed_over(tmp_path):
    reports = tmp_path / "reports"
    pipeline = write_study(reports, "preprocess", preprocess_rows(), tmp_path)
    _status(pipeline, True, "2026-12-01T10:00:00+00:00")
    older = _run(reports, "20261202-100000", True, "2026-12-02T10:00:00+00:00", tmp_path)
    newest = _run(reports, "20261203-100000", True, "2026-12-03T10:00:00+00:00", tmp_path)
    _run(reports, "20261204-100000", False, None, tmp_path)                  # cut short, the newest folder
    _run(reports, "20261205-100000", True, "2026-12-05T10:00:00+00:00", tmp_path, "checkpoint")   # another study
    (reports / "runs" / "20261206-100000" / "preprocess").mkdir(parents=True)                     # still starting
    got = choose.choose(reports, ["preprocess"])["preprocess"]
    assert got.dir == newest and got.origin == "run 20261203-100000", got
    assert [s.dir for s in choose.complete_results(reports, "preprocess")] == [pipeline, older, newest]
    _status(pipeline, True, "2026-12-07T10:00:00+00:00")                     # the pipeline ran last: its results
    assert choose.choose(reports, ["preprocess"])["preprocess"].origin == "the pipeline"
    # the brief folder links each chosen study's folder and says where it came from
    chosen = choose.choose(reports, ["preprocess", "checkpoint"])
    folder = choose.prepare(reports, chosen)
    assert folder == reports / "briefs" / "preprocess+checkpoint"
    assert (folder / "preprocess").resolve() == pipeline.resolve() and (folder / "checkpoint").is_symlink()
    assert choose.sources(folder)["checkpoint"]["origin"] == "run 20261205-100000"
    _status(pipeline, True, "2026-12-01T10:00:00+00:00")
    again = choose.choose(reports, ["preprocess", "checkpoint"])
    assert choose.prepare(reports, again) == folder and (folder / "preprocess").resolve() == newest.resolve()


def test_a_chosen_study_without_complete_results_is_one_line_and_nothing_is_written(tmp_path, capsys):
    root = make_project(tmp_path)
    reports = root / "reports"
    _run(reports, "20261204-100000", False, None, tmp_path, "checkpoint")
    assert cli.main(["brief", "--studies", "preprocess,checkpoint", "--params", str(root / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--studies" in err and "no complete results of checkpoint" in err, err
    assert "storagebrief checkpoint" in err and not (reports / "briefs").exists()
    # a folder named after a study in the brief folder that is not our link is refused, not replaced
    (reports / "briefs" / "preprocess+stream_inference" / "preprocess").mkdir(parents=True)
    assert cli.main(["brief", "--studies", "preprocess,stream-inference", "--params", str(root / "params.yaml")]) == 2
    assert "is not a link this command made" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_two_study_brief_holds_those_studies_only_appendices_included(tmp_path):
    root = make_project(tmp_path)                  # reports/: preprocess and stream_inference (the pipeline's)
    reports = root / "reports"
    params = yaml.safe_load((root / "params.yaml").read_text())
    ours = yaml.safe_load((REPO / "params.yaml").read_text())
    params.update({k: ours[k] for k in ("stream_inference", "checkpoint")})     # a section of a study not chosen
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _status(reports / "preprocess", True, "2026-12-01T10:00:00+00:00")              # older than the run below
    write_study(reports, "checkpoint", study_rows("checkpoint"), tmp_path)            # not chosen
    chosen_run = _run(reports, "20261207-100000", True, "2026-12-07T10:00:00+00:00", tmp_path)
    _run(reports, "20261207-110000", False, None, tmp_path)                            # newer, cut short
    elsewhere = tmp_path / "elsewhere" / "brief"             # --out: made, and the brief's files go there only
    page, res = brief(root / "notebooks", "--studies", "stream-inference,preprocess", "--out", str(elsewhere))
    folder = reports / "briefs" / "preprocess+stream_inference"
    assert (elsewhere / "brief.html").is_file() and (elsewhere / "headlines.json").is_file()
    assert not (folder / "brief.html").exists() and (folder / "preprocess").resolve() == chosen_run.resolve()
    links = re.findall(r'href="([^"#][^"]*\.csv)"', page)
    assert links and all((elsewhere / html.unescape(a)).is_file() for a in links), links[:5]
    assert "results of run 20261207-100000" in res.stderr and "results of the pipeline" in res.stderr, res.stderr
    s = sections(page)
    titles = [REGISTRY[k].title for k in ("preprocess", "stream_inference")]
    assert all(t in s for t in titles), list(s)
    others = [st for k, st in REGISTRY.items() if k not in ("preprocess", "stream_inference")]
    for st in others:                                                   # no chapter, appendix, card or settings
        assert st.title not in s and f"appendix-{st.name}" not in page and f'data-study="{st.name}"' not in page
    assert "(in reports/runs/20261207-100000/preprocess/)" in page                # its appendix's CSV links say so
    details = [t for t in s if t.startswith("Appendix ") and t.endswith(": details") and "characterization" not in t]
    assert len(details) == 2, details                                   # one per chosen study
    procedure = s["Appendix B — Test procedure and parameters"]
    params = html.unescape(re.search(r"<pre class=.params html-only.>(.*?)</pre>", procedure, re.S).group(1))
    keys = set(re.findall(r"^(\w+):", params, re.M))
    assert {"preprocess", "stream_inference", "targets", "run"} <= keys and "checkpoint" not in keys, keys
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", procedure)).split())
    assert "reports/runs/20261207-100000/preprocess run 20261207-100000" in text and \
        "reports/stream_inference the pipeline" in text and "2026-12-07 10:00 UTC" in text, text[:3000]


@pytest.mark.e2e
def test_the_brief_notebook_renders_the_studies_its_parameters_cell_names(tmp_path):
    """From a notebook too: brief.ipynb's `studies = "…"`, as opened (its kernel in notebooks/)."""
    import jupytext
    import papermill
    root = make_project(tmp_path)                  # reports/: preprocess and stream_inference
    out = tmp_path / "executed.ipynb"
    papermill.execute_notebook(jupytext.read(REPO / "notebooks" / "brief.py"), str(out), cwd=str(root / "notebooks"),
                               kernel_name="python3", progress_bar=False, parameters={"studies": "stream-inference"})
    cells = json.loads(out.read_text())["cells"]
    shown = "".join("".join(o.get("data", {}).get("text/html", "")) + "".join(o.get("text", ""))
                    for c in cells for o in c.get("outputs", []))
    assert REGISTRY["stream_inference"].title in shown and REGISTRY["preprocess"].title not in shown, shown[-2000:]
    assert "could not be rendered" not in shown and "Traceback" not in shown
    assert (root / "reports" / "briefs" / "stream_inference" / "stream_inference").is_symlink()
