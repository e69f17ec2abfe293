"""The shape issue 21 asked for, kept: modules under 500 lines, functions under 80 unless a comment
beside the def says why, and layers that import one way."""
from __future__ import annotations

import ast
import re
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


def test_no_study_or_kit_module_touches_cgroups_or_what_the_engine_records():
    files = sorted([*(LIB / "studies").rglob("*.py"), *(LIB / "kit").rglob("*.py")])
    bad = [f"{p.relative_to(REPO)}: {w}" for p in files for w in _touches_cgroups_or_cache_method(p)]
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


# A run's workers are launched once (kit/ranks.py: forked or MPI, in the run's cgroup, start line, a dead worker's
# reason): a study (or a kit module: the ingest writer) supplies the per-worker function, starts no processes of
# its own and joins no cgroup.
def _launches_its_own_workers(path: Path, text: str | None = None) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if any(n and n.split(".")[0] == "multiprocessing" for n in names):
                out.append(f"{path.name}:{node.lineno} imports multiprocessing")
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
            if name in ("get_context", "Process", "fork", "ProcessPoolExecutor") or (name == "join" and owner == "cgroups"):
                out.append(f"{path.name}:{node.lineno} calls {owner + '.' if owner else ''}{name}()")
    return out


def test_no_study_or_kit_module_launches_its_own_workers_or_joins_a_cgroup():
    launcher = {LIB / "kit" / "ranks.py", LIB / "kit" / "ranks_mpi.py"}
    mods = [p for d in ("studies", "kit") for p in sorted((LIB / d).rglob("*.py")) if p not in launcher]
    bad = [f"{p.relative_to(REPO)}: {w}" for p in mods for w in _launches_its_own_workers(p)]
    assert not bad, bad


def test_the_launcher_rule_sees_the_pools_the_studies_had():
    """What kv_cache, emulate, checkpoint and preprocess wrote before kit/ranks.py is caught."""
    probe = ("import multiprocessing as mp\nctx = mp.get_context('fork')\np = ctx.Process(target=f)\n"
             "cgroups.join(files)\npid = os.fork()\n")
    found = [w.split(" ", 1)[1] for w in _launches_its_own_workers(LIB / "studies" / "probe.py", probe)]
    assert sorted(found) == sorted(["imports multiprocessing", "calls mp.get_context()", "calls ctx.Process()",
                                    "calls cgroups.join()", "calls os.fork()"]), found


# A worker that must start from a fresh interpreter (TensorFlow's or librdkafka's state does not survive a fork) is
# a kit.child.Child (JSON lines, dies with us, a dead child's reason, stop then kill): a study starts no
# `python` children of its own. Exceptions, by file or by file:function, each with why it stays:
FRESH_PYTHON_ALLOWED = {
    "studies/train_resnet50/run.py:warm_libraries": "reads TensorFlow's libraries into the page cache beside the "
                                                    "datasets' generation; it says nothing and serves nothing: no "
                                                    "worker",
}


def _starts_python_children(path: Path, text: str | None = None) -> list[tuple[str, str]]:
    """(function, 'line calls X.Popen([sys.executable, ...])') for every Popen / popen of a fresh interpreter."""
    out = []

    def visit(node, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("Popen", "popen") \
                and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)) and node.args[0].elts:
            first = node.args[0].elts[0]
            if isinstance(first, ast.Attribute) and first.attr == "executable" and getattr(first.value, "id", "") == "sys":
                owner = getattr(node.func.value, "id", "?")
                out.append((function, f"{node.lineno} calls {owner}.{node.func.attr}([sys.executable, ...])"))
        for sub in ast.iter_child_nodes(node):
            visit(sub, function)
    visit(ast.parse(path.read_text() if text is None else text), "")
    return out


def test_no_study_starts_python_children_of_its_own():
    bad = []
    for p in sorted((LIB / "studies").rglob("*.py")):
        rel = p.relative_to(LIB).as_posix()
        bad += [f"{rel}:{where} in {fn or 'the module'}" for fn, where in _starts_python_children(p)
                if rel not in FRESH_PYTHON_ALLOWED and f"{rel}:{fn}" not in FRESH_PYTHON_ALLOWED]
    assert not bad, f"start a worker in a fresh interpreter with kit.child.Child: {bad}"


def test_the_fresh_python_rule_sees_the_workers_stream_inference_had():
    """stream_inference's own Worker class (before kit.child) and object_sweep's worker are caught."""
    probe = ("class Worker:\n    def __init__(self, module):\n"
             "        self.proc = subprocess.Popen([sys.executable, '-m', f'{PKG}.{module}'], stdin=PIPE)\n"
             "def _measure(scope):\n    w = scope.popen([sys.executable, '-m', 'x.worker'], env=env)\n"
             "ok = subprocess.run([sys.executable, '-c', 'import x'])\n")
    assert _starts_python_children(Path("probe.py"), probe) == [
        ("__init__", "3 calls subprocess.Popen([sys.executable, ...])"),
        ("_measure", "5 calls scope.popen([sys.executable, ...])")]


# --------------------------------------------------------------------------- one storage face (issue 43)
STORE_MODULES = ("core/store.py", "core/s3store.py")    # the only places a store's private _call is made
# Every form of "directory or S3?": `is None` on a store, a client, a gateway or an S3 setting; a type check on a
# store; the properties that asked it (client_reads_device, files_here); getattr of `s3` / `gateway`; a store's
# `access` compared; a target's kind compared with "s3"; a configuration's ["s3"].
STORE_BRANCH = re.compile(r"""\b\w*(?:store|s3|client|gateway)\b\s+is\s+(?:not\s+)?None
    | isinstance\([^)]*\b(?:\w*Store|S3Client|S3Calls)\b | \btype\(\w*store\w*\)
    | \b(?:client_reads_device|files_here)\b | getattr\([^)]*["'](?:s3|gateway)["']
    | \baccess\s*[!=]= | \bkind\s*[!=]=\s*["']s3["'] | \[["']s3["']\]""", re.X)
# Counted in every module that moves or measures data, outside core/ (whose stores answer the question): the
# studies (their brief modules, which read results, aside) and kit. At most STORE_BRANCHES_MAX in all; what is
# left picks which targets take part in a study's rules (no MPI, no page-cache cap, directory-only sweeps) or which
# code a worker runs on the store it opened, never how data are read, written, counted or removed.
STORE_BRANCHES_MAX = 5
STORE_BRANCHES_ALLOWED = {
    "studies/emulate/params.py": 1,        # on_s3(): emulate's one question (budget, cap, space, its loader)
    "studies/checkpoint/run.py": 1,        # the directory targets: the only ones its directory-only sweeps run on
    "studies/checkpoint/rank_io.py": 1,    # a rank's save / load: files, or the run's objects
    "studies/object_sweep/run.py": 1,      # the in-study reference client runs on a local gateway only
}


def _store_branches(text: str) -> int:
    return sum(1 for line in text.splitlines() if STORE_BRANCH.search(line))


def _data_modules():
    for p in sorted((LIB / "studies").rglob("*.py")) + sorted((LIB / "kit").rglob("*.py")):
        if not p.name.startswith("brief"):
            yield p.relative_to(LIB).as_posix(), p


def test_no_private_store_call_outside_the_store_modules():
    bad = [f"{p.relative_to(REPO)}:{i}" for p in _modules() if p.relative_to(LIB).as_posix() not in STORE_MODULES
           for i, line in enumerate(p.read_text().splitlines(), 1) if "._call(" in line]
    assert not bad, f"use core.store's public Store methods (put, get, list, delete, ...), not ._call: {bad}"


def test_directory_or_s3_branches_do_not_grow():
    assert sum(STORE_BRANCHES_ALLOWED.values()) <= STORE_BRANCHES_MAX
    found = {rel: n for rel, p in _data_modules() if (n := _store_branches(p.read_text()))}
    over = {rel: f"{n} lines, allowed {STORE_BRANCHES_ALLOWED.get(rel, 0)}" for rel, n in found.items()
            if n > STORE_BRANCHES_ALLOWED.get(rel, 0)}
    assert not over, f"'directory or S3?' branches grew: ask the target's core.store.Store instead: {over}"


def test_the_store_rules_see_what_the_studies_did_before():
    """Each form the studies used before issue 58, seen; a name that merely contains 'store' is not."""
    before = ["if store is None:", "elif t.s3 is not None:", "if store.client_reads_device:",
              "if not store.files_here:", "isinstance(state.stores[t.name], DirStore)",
              'getattr(target, "s3", None) is not None', 'if cfg["s3"]:', "if client is not None:",
              'if store.access != "files":', 'local = t.kind == "s3"', "if store.gateway is not None:"]
    assert [line for line in before if not _store_branches(line)] == []
    assert _store_branches("store_is = None\nrestore(x) is None\nrow['access'] = 'files'\n") == 0


def _imports_boto(text: str) -> bool:
    return bool(re.search(r"^\s*(?:import|from)\s+(?:boto3|botocore)\b", text, re.M))


def test_no_worker_or_study_imports_boto3():
    """boto3 lives behind core's stores (core/s3store.py): a worker opens its store from the run's handle."""
    bad = [rel for rel, p in _data_modules() if _imports_boto(p.read_text())]
    assert not bad, f"reach S3 through core.store (a worker: StoreHandle.open()), not boto3: {bad}"
    assert _imports_boto("def f():\n    import boto3\n") and _imports_boto("from botocore import exceptions\n")
