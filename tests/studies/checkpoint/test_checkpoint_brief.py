"""The checkpoint brief renders every valid result (issue 36): framework sweep off (before: AttributeError
'framework_scenario', "could not be rendered ... a bug"), cost sweep off, some or all runs failed, side files
missing; and it says what failed and which files are missing instead of "cost off" / "scenarios is empty"."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config
from storagebrief.report import display
from storagebrief.studies.checkpoint import brief
from conftest import REPO

STUDY = studies.get("checkpoint")
SMALL = {"models": ["llama3-8b"], "scale": 65536, "saves": 2, "restores": 1, "pause_s": 0.0, "retain": 1,
         "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 1, "repeats": 1,
         "cost": {"modes": []}}      # framework: off by default (the model's default)


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ck")
    params = config.validate({"targets": [{"name": "t", "path": str(tmp / "t")}],
                              "run": {"trace": False, "cold_cache": False}, "checkpoint": SMALL}, root=REPO)
    STUDY.run(params, tmp / "out", log=lambda *_: None, progress="off")
    return tmp / "out"


@pytest.fixture
def shown(monkeypatch):
    said: list[str] = []
    for name in ("show_md", "show_table", "analysis", "show_figure"):
        monkeypatch.setattr(brief, name, lambda *a, **k: said.append(" ".join(str(x) for x in a)))
    monkeypatch.setattr(brief.framework_brief, "show_md", lambda *a, **k: said.append(str(a[0])))
    return said


def _render(folder: Path, frame: pd.DataFrame) -> None:
    brief.section(folder, frame, ["t"])
    brief.trace_workloads(frame, ["t"])
    STUDY.answers(folder, frame, ["t"])
    STUDY.headlines(frame, ["t"])


@pytest.mark.slow
def test_framework_and_cost_sweeps_off_render(result, shown):
    frame = pd.read_csv(result / "runs.csv")
    assert "framework_scenario" not in frame
    _render(result, frame)
    text = " ".join(shown)
    assert "the framework sweep did not run (checkpoint.framework.scenarios is empty)" in text
    assert "checkpoint.cost off" in text


def test_every_run_failed_says_so_not_sweep_off(result, shown, tmp_path):
    """Cost and framework sweeps on, every run of each failed: before, "cost off" and "scenarios is empty"."""
    folder = tmp_path / "r"
    shutil.copytree(result, folder)
    study = json.loads((folder / "study.json").read_text())
    study["cost"]["modes"], study["framework"]["scenarios"] = ["none", "sync"], ["default"]
    (folder / "study.json").write_text(json.dumps(study))
    frame = pd.read_csv(folder / "runs.csv")
    frame = pd.concat([frame, frame.assign(sweep="cost", run_id="c"), frame.assign(sweep="framework", run_id="f")])
    frame["status"], frame["failure_reason"] = "failed", "target full mid-write: No space left on device"
    frame.to_csv(folder / "runs.csv", index=False)
    _render(folder, frame)
    text = " ".join(shown)
    assert "3 of 3 runs failed" in text and "No space left on device" in text
    assert "every cost run failed" in text and "every framework run failed" in text
    assert "did not run" not in text and "No protocol run measured" in text


@pytest.mark.parametrize("missing", ["checkpoints.csv", "latency.csv", "study.json", "ranks.csv"])
def test_a_missing_side_file_is_named(result, shown, tmp_path, missing):
    folder = tmp_path / "r"
    shutil.copytree(result, folder)
    (folder / missing).unlink()
    _render(folder, pd.read_csv(folder / "runs.csv"))
    assert any(f"missing: {missing}" in s for s in shown), shown
