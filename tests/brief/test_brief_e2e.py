"""End to end: `dvc repro` on a tiny profile in a copy of the repo, then check the brief."""
import html as html_mod
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from storagebrief.core import reruns
from storagebrief.kit.client_check import unchecked
from storagebrief.report import formatting

from conftest import TINY, notebook_outputs  # noqa: E402
from storagebrief.studies.emulate.limits import measured as emulate_rows  # noqa: E402
# Keys over which each study matches configurations between targets.
MATCH_KEYS = {"preprocess": ["sweep", "processes", "image_count"], "emulate": ["workload", "accelerators"],
              "train_resnet50": ["sweep", "models", "memory_setting", "ingest_target_mb_per_s",
                                 "checkpoint_every_steps"],
              "transfer_sweep": ["rw", "block_size_bytes", "queue_depth"],
              "stream_inference": ["streams", "video", "topics", "partitions", "replication_factor"],
              "checkpoint": ["model", "mode", "scale"], "kv_cache": ["workload"],
              "object_sweep": ["load", "op", "object_bytes", "concurrency"],
              "vector_search": ["data", "search_list", "beam_width", "threads"]}
# The checkpoint study's cost sweep (its own rows) matches on the mode of saving and the interval.
CHECKPOINT_COST_KEYS = ["save_mode", "interval_steps"]


def _recompute(runs: pd.DataFrame, keys: list[str], metric: str, better: str, ref: str, other: str) -> float:
    """Independent arithmetic: mean per configuration, then the best relative difference."""
    best = None
    if "status" in runs:
        runs = runs[runs.status == "ok"]
    for _, g in runs.groupby(keys, dropna=False):
        a, b = g[g.target == ref][metric], g[g.target == other][metric]
        if a.empty or b.empty:
            continue
        d = (a.mean() / b.mean() - 1) * 100 if better == "higher" else (1 - a.mean() / b.mean()) * 100
        best = d if best is None else max(best, d)
    return round(best, 1)


@pytest.mark.slow
def test_dvc_chain_renders_brief_with_recomputable_headlines(tiny_chain):
    work, res, run = tiny_chain.work, tiny_chain.res, tiny_chain.run
    html = (work / "reports" / "brief.html").read_text()
    pdf = (work / "reports" / "brief.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(work / "reports" / "brief.pdf")], capture_output=True, text=True).stdout
        assert int(re.search(r"Pages:\s+(\d+)", info).group(1)) >= 3
    for heading in ("Test results snapshot", "Preprocessing ingest", "Emulated-accelerator training",
                    "ResNet50 training", "Transfer size", "Streaming inference", "Checkpointing", "KV-cache offload",
                    "Block-level I/O characterization",
                    "Appendix A", "Appendix B"):
        assert heading in html, heading
    assert "def " not in html and "import " not in html  # code is hidden
    # the commit is the code's: dvc.lock rewritten by the run is listed apart, not called "dirty"
    assert "-dirty" not in html and "Rewritten by this run" in html and "dvc.lock" in html
    assert "[preprocess] run 1/12" in res.stderr + res.stdout        # progress, one line per run

    import json
    headlines = json.loads((work / "reports" / "headlines.json").read_text())
    cards = []
    for tag in re.findall(r'<div class="card"[^>]*>', html):  # nbconvert may reorder attributes
        attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', tag))
        cards.append((attrs["data-study"], attrs["data-headline"], attrs["data-value"]))
    # nine cards (SNAPSHOT_CARDS) and nine studies: every study with a comparison has its card
    every = {"preprocess", "emulate", "train_resnet50", "transfer_sweep", "stream_inference", "checkpoint",
             "kv_cache", "object_sweep", "vector_search"}
    compared = {h["study"] for h in headlines if h.get("delta_percent") is not None}
    assert {s for s, _, _ in cards} <= every and {s for s, _, _ in cards} == compared and len(compared) >= 8
    assert "at least one per study" in html
    better_of = {(h["study"], h["id"]): h["better"] for h in headlines}
    for study, hid, value in cards:
        runs = reruns.kept(pd.read_csv(work / "reports" / study / "runs.csv"))   # as the brief reads them
        if study == "emulate":     # the sweep's scored rows: the client check's confined re-runs answer another question
            runs = emulate_rows(runs)
        runs = unchecked(runs)     # checkpoint, kv_cache: their client checks' re-runs too (params.yaml turns them on)
        metric, pair = hid.split(":", 1)
        if study == "transfer_sweep" and "|" in pair:   # idle vs busy on one target
            target = pair.removesuffix("_vs_busy").split("|")[0]
            runs = runs[runs.target == target].assign(target=lambda f: f.load)
            expected = _recompute(runs, MATCH_KEYS[study], metric, better_of[(study, hid)], "idle", "busy")
        elif study == "transfer_sweep":   # targets compared on the busy system
            expected = _recompute(runs[runs.load == "busy"], MATCH_KEYS[study], metric, better_of[(study, hid)],
                                  "local", "hdd-emulated")
        elif study == "checkpoint" and metric == "overhead_percent":   # the cost sweep's rows
            cost = runs[(runs.sweep == "cost") & (runs.save_mode != "none")]
            expected = _recompute(cost, CHECKPOINT_COST_KEYS, metric, better_of[(study, hid)], "local", "hdd-emulated")
        elif study == "checkpoint":   # the save/restore protocol's rows, between the headline's two targets
            ref, other = pair.split("_vs_")
            expected = _recompute(runs[runs.sweep == "protocol"], MATCH_KEYS[study], metric, better_of[(study, hid)],
                                  ref, other)
        elif study == "object_sweep":   # directory vs S3 on one device
            ref, other = pair.split("_vs_")
            expected = _recompute(runs, MATCH_KEYS[study], metric, better_of[(study, hid)], ref, other)
        elif "|" in pair:   # a memory limit vs none on one target (training)
            target, setting = pair.removesuffix("_vs_none").split("|")
            runs = runs[(runs.sweep == "memory") & (runs.target == target)].assign(target=lambda f: f.memory_setting)
            expected = _recompute(runs, ["models"], metric, better_of[(study, hid)], setting, "none")
        else:
            expected = _recompute(runs, MATCH_KEYS[study], metric, better_of[(study, hid)], "local", "hdd-emulated")
        assert float(value) == expected, (study, hid)
        text = {(h["study"], h["id"]): h["text"] for h in headlines}[(study, hid)]
        assert text.replace("&", "&amp;") in html, (study, hid, text)      # the card shows headlines.json's text
        v, better = float(value), better_of[(study, hid)]
        f = formatting.factor(v, better) if v > 0 else 0
        if v > 0 and "|" not in hid and abs(f - formatting.RATIO_FROM) > 0.01:   # not at the rounding edge
            big = f >= formatting.RATIO_FROM              # as report/formatting.py writes it: ×N from 2× on, else %
            assert ("×" in text) if big else (f"{v:.1f}%" in text), (study, hid, v, text)
    # the snapshot shows the largest effects, at least one per study; headlines.json and Appendix C all of them
    assert len(cards) == min(9, len([h for h in headlines if h["delta_percent"] is not None]))   # SNAPSHOT_CARDS
    assert {h["id"] for h in headlines if h["study"] == "train_resnet50" and "|" in h["id"]} == {
        f"{m}:{t}|2.5:1_vs_none" for m in ("job_read_bytes", "training_time_s") for t in ("local", "hdd-emulated")}
    for metric in ("input_mb_per_s", "completion_time_s"):
        assert any(h["id"].startswith(metric) for h in headlines if h["study"] == "preprocess")
    assert "Appendix C" in html
    text = re.sub(r"<[^>]+>", "", html)   # a table cell keeps a hyphenated word whole in a span
    for h in headlines:                                  # pandas escapes &, < and > in table cells
        assert h["label"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in text, h["label"]
    # page 1's answers: one accelerators-supported row per target (emulated, fio's forecast reconciled beside)
    assert "The answers" in html and html.count("Accelerators supported (") >= 2 and "fio forecast" in html
    # every "a × b = c" the brief prints is computed from the numbers it prints
    assert formatting.products_that_do_not_add_up(html_mod.unescape(text)) == []
    assert html.count("beyond how many tokens does reloading from storage beat recomputing") >= 2   # kv_cache
    assert text.count("Checkpointing llama3-") >= 2 and "hosts for hourly saves" in text
    # every configuration x target x repeat ran and wrote its row
    assert len(pd.read_csv(work / "reports" / "preprocess" / "runs.csv")) == (2 + 1) * 2 * 2
    emulate = pd.read_csv(work / "reports" / "emulate" / "runs.csv")        # 2 counts x 3 targets (local-s3 too)
    assert len(emulate_rows(emulate)) == 2 * 3 and len(emulate) > 2 * 3      # + the client check's re-run
    if len(os.sched_getaffinity(0)) >= 2:         # the client checks (one CPU: skipped, with a note)
        ck = pd.read_csv(work / "reports" / "checkpoint" / "runs.csv")   # one per directory target, not S3
        assert sorted(ck[ck.client_check == "half CPUs"].target) == ["hdd-emulated", "local"]
        # kv_cache: the first target; tiny runs 2 repeats, so no unconfined re-run beside the confined one
        kv = pd.read_csv(work / "reports" / "kv_cache" / "runs.csv")
        assert (kv.client_check == "half CPUs").sum() == 1 and "all CPUs" not in set(kv.client_check)
        assert set(kv.target[kv.client_check.notna()]) == {"local"}
    train = pd.read_csv(work / "reports" / "train_resnet50" / "runs.csv")
    assert len(train) == 4 and (train.status == "ok").all()  # K=1 reuses the memory runs
    capped = train[train.memory_setting == "2.5:1"]
    assert (capped.page_cache_cap_bytes == (capped.dataset_bytes * 0.4).astype(int)).all()
    # one job trains all four runs: each takes over the job the run before it ended with, on either target
    # (reuse.py), re-armed in well under the 60 s after which it would be replaced (with a note)
    assert train.job_reused_from.iloc[1:].tolist() == train.run_id.iloc[:-1].tolist()
    assert (train.startup_s_max.iloc[1:] < 5).all()
    notes = json.loads((work / "reports" / "train_resnet50" / "notes.json").read_text()).get("warnings", [])
    assert not [n for n in notes if "did not re-arm" in n], notes
    assert (work / "reports" / "train_resnet50" / "timeseries" / f"{capped.run_id.iloc[0]}-memory.csv").exists()
    stream = pd.read_csv(work / "reports" / "stream_inference" / "runs.csv")
    assert len(stream) == 2 and (stream.status == "ok").all() and (stream.frames_dropped == 0).all()
    # every study's runs were characterized at the block level, one row per run
    for study in TINY:
        runs = pd.read_csv(work / "reports" / study / "runs.csv")
        ch = pd.read_csv(work / "reports" / study / "characterization.csv")
        assert set(ch.run_id) == set(runs.run_id), study
        if os.geteuid() == 0:
            assert (ch.source == "tracefs").all(), study

    # nothing changed -> nothing reruns
    before = (work / "reports" / "brief.html").stat().st_mtime
    t0 = time.perf_counter()
    res = run("dvc", "repro")
    elapsed = time.perf_counter() - t0
    assert res.returncode == 0
    assert (work / "reports" / "brief.html").stat().st_mtime == before
    print(f"no-op dvc repro: {elapsed:.2f} s")


@pytest.mark.slow
def test_every_studys_notebook_ran_in_the_chain_and_shows_its_runs(tiny_chain):
    """Each stage's executed notebook (papermill, params.yaml as it is, both kinds of target): no error, the knobs
    named as params.yaml's, the runs table and the study's results shown, the run complete, and no tracked
    notebook or knob file changed. (The kernel started in notebooks/, as JupyterLab starts it, is
    tests/test_notebooks.py's; these runs are the chain's own, not a second run of every study.)"""
    from storagebrief import studies

    work = tiny_chain.work
    for study in studies.REGISTRY.values():
        nb = json.loads((work / "reports" / study.name / "notebook.ipynb").read_text())
        errors, text = notebook_outputs(nb)
        assert not errors, study.name
        for said in ("Knobs: as in", "measured runs (runs.csv)", "results go to", "runs complete"):
            assert said in text, (study.name, said)
        status = json.loads((work / "reports" / study.name / "status.json").read_text())
        assert status["complete"] is True and status["runs_done"] > 0, study.name
    changed = tiny_chain.run("git", "status", "--porcelain", "--", "notebooks", "params.yaml", "params", "dvc.yaml")
    assert changed.returncode == 0 and changed.stdout == ""


@pytest.mark.slow
def test_every_studys_results_json_is_strict_json(tiny_chain):
    """Issue 57: results are valid JSON in every study, not only vector_search: each JSON file a study wrote in its
    results folder (status, notes, study, summaries, inventory, …; what other tools wrote below it not counted)
    parses with NaN, Infinity and -Infinity refused."""
    from storagebrief import studies

    def refuse(constant):
        raise ValueError(f"holds {constant}")

    seen = 0
    for study in studies.REGISTRY.values():
        for f in sorted((tiny_chain.work / "reports" / study.name).glob("*.json")):
            try:
                json.loads(f.read_text(), parse_constant=refuse)
            except ValueError as exc:
                pytest.fail(f"{f.relative_to(tiny_chain.work)} is not strict JSON: {exc}")
            seen += 1
    assert seen >= 2 * len(studies.REGISTRY)            # status.json and notes.json of each at least


@pytest.mark.slow
def test_the_chains_brief_recorded_its_page_one_values_for_the_next_study(tiny_chain):
    """Issues 48, 61: each stage's run kept the values behind its page-1 ranges in the project's history
    (reports/history/answers.csv), one study of each measured answer, all from the pipeline (DVC_STAGE), so the
    next study of the same parameters on this machine shows the range over both; the brief's render and a
    re-render of the same results add nothing."""
    from storagebrief.brief.pageone import page_one_rows, record_history
    from storagebrief.kit import history

    reports = tiny_chain.work / "reports"
    assert history.location(reports) == tiny_chain.work / "reports" / "history" / "answers.csv"
    rows = pd.read_csv(history.location(reports))
    assert set(rows.entry) == {"pipeline"} and not (reports / history.LEGACY).exists()
    measured = {(a["study"], m, a["target"]) for a in page_one_rows(reports) for m in a.get("measures") or {}}
    assert set(zip(rows.study, rows.measure, rows.target)) == measured
    assert {"preprocess", "train_resnet50", "stream_inference", "checkpoint", "object_sweep"} <= set(rows.study)
    assert rows.groupby("study").run_id.nunique().eq(1).all() and rows.value.notna().all()
    assert record_history(reports) == 0
