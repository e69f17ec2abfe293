"""The shape issue 21 asked for, kept: modules under 500 lines, functions under 80 unless a comment
beside the def says why, and layers that import one way."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

LIB = REPO / "lib" / "storagebrief"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
REASON = "# long:"          # on the def line or the line above: why this one stays long


def _modules():
    return sorted(LIB.rglob("*.py"))


def _long_functions(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = node.end_lineno - first + 1
            said = any(REASON in lines[i - 1] for i in (first - 1, node.lineno) if 0 < i <= len(lines))
            if length > MAX_FUNCTION_LINES and not said:
                out.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_module_over_500_lines():
    big = [f"{p.relative_to(REPO)} ({n} lines)" for p in _modules()
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not big, big


def test_no_function_over_80_lines_without_a_reason_beside_it():
    long = [f for p in _modules() for f in _long_functions(p)]
    assert not long, f"split these, or write '{REASON} <why>' beside the def: {long}"


def _imports(path: Path, text: str | None = None) -> set[str]:
    """storagebrief modules `path` imports (absolute names), at any depth of the file (or of `text`,
    read as if it were that file)."""
    rel = path.relative_to(LIB.parent).with_suffix("")
    package = list(rel.parts[:-1])          # a module's package; an __init__'s own package
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            if mod.startswith("storagebrief"):
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("storagebrief"))
    return out


# The layers, bottom up: core, formats -> report (the report library) -> kit -> studies -> brief (the
# assembler, which reads the registry) -> notebook, cli. Each layer names every layer above it.
ABOVE = {
    "core": ("formats", "report", "kit", "studies", "brief", "notebook", "cli"),
    "formats": ("report", "kit", "studies", "brief", "notebook", "cli"),
    "report": ("kit", "studies", "brief", "notebook", "cli", "dvcstages"),
    "kit": ("studies", "brief", "notebook", "cli", "dvcstages"),
    "studies": ("brief", "notebook", "cli", "dvcstages"),
    "brief": ("notebook", "cli", "dvcstages"),
}


@pytest.mark.parametrize("layer, never", [(layer, tuple(f"storagebrief.{a}" for a in above))
                                          for layer, above in ABOVE.items()])
def test_layers_import_one_way(layer, never):
    bad = [f"{p.relative_to(REPO)} imports {m}" for p in sorted((LIB / layer).rglob("*.py"))
           for m in sorted(_imports(p)) if m.startswith(never)]
    assert not bad, bad


def test_every_package_has_a_layer():
    """A new top-level package must be given its place above, or the rule above would not see it."""
    packages = {p.name for p in LIB.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(ABOVE), f"give these a layer in ABOVE: {sorted(packages - set(ABOVE))}"


def test_the_layer_rule_sees_an_upward_import():
    """The check reads `from ..studies import REGISTRY` in report/ as the upward import it is (what
    report/inputs.py did before it moved to brief/), deferred or not."""
    probe = "from ..studies import REGISTRY\ndef f():\n    from ..brief import assemble\n"
    assert {"storagebrief.studies", "storagebrief.brief"} <= _imports(LIB / "report" / "inputs.py", probe)


def test_tests_kit_mirrors_kit():
    """What studies share is tested on its own, not only through the studies: a test module per kit module."""
    modules = {p.stem for p in (LIB / "kit").glob("*.py") if p.stem != "__init__"}
    # test_kit_<module>.py where a study's tests already hold a test_<module>.py (basenames must be unique)
    tested = {p.stem.removeprefix("test_").removeprefix("kit_") for p in (REPO / "tests" / "kit").glob("test_*.py")}
    assert modules <= tested, f"no tests/kit/test_<module>.py for: {sorted(modules - tested)}"


def test_test_modules_have_unique_names():
    """The tests' folders are not packages, so pytest imports each test module by its file name: two
    test_x.py anywhere under tests/ break collection of both."""
    seen: dict[str, list[str]] = {}
    for f in sorted((REPO / "tests").rglob("test_*.py")):
        seen.setdefault(f.name, []).append(str(f.relative_to(REPO)))
    assert not {n: fs for n, fs in seen.items() if len(fs) > 1}


# What outlives a run and the limits on it are the engine's (core/longjob.py, core/run_limits.py): a study or a kit
# module asks the Run (run.cgroup, run.throttle, run.confine_cpus, run.limit_job, run.lasting_throttle) and the
# sweep (sweep.cgroup, sweep.jobs); `emulated` is the engine's record of a profile it applied.
CGROUP_CALLS = ("Cgroup", "set_io", "set_memory_limit", "clear_io_limits")
RECORDED = ("cache_method", "emulated")
# S3 code another change rewrites (the gateway's cgroup makes these runs emulated: the engine's now); drop them there.
EMULATED_LEFT = {"object_sweep/run.py", "checkpoint/objects.py"}


def _touches_cgroups_or_cache_method(path: Path, text: str | None = None) -> list[str]:
    """Where a module creates a cgroup (or subclasses Cgroup), sets or clears a cgroup limit, or assigns
    `cache_method` itself."""
    out = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in CGROUP_CALLS:
                out.append(f"{path.name}:{node.lineno} calls {name}()")
        elif isinstance(node, ast.ClassDef):
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
            if "Cgroup" in bases:
                out.append(f"{path.name}:{node.lineno} subclasses Cgroup")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and t.attr in RECORDED:
                        out.append(f"{path.name}:{node.lineno} assigns {t.attr}")
    return out


def _left_for_the_s3_rewrite(path: Path, found: str) -> bool:
    studies = LIB / "studies"
    return (found.endswith("assigns emulated") and path.is_relative_to(studies)
            and path.relative_to(studies).as_posix() in EMULATED_LEFT)


def test_no_study_or_kit_module_touches_cgroups_or_what_the_engine_records():
    files = sorted([*(LIB / "studies").rglob("*.py"), *(LIB / "kit").rglob("*.py")])
    bad = [f"{p.relative_to(REPO)}: {w}" for p in files for w in _touches_cgroups_or_cache_method(p)
           if not _left_for_the_s3_rewrite(p, w)]
    assert not bad, bad


def test_the_cgroup_rule_sees_what_the_studies_did_before():
    """What train_resnet50 and checkpoint wrote before the engine owned their jobs is caught, and what kit and five
    studies wrote before the engine owned the gateway's cgroup and `emulated`."""
    probe = ("group = cgroups.Cgroup('framework-tensorflow', io=io).create()\njob.group.set_io(io)\n"
             "job.group.set_memory_limit(limit)\ng.clear_io_limits(io)\nrun.cache_method = _settle(where)\n"
             "a.cache_method, b = 'x', 1\nclass C(cgroups.Cgroup):\n    pass\nrun.emulated = applied\n"
             "g = cgroups.Cgroup(f'{study}-{t.name}-gateway', io=io).create()\n")
    found = _touches_cgroups_or_cache_method(LIB / "kit" / "probe.py", probe)
    assert sorted(w.split(" ", 1)[1] for w in found) == sorted([
        "calls Cgroup()", "calls set_io()", "calls set_memory_limit()", "calls clear_io_limits()",
        "assigns cache_method", "assigns cache_method", "subclasses Cgroup", "assigns emulated",
        "calls Cgroup()"]), found
