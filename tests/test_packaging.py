import re
import tomllib
from pathlib import Path

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


def test_readme_tree_names_every_module():
    """README's "How it fits together" matches the code: every package and module is named there."""
    text = (REPO / "README.md").read_text()
    fits = text[text.index("## How it fits together"):text.index("## Adding a study")]
    lib = REPO / "lib" / "storagebrief"
    names = {p.stem for p in lib.rglob("*.py") if p.stem not in ("__init__", "__main__")}
    names |= {p.name for p in lib.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    missing = sorted(n for n in names if not __import__("re").search(rf"\b{n}\b", fits))
    assert not missing, f"README's package tree does not name: {missing}"


def test_readme_test_references_exist():
    """Every `test_x.py::test_y` the README cites names a test that exists (tests move, citations follow)."""
    import re
    text = (REPO / "README.md").read_text()
    defined = {}
    for f in (REPO / "tests").rglob("test_*.py"):
        defined.setdefault(f.name, set()).update(re.findall(r"^def (test_\w+)", f.read_text(), flags=re.M))
    cited, last = [], None
    for f, t in re.findall(r"(test_\w+\.py)?(?:::(test_\w+))?", text):
        if f:
            last = f
        if f or t:
            cited.append((f or last, t))          # `::test_y` continues the file cited before it
    wrong = sorted({f"{f}::{t}" if t else f for f, t in cited
                    if f not in defined or (t and t not in defined[f])})
    assert not wrong, f"README cites tests that do not exist: {wrong}"
