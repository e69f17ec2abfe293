"""End to end: `dvc repro` on a tiny profile in a copy of the repo, then check the brief."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief.report import formatting

from conftest import REPO  # noqa: E402
# Tiny values per study section: the chain runs in about a minute or two.
TINY = {
    "preprocess": {"image_count": 6, "image_counts": [3], "processes": [1, 2], "image_width": 640,
                   "image_height": 480, "repeats": 2, "resize_width": 64, "resize_height": 64},
    "emulate": {"accelerators": [1, 2], "repeats": 1, "epochs": 1, "num_files": 200, "memory_limit_mib": 16},
    "train_resnet50": {"dataset": "generated", "dataset_images": 48, "record_kib": 64, "batch_size": 8,
                       "memory_limits": ["none", "2.5:1"], "parallel_models": [1], "parallel_memory": "none",
                       "ingest_mb_per_s": 0,
                       "checkpoint_every_steps": 0},
    "transfer_sweep": {"block_sizes": ["4k", "1m"], "queue_depths": [1, 4], "repeats": 2, "file_mib": 16,
                       "runtime_s": 0.3, "ramp_time_s": 0.05,
                       "busy": {"peak_seconds": 0.5, "calibrate_seconds": 0.5, "settle_s": 0.1}},
    "stream_inference": {"videos": ["144p@12"], "duration_s": 2, "streams": [1], "topics": [1], "partitions": [2],
                         "replication_factors": [3], "broker_heap_mib": 256, "drain_timeout_s": 15,
                         "input_size": 32, "batch_size": 8},
    "checkpoint": {"scale": 65536, "saves": 2, "restores": 2, "pause_s": 0.05, "write_block_mib": 1,
                   "read_block_mib": 1, "readers_per_rank": 2,
                   "cost": {"modes": ["none", "sync", "async"], "intervals_steps": [2], "steps": 6,
                            "compute_s": 0.02, "files": 2},
                   # the framework sweep: every scenario once, one TensorFlow job, a tiny BERT
                   "framework": {"scenarios": ["default", "every", "limited", "ingest"], "steps": 4,
                                 "every_steps": 1, "default_every_steps": 2, "layers": 1, "hidden": 32, "heads": 2,
                                 "ffn": 64, "seq_len": 16, "vocab": 512, "predictions": 4, "batch_size": 2,
                                 "memory_headroom_mib": 96, "ingest_mb_per_s": 5}},
}
# Keys over which each study matches configurations between targets.
MATCH_KEYS = {"preprocess": ["sweep", "processes", "image_count"], "emulate": ["workload", "accelerators"],
              "train_resnet50": ["sweep", "models", "memory_setting", "ingest_target_mb_per_s",
                                 "checkpoint_every_steps"],
              "transfer_sweep": ["rw", "block_size_bytes", "queue_depth"],
              "stream_inference": ["streams", "video", "topics", "partitions", "replication_factor"],
              "checkpoint": ["model", "mode", "scale"]}
# The checkpoint study's cost sweep (its own rows) matches on the mode of saving and the interval.
CHECKPOINT_COST_KEYS = ["save_mode", "interval_steps"]


def _copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dst / f)


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
def test_dvc_chain_renders_brief_with_recomputable_headlines(tmp_path):
    work = tmp_path / "repo"
    _copy_repo(work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (tmp_path / "t").mkdir()   # storagebrief creates only the last component of a target path
    params["targets"][0]["path"] = str(tmp_path / "t" / "local")
    params["targets"][1]["path"] = str(tmp_path / "t" / "hdd")
    params["run"]["monitor_interval_s"] = 0.1
    for section, values in TINY.items():
        params[section].update(values)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = lambda *cmd: subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        assert run(*cmd).returncode == 0
    res = run("dvc", "repro")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    html = (work / "reports" / "brief.html").read_text()
    pdf = (work / "reports" / "brief.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    if shutil.which("pdfinfo"):
        info = subprocess.run(["pdfinfo", str(work / "reports" / "brief.pdf")], capture_output=True, text=True).stdout
        assert int(re.search(r"Pages:\s+(\d+)", info).group(1)) >= 3
    for heading in ("Test results snapshot", "Preprocessing ingest", "Emulated-accelerator training",
                    "ResNet50 training", "Transfer size", "Streaming inference", "Checkpointing",
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
    assert {s for s, _, _ in cards} == {"preprocess", "emulate", "train_resnet50", "transfer_sweep",
                                        "stream_inference", "checkpoint"}
    better_of = {(h["study"], h["id"]): h["better"] for h in headlines}
    for study, hid, value in cards:
        runs = pd.read_csv(work / "reports" / study / "runs.csv")
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
        elif study == "checkpoint":   # the save/restore protocol's rows
            expected = _recompute(runs[runs.sweep == "protocol"], MATCH_KEYS[study], metric, better_of[(study, hid)],
                                  "local", "hdd-emulated")
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
    assert len(cards) == min(8, len([h for h in headlines if h["delta_percent"] is not None]))
    assert {h["id"] for h in headlines if h["study"] == "train_resnet50" and "|" in h["id"]} == {
        f"{m}:{t}|2.5:1_vs_none" for m in ("job_read_bytes", "training_time_s") for t in ("local", "hdd-emulated")}
    for metric in ("input_mb_per_s", "completion_time_s"):
        assert any(h["id"].startswith(metric) for h in headlines if h["study"] == "preprocess")
    assert "Appendix C" in html
    for h in headlines:                                  # pandas escapes &, < and > in table cells
        assert h["label"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in html, h["label"]
    # page 1's answers: accelerators supported for every target (emulated, and fio's forecast beside)
    assert "The answers" in html and html.count("Accelerators supported, emulated") >= 2
    assert html.count("Checkpoint interval for ≤ 5 % overhead, llama3-") >= 2
    # every configuration x target x repeat ran and wrote its row
    assert len(pd.read_csv(work / "reports" / "preprocess" / "runs.csv")) == (2 + 1) * 2 * 2
    assert len(pd.read_csv(work / "reports" / "emulate" / "runs.csv")) == 2 * 2
    train = pd.read_csv(work / "reports" / "train_resnet50" / "runs.csv")
    assert len(train) == 4 and (train.status == "ok").all()  # K=1 reuses the memory runs
    capped = train[train.memory_setting == "2.5:1"]
    assert (capped.page_cache_cap_bytes == (capped.dataset_bytes * 0.4).astype(int)).all()
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
