"""The brief's commit is honest: only code, params or notebooks make it '-dirty'."""
import subprocess
import types

from storagebrief.core import inventory


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_run_outputs_do_not_make_the_commit_dirty(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    for name in ("dvc.lock", "params.yaml"):
        (tmp_path / name).write_text("a\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "README.md").write_text("a\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.chdir("/")                      # the working directory does not matter: the project does
    project = types.SimpleNamespace(root=str(tmp_path), source_hash="")
    assert inventory.collect(project)["git_commit"].count("-dirty") == 0
    (tmp_path / "dvc.lock").write_text("b\n")
    (tmp_path / "reports" / "README.md").write_text("b\n")
    inv = inventory.collect(project)
    assert not inv["git_commit"].endswith("-dirty")
    assert inv["run_updated_files"] == ["dvc.lock", "reports/README.md"] and inv["git_changed_files"] == []
    (tmp_path / "params.yaml").write_text("b\n")
    inv = inventory.collect(project)
    assert inv["git_commit"].endswith("-dirty") and inv["git_changed_files"] == ["params.yaml"]


def test_commit_is_the_projects_and_the_package_is_named_when_it_comes_from_elsewhere(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "params.yaml").write_text("a\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout
    monkeypatch.chdir("/")
    inv = inventory.collect(types.SimpleNamespace(root=str(tmp_path), source_hash=""))
    assert inv["git_commit"] == head[:12]
    package_head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=inventory.PACKAGE_DIR, capture_output=True,
                                  text=True).stdout[:12]
    assert inv["package_git_commit"] == (package_head or "not a git checkout")


def test_a_run_records_how_it_was_started(monkeypatch):
    """Issue 61: the history counts a range's studies by entry point; DVC sets DVC_STAGE for every stage command
    (`dvc repro`, `make study`), the notebooks and the CLI say their own."""
    monkeypatch.delenv("DVC_STAGE", raising=False)
    assert inventory.entry_point() == ""
    with inventory.entered("notebook"):
        assert inventory.entry_point() == "notebook"
        monkeypatch.setenv("DVC_STAGE", "preprocess")
        assert inventory.entry_point() == "pipeline"
    monkeypatch.delenv("DVC_STAGE")
    with inventory.entered("CLI"):
        assert inventory.collect()["entry"] == "CLI"
    assert inventory.entry_point() == ""
