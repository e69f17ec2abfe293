"""The registry of studies drives the CLI, params validation, the brief and DVC: they must agree."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from storagebrief import studies
from storagebrief.cli import _parser
from storagebrief.core import config
from storagebrief.core.study import ENGINE_OUTPUTS

from conftest import REPO  # noqa: E402
STUDIES = list(studies.REGISTRY.values())
ROOMS = ("params", "dataset", "run", "metrics", "brief")


def _stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def test_dvc_yaml_is_what_the_registry_implies():
    """dvc.yaml is generated (storagebrief dvc-stages --write): a new study needs no hand-written stage."""
    from storagebrief import dvcstages
    assert (REPO / "dvc.yaml").read_text() == dvcstages.render(), "run: storagebrief dvc-stages --write"


def test_dvc_yaml_has_exactly_the_registered_studies_plus_brief():
    assert set(_stages()) == {s.name for s in STUDIES} | {"brief"}


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_stage_matches_registry(study):
    st = _stages()[study.name]
    assert study.notebook in st["cmd"] and f"-p out_dir {study.reports_dir}" in st["cmd"]
    deps = set(st["deps"])
    # what the stage runs imports: the study, core, formats, report (headlines -> metrics.json) and the
    # notebooks' front door; a change to any of them must re-run the stage
    assert {study.notebook, study.source_dir, "lib/storagebrief/core", "lib/storagebrief/formats",
            "lib/storagebrief/report", "lib/storagebrief/kit", "lib/storagebrief/notebook.py",
            "lib/storagebrief/studies/__init__.py", *study.upstream} <= deps
    assert study.name in st["params"]
    assert [o for o in st["outs"] if isinstance(o, str)] == [f"{study.reports_dir}/{o}" for o in study.stage_outputs]
    assert [next(iter(m)) for m in st["metrics"]] == [f"{study.reports_dir}/metrics.json"]
    assert (REPO / study.notebook).exists() and (REPO / study.source_dir).is_dir()
    # the brief stage reads what the brief section reads, and only declared outputs
    brief = set(_stages()["brief"]["deps"])
    for f in study.brief_inputs:
        assert f in study.outputs and f"{study.reports_dir}/{f}" in brief
    # the engine's block-level characterization of every study feeds the brief's characterization section
    for f in ENGINE_OUTPUTS:
        assert f"{study.reports_dir}/{f}" in brief, f"brief stage lacks {study.reports_dir}/{f}"


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_every_study_has_the_same_rooms(study):
    for room in ROOMS:
        assert (REPO / study.source_dir / f"{room}.py").exists(), f"{study.name} lacks {room}.py"
    run = study.room("run")
    for hook in ("prepare", "plan", "run_id", "run_one"):
        assert callable(getattr(run, hook, None)), f"{study.name}.run lacks {hook}()"
    assert callable(study.room("metrics").headlines) and callable(study.room("brief").section)
    assert issubclass(study.params_model(), config.Strict)


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_studies_import_core_formats_report_never_each_other(study):
    others = {s.name for s in STUDIES} - {study.name}
    for f in (REPO / study.source_dir).rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
                parts = mod.split(".")
                assert not (node.level >= 2 and parts[0] in others), f"{f} imports study {mod}"
                assert not (mod.startswith("storagebrief.studies.") and parts[2] in others), f"{f} imports {mod}"


def test_cli_commands_and_params_sections_come_from_the_registry():
    sub = next(a for a in _parser()._actions if a.dest == "command")
    assert {s.command for s in STUDIES} <= set(sub.choices)
    assert set(config.STUDY_SECTIONS) == {s.name for s in STUDIES}
    assert studies.get("train-resnet50") is studies.get("train_resnet50")
    with pytest.raises(KeyError, match="registered"):
        studies.get("nope")


def _cross_study_reads(study) -> list[tuple[str, str]]:
    """(where, reports/<other>/<file>) for every `... / "<other study>" / "<file>"` in the study's package."""
    others = {s.name for s in STUDIES} - {study.name}
    out = []
    for path in sorted((REPO / study.source_dir).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                    and isinstance(node.left, ast.BinOp) and isinstance(node.left.right, ast.Constant)
                    and node.left.right.value in others):
                out.append((f"{path.name}:{node.lineno}", f"reports/{node.left.right.value}/{node.right.value}"))
    return out


def test_every_cross_study_read_is_a_declared_dependency():
    """A study that reads another study's output declares it (Study.upstream, a dep of its DVC stage), so DVC runs
    that stage first and re-runs this one when it changes."""
    found = {s.name: _cross_study_reads(s) for s in STUDIES}
    assert "reports/transfer_sweep/points.csv" in [d for _, d in found["object_sweep"]]     # the rule sees it
    bad = [f"{name}: {where} reads {dep}" for name, reads in found.items() for where, dep in reads
           if dep not in studies.REGISTRY[name].upstream]
    assert not bad, bad
