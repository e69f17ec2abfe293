"""The folder guard (core/folders.py, issue 44): a symlink never leads a study out of its folder. Every registered
study reaches its folder through the one accessor Target.study_dir and its run folders through folder_below; a
symlink at <target>/storagebrief or <target>/storagebrief/<study> is refused in one line and the user's folder it
leads to is byte for byte as it was."""
from __future__ import annotations


import pytest

from storagebrief import studies
from storagebrief.core import outdir, targets
from conftest import REPO, cli_run
from users_folder import _unchanged, _victim


@pytest.mark.parametrize("where", ["storagebrief", "study"])
@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
def test_a_symlinked_study_folder_is_refused_in_one_line_by_every_study(study, where, tmp_path):
    """<target>/storagebrief, or <target>/storagebrief/<study>, a symlink to a user's folder: every registered
    study refuses before any work, exit 2, one line naming the symlink; the user's folder is byte for byte as it
    was. Before: kv_cache deleted the user's kv_cache-* folders, the object sweep overwrote their files."""
    victim, files = _victim(tmp_path)
    target = tmp_path / "t"
    if where == "storagebrief":
        target.mkdir()
        (target / "storagebrief").symlink_to(victim)
        link = target / "storagebrief"
    else:
        (target / "storagebrief").mkdir(parents=True)
        (target / "storagebrief" / study.name).symlink_to(victim / study.name)
        link = target / "storagebrief" / study.name
    params = tmp_path / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {target}}}]\nrun: {{trace: false}}\n{study.name}: {{}}\n")
    res = cli_run(study.command, "--params", str(params), "--out", str(tmp_path / "out"), "--progress", "off")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-3000:]
    assert f"{link} is a symlink" in lines[0] and "remove the symlink" in lines[0], lines
    _unchanged(victim, files)
    assert link.is_symlink()


# A folder below the study folder reached by a plain join, not folder_below: allowed only where a symlink there loses
# just the link (issue 36: a checkpoint model's folder is removed through remove_tree before it is made again).
PLAIN_JOINS = {("checkpoint", "dataset.py", "model_dir")}


@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
def test_every_study_reaches_its_run_folders_through_folder_below(study):
    """In each registered study's package, `study_dir(...) / name` (a run folder reached without the lstat check)
    appears only as the path a remove_tree deletes, or in PLAIN_JOINS: a new study cannot forget the guard."""
    import ast
    bad = []
    for f in sorted((REPO / "lib" / "storagebrief" / "studies" / study.name).glob("*.py")):
        tree = ast.parse(f.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "study_dir"):
                continue
            up = parents.get(node)
            if not (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div) and up.left is node):
                continue
            call, fn = parents.get(up), up
            while fn is not None and not isinstance(fn, ast.FunctionDef):
                fn = parents.get(fn)
            deleting = isinstance(call, ast.Call) and getattr(call.func, "id", "") == "remove_tree"
            if not deleting and (study.name, f.name, getattr(fn, "name", "")) not in PLAIN_JOINS:
                bad.append(f"{f.name}:{node.lineno}")
    assert not bad, f"{study.name}: run folders joined below study_dir without folder_below: {bad}"


def test_every_access_to_a_study_folder_goes_through_the_guard(tmp_path):
    """Target.study_dir, the one accessor, refuses a symlink at storagebrief/ or storagebrief/<study>, even one
    staying inside the target, and a file where a folder belongs."""
    t = targets.Target("t", tmp_path / "t")
    (tmp_path / "t" / "elsewhere").mkdir(parents=True)
    assert t.study_dir("kv_cache") == tmp_path / "t" / "storagebrief" / "kv_cache"      # nothing there yet: fine
    (tmp_path / "t" / "storagebrief").mkdir()
    (tmp_path / "t" / "storagebrief" / "kv_cache").symlink_to(tmp_path / "t" / "elsewhere")
    with pytest.raises(outdir.UnsafeFolder, match="is a symlink .*remove the symlink"):
        t.study_dir("kv_cache")
    (tmp_path / "t" / "storagebrief" / "object_sweep").write_text("a file")
    with pytest.raises(outdir.UnsafeFolder, match="is not a folder"):
        t.study_dir("object_sweep")
