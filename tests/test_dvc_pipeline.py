"""DVC re-runs what a change touches: the stages generated from the registry declare what they import."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import tracked_copy

DVC = [sys.executable, "-m", "dvc"]


def _dvc(repo: Path, *args: str) -> str:
    out = subprocess.run([*DVC, *args], cwd=repo, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def _placeholder_outs(repo: Path) -> list[str]:
    """Every stage's outs made to exist (a file, or a folder holding one), so `dvc commit` can record
    the pipeline as run without running it."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    for st in stages.values():
        for out in [*st.get("outs", []), *st.get("metrics", [])]:
            path = repo / (out if isinstance(out, str) else next(iter(out)))
            if path.suffix:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}\n" if path.suffix == ".json" else "x\n")
            else:
                path.mkdir(parents=True, exist_ok=True)
                (path / "placeholder").write_text("x\n")
    return list(stages)


@pytest.mark.e2e
def test_a_change_to_report_headlines_reruns_every_study_stage_and_the_brief(tmp_path):
    repo = tracked_copy(tmp_path / "repo")
    stages = _placeholder_outs(repo)
    _dvc(repo, "commit", "-f", "-q")                       # dvc.lock: every stage as if just run
    assert json.loads(_dvc(repo, "status", "--json") or "{}") == {}, "after commit nothing should be stale"
    with (repo / "lib/storagebrief/report/headlines.py").open("a") as fh:
        fh.write("\n# a change to the headline arithmetic\n")
    status = json.loads(_dvc(repo, "status", "--json"))
    stale = {name for name, changes in status.items()
             if any("lib/storagebrief/report" in c.get("changed deps", {}) for c in changes if isinstance(c, dict))}
    assert stale == set(stages), f"stages DVC would not re-run: {sorted(set(stages) - stale)}"


def test_a_stage_that_measures_s3_targets_declares_the_gateways_log_folder():
    """`dvc repro -f` after a quick study: DVC removed the emulate stage's declared outs but not logs/ (the local
    gateway's log), and the rerun refused reports/emulate as "holding files no emulate run wrote"."""
    from storagebrief import studies
    from conftest import REPO
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for study in studies.REGISTRY.values():
        if study.object_targets:
            assert "logs" in study.stage_outputs, study.name
            assert f"reports/{study.name}/logs" in stages[study.name]["outs"], study.name
