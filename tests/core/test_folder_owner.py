"""Issue 57, defects 2 and 10: storagebrief writes only in folders of its own below a target.

A `<target>/storagebrief/` (or a study's folder in it) that another user made, or that group or others can write
without the sticky bit, is refused in one line naming it, before any work, by every registered study (one check,
in core.folders, through Target.study_dir); a data set's staging folder is mkdtemp's (no predictable
`.<name>.tmp-<pid>`), and an `--out` inside a target's storagebrief/ is refused naming both. The other user is real:
uid 65534 through setpriv, as root; without root or setpriv these tests skip with the reason."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from storagebrief import studies
from storagebrief.core import folders, results
from conftest import cli_run

NOBODY = 65534


def _nobody() -> list[str]:
    """argv prefix running a command as uid/gid 65534 (skips where that cannot be done)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the other user is uid 65534, reached with setpriv")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if subprocess.run([*argv, sys.executable, "-c", "pass"], capture_output=True, cwd="/").returncode:
        pytest.skip(f"{sys.executable} cannot be run by uid {NOBODY}")
    return argv


@pytest.fixture
def open_target():
    """A world-writable (0777, no sticky bit) target every user reaches, like a shared scratch folder."""
    base = Path(tempfile.mkdtemp(prefix="sb-owner-"))
    os.chmod(base, 0o755)
    target = base / "t"
    target.mkdir()
    os.chmod(target, 0o777)
    yield base, target
    shutil.rmtree(base, ignore_errors=True)


def _make_as_nobody(argv: list[str], *folders_modes: tuple[Path, int]) -> None:
    code = "import os,sys\nfor p, m in zip(sys.argv[1::2], sys.argv[2::2]):\n    os.mkdir(p); os.chmod(p, int(m, 8))"
    args = [a for f, m in folders_modes for a in (str(f), f"{m:o}")]
    subprocess.run([*argv, sys.executable, "-c", code, *args], check=True, cwd="/")


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.lstat().st_uid, stat.S_IMODE(p.lstat().st_mode)) for p in folder.rglob("*")}


@pytest.mark.parametrize("made", ["both-0777-by-nobody", "study-0755-by-nobody"])
@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
def test_a_study_folder_another_user_made_is_refused_in_one_line_by_every_study(study, made, open_target):
    """uid 65534 pre-made storagebrief/ and storagebrief/<study>/ 0777 on a world-writable target (or, below root's
    sticky storagebrief/, the study folder 0755 of its own): root's run of every study exits 2 with one line naming
    the folder, its owner and mode and what is allowed, and writes nothing there. Before: only symlinks were
    refused; vector_search built its index in the other user's folder (whose staging name it could swap)."""
    argv = _nobody()
    base, target = open_target
    data, folder = target / "storagebrief", target / "storagebrief" / study.name
    if made == "both-0777-by-nobody":
        _make_as_nobody(argv, (data, 0o777), (folder, 0o777))
        named = data
    else:
        data.mkdir()
        os.chmod(data, 0o1777)                  # ours, sticky: others may add names, never move ours
        _make_as_nobody(argv, (folder, 0o755))
        named = folder
    before = _tree(target)
    params = base / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {target}}}]\nrun: {{trace: false}}\n{study.name}: {{}}\n")
    res = cli_run(study.command, "--params", str(params), "--out", str(base / "out"), "--progress", "off")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-3000:]
    assert f"{named} belongs to uid {NOBODY}" in lines[0] and "not to this user" in lines[0], lines
    assert "storagebrief writes only in folders of its own" in lines[0], lines
    assert _tree(target) == before                  # nothing written, nothing made, nothing deleted there


def test_a_group_or_other_writable_folder_of_ours_is_refused_unless_sticky(tmp_path):
    """Ours but writable by others (no sticky bit): another user could rename what we make there and plant a
    symlink; refused naming the mode. With the sticky bit they cannot, and it is allowed."""
    target = tmp_path / "t"
    (target / "storagebrief" / "s").mkdir(parents=True)
    for mode, ok in ((0o775, False), (0o777, False), (0o1777, True), (0o755, True)):
        os.chmod(target / "storagebrief" / "s", mode)
        if ok:
            assert folders.study_folder(target, "s") == target / "storagebrief" / "s"
        else:
            with pytest.raises(folders.UnsafeFolder, match=f"storagebrief/s is writable by .*mode {mode:04o}"):
                folders.study_folder(target, "s")


def test_the_staging_folder_is_not_predictable_and_a_planted_one_is_never_used(tmp_path):
    """A symlink planted at the old staging name `.<set>.tmp-<pid>` (to a folder holding a 0600 file) is neither
    written through nor followed when stale halves are removed; the data set is built in a mkdtemp folder and
    renamed in. Before: the staging folder was `.<set>.tmp-<pid>`, which another user could predict and swap."""
    study = tmp_path / "t" / "storagebrief" / "vector_search"
    study.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_bytes(b"root's")
    os.chmod(victim / "secret", 0o600)
    planted = study / f".clustered.tmp-{os.getpid()}"
    planted.symlink_to(victim)
    seen = []
    with results.staged_dir(study / "clustered") as tmp:
        seen.append(tmp)
        assert tmp != planted and tmp.parent == study and tmp.name.startswith(".clustered.tmp-")
        assert not tmp.is_symlink() and tmp.lstat().st_uid == os.geteuid()
        (tmp / "secret").write_bytes(b"index")
    with results.staged_dir(study / "clustered") as tmp:
        seen.append(tmp)
        (tmp / "dataset.json").write_text("{}")
    assert seen[0].name != seen[1].name
    assert (victim / "secret").read_bytes() == b"root's" and planted.is_symlink()
    assert sorted(p.name for p in (study / "clustered").iterdir()) == ["dataset.json"]


def test_a_data_set_is_not_built_in_a_folder_another_user_owns(tmp_path):
    """staged_dir itself asks core.folders: a study folder owned by uid 65534 (or any other) is refused before the
    staging folder is made."""
    study = tmp_path / "t" / "storagebrief" / "vector_search"
    study.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another user")
    os.chown(study, NOBODY, NOBODY)
    with pytest.raises(folders.UnsafeFolder, match=f"vector_search belongs to uid {NOBODY}"):
        with results.staged_dir(study / "clustered"):
            raise AssertionError("never reached")
    assert list(study.iterdir()) == []


@pytest.mark.parametrize("study", ["vector_search"])
def test_an_out_folder_inside_a_targets_study_folder_is_refused_naming_both(study, tmp_path):
    """--out <target>/storagebrief/<study>/out: refused before any work, exit 2, one line naming the output folder
    and the target's data (a rebuild of a data set there would delete it). Before: accepted."""
    target = tmp_path / "t"
    (target / "storagebrief" / study).mkdir(parents=True)
    out = target / "storagebrief" / study / "out"
    params = tmp_path / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {target}}}]\nrun: {{trace: false}}\n{study}: {{}}\n")
    res = cli_run(studies.REGISTRY[study].command, "--params", str(params), "--out", str(out), "--progress", "off")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-3000:]
    assert f"output folder '{out}'" in lines[0] and f"target 't's data ({target / 'storagebrief'})" in lines[0]
    assert not out.exists() and list((target / "storagebrief" / study).iterdir()) == []


def test_folders_made_below_a_target_are_ours_and_closed_whatever_the_umask(tmp_path):
    """core.folders.ours makes each missing step 0755 (a umask of 002 would leave 0775, which the next run refuses)
    and proves each one from storagebrief/ down; a step another user owns is refused before anything is made."""
    old = os.umask(0o002)
    try:
        made = folders.ours(tmp_path / "t" / "storagebrief" / "checkpoint" / "cost")
    finally:
        os.umask(old)
    for step in (made, made.parent, made.parent.parent):
        assert stat.S_IMODE(step.stat().st_mode) == 0o755, step
    if os.geteuid() == 0:
        os.chown(made.parent, NOBODY, NOBODY)
        with pytest.raises(folders.UnsafeFolder, match=f"checkpoint belongs to uid {NOBODY}"):
            folders.ours(made / "more")
        assert not (made / "more").exists()


def test_a_second_run_under_umask_002_accepts_the_folders_the_first_one_made(tmp_path):
    """Under umask 002 a plain mkdir gives 0775, which our own check refuses (group-writable): before, a run's
    folder from folder_below and a folder a study made inside its staging folder (vector_search's index/) were
    0775, so the next run was refused by storagebrief's own folders. Now both are 0755 and the second pass works."""
    old = os.umask(0o002)
    try:
        study = folders.ours(tmp_path / "t" / "storagebrief" / "vector_search")
        for _ in range(2):                              # the second pass is the next run: it checks what exists
            run = folders.folder_below(study, "runs", "r1")
            with results.staged_dir(study / "clustered") as tmp:
                (tmp / "index" / "part").mkdir(parents=True)
            inner = folders.folder_below(study, "clustered", "index", "part", create=False)
    finally:
        os.umask(old)
    for folder in (run, run.parent, study / "clustered", inner, inner.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
