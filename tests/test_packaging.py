import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ]", req.strip(), 1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # environment.yml carries what `make env` installs: the dependencies and the mpi extra
    deps = {_name(d) for d in project["dependencies"] + project["optional-dependencies"]["mpi"]}
    assert re.search(r"pip install -q (--compile-bytecode )?(--python \S+ )?-e '\.\[mpi\]'", (REPO / "Makefile").read_text())
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    env_deps = {_name(d) for d in pip if not d.startswith("-e")}
    assert deps == env_deps


def test_design_card_layout_and_ci():
    for p in ("environment.yml", "notebooks", "lib", "data", "dvc.yaml", "reports", "tests", "params.yaml",
              "pyproject.toml", "Makefile", "README.md", ".ci/run", "benchmarks"):
        assert (REPO / p).exists(), p
    assert "make test" in (REPO / ".ci/run").read_text()
    assert "make test" in (REPO / "README.md").read_text() and "make study" in (REPO / "README.md").read_text()
    assert "analytics = false" in (REPO / ".dvc/config").read_text()


def test_every_stage_declares_deps_params_outs():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert "preprocess" in stages and "brief" in stages
    for name, st in stages.items():
        assert st.get("deps") and st.get("outs"), name


def test_clean_data_removes_only_storagebrief_targets(tmp_path):
    """`make clean-data` removes the target folders storagebrief used (they hold its lock file) and keeps the
    tracked data/targets/README.md and anything a user put there."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    targets = tmp_path / "data" / "targets"
    (targets / "local" / "sub").mkdir(parents=True)
    (targets / "local" / ".storagebrief.lock").write_text("{}")
    (targets / "mine").mkdir()
    (targets / "mine" / "keep.txt").write_text("a user's file")
    (targets / "README.md").write_text("tracked")
    subprocess.run(["make", "--no-print-directory", "clean-data"], cwd=tmp_path, check=True, capture_output=True,
                   env={"PATH": "/usr/bin:/bin"})
    assert sorted(p.name for p in targets.iterdir()) == ["README.md", "mine"]
    assert (targets / "mine" / "keep.txt").read_text() == "a user's file"


@pytest.mark.parametrize("goal", [".venv/.installed", "gpu"])
def test_every_install_leaves_out_the_iri_grammar(goal):
    """rfc3987-syntax compiles a grammar on import (1.0-1.3 s in every process importing nbformat: jupytext and
    papermill in each study stage), for a format check nothing here uses: whatever installs the environment
    removes it right after (make -n: the recipe as make would run it, nothing executed)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-B", "--no-print-directory", goal], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    installs = [i for i, line in enumerate(out) if "uv pip install" in line and "-e " in line]
    assert installs, out
    assert any("uv pip uninstall" in line and "rfc3987-syntax" in line for line in out[installs[-1]:]), out
