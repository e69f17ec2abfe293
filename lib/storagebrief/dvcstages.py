"""dvc.yaml, derived from the studies registry: one stage per study, then the brief.

`storagebrief dvc-stages` checks that dvc.yaml is what the registry implies, `--write` rewrites
it (a test fails when they differ). A stage's deps are what it really runs: its notebook, its
study package, the registry and the layers every study imports (core, formats, report, kit), the
notebooks' front door and the paper overlay; its outs are the study's outputs and the engine's.
So adding a study never means writing a stage by hand.
"""
from __future__ import annotations

from pathlib import Path

from . import studies

HEADER = """\
# Generated from the studies registry (lib/storagebrief/studies/__init__.py) by
# `storagebrief dvc-stages --write`; do not edit by hand: tests fail when this file and the
# registry disagree. One stage per study: papermill runs the numbered notebook (tracked as a
# Jupytext .py, converted on the fly) with `<study> None` (= params.yaml's section as it is) and
# out_dir reports/<study>; the notebook calls storagebrief (the same code as the CLI). Progress
# goes to the terminal one line per run (kernel stderr). Generated datasets live under each
# target's directory (data/targets/...), outside DVC's cache: copying GBs of synthetic data
# any run regenerates from params into the cache would double disk use.
"""

LIB = "lib/storagebrief"
# What every study stage imports besides its own package: change one and every stage re-runs
# (report/headlines.py writes metrics.json through the engine; kit holds what studies share).
SHARED_DEPS = (f"{LIB}/__init__.py", f"{LIB}/studies/__init__.py", f"{LIB}/core", f"{LIB}/formats",
               f"{LIB}/report", f"{LIB}/kit", f"{LIB}/notebook.py", "params/paper.yaml")
BRIEF_CODE = ("notebooks/brief.py", f"{LIB}/__init__.py", f"{LIB}/cli.py", f"{LIB}/brief", f"{LIB}/core", f"{LIB}/formats",
              f"{LIB}/report", f"{LIB}/kit", f"{LIB}/studies", f"{LIB}/templates/brief.css")
COMMON_PARAMS = ("scale", "targets", "profiles", "run")


def study_command(study) -> str:
    d = study.reports_dir
    return (f"mkdir -p {d} &&\n"
            f"jupytext --quiet --to ipynb --output - {study.notebook} |\n"
            f"papermill --no-progress-bar --stderr-file - - {d}/notebook.ipynb\n"
            f"-p {study.name} None -p out_dir {d} -p progress lines")


def study_deps(study) -> list[str]:
    return [study.notebook, study.source_dir, *SHARED_DEPS, *study.upstream]


def brief_deps(registry=None) -> list[str]:
    """The brief's code, then what it reads of each study: its brief inputs and the engine's
    characterization outputs."""
    from .core.study import ENGINE_OUTPUTS

    out = list(BRIEF_CODE)
    for s in (registry or studies.REGISTRY).values():
        for f in (*s.brief_inputs, *(o for o in ENGINE_OUTPUTS if o not in s.brief_inputs)):
            out.append(f"{s.reports_dir}/{f}")
    return out


def _list(key: str, items, indent: str = "    ") -> list[str]:
    return [f"{indent}{key}:", *(f"{indent}  - {i}" for i in items)]


def render(registry=None) -> str:
    """The whole dvc.yaml text."""
    reg = registry or studies.REGISTRY
    lines = [HEADER.rstrip("\n"), "stages:"]
    for s in reg.values():
        lines += [f"  {s.name}:", "    cmd: >-", *(f"      {c}" for c in study_command(s).splitlines())]
        lines += _list("deps", study_deps(s))
        lines += _list("params", [*COMMON_PARAMS, s.name])
        lines += _list("outs", [f"{s.reports_dir}/{o}" for o in s.stage_outputs])
        lines += ["    metrics:", f"      - {s.reports_dir}/metrics.json:", "          cache: false", ""]
    lines += ["  brief:", "    cmd: storagebrief brief --params params.yaml --reports reports"]
    lines += _list("deps", brief_deps(reg))
    lines += _list("params", ["scale", "targets"])
    lines += _list("outs", ["reports/brief.html", "reports/brief.pdf", "reports/brief.ipynb"])
    lines += ["      - reports/headlines.json:", "          cache: false"]
    return "\n".join(lines) + "\n"


def sync(path: str | Path | None = None, write: bool = False) -> bool:
    """True when dvc.yaml differs from the registry's (rewritten when `write`)."""
    from .core import config

    path = Path(path) if path is not None else config.project_root() / "dvc.yaml"
    want = render()
    have = path.read_text() if path.exists() else ""
    if have == want:
        return False
    if write:
        from .core.results import atomic_write_text
        atomic_write_text(path, want)
    return True
