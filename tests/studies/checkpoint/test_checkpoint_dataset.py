"""checkpoint's folders on a target (studies/checkpoint/dataset.py, issue 36): a shape's name is never a path and
nothing outside the study's folder is deleted; a study folder symlinked out of the target is refused; a model
folder symlinked elsewhere loses only the link. Each failed on d545649."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cli_run as _cli
from test_checkpoint_ranks import SHAPE, _params


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir(exist_ok=True)
    (v / "precious.txt").write_text("the user's")
    return v


# --------------------------------------------------------------------------- shape names
@pytest.mark.parametrize("how", ["dotdot", "absolute"])
@pytest.mark.parametrize("command", ["validate", "checkpoint"])
def test_a_shape_named_like_a_path_is_refused_and_nothing_is_deleted(tmp_path, how, command):
    victim = _victim(tmp_path)
    (tmp_path / "t").mkdir()
    name = "../../../victim" if how == "dotdot" else str(victim)
    f = _params(tmp_path, models=[name], shapes={name: SHAPE})
    args = (command, "--params", str(f)) + (("--out", str(tmp_path / "out")) if command != "validate" else ())
    res = _cli(*args)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "a name used in file paths" in res.stderr
    assert (victim / "precious.txt").read_text() == "the user's"


# --------------------------------------------------------------------------- symlinked folders
def test_a_study_folder_symlinked_out_of_the_target_is_refused_and_nothing_is_deleted(tmp_path):
    victim = _victim(tmp_path)
    (tmp_path / "t" / "storagebrief").mkdir(parents=True)
    (tmp_path / "t" / "storagebrief" / "checkpoint").symlink_to(victim)
    (victim / "llama3-8b").mkdir()
    (victim / "llama3-8b" / "mine.txt").write_text("the user's")
    res = _cli("checkpoint", "--params", str(_params(tmp_path)), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "outside the target" in res.stderr, res.stderr
    assert (victim / "precious.txt").exists() and (victim / "llama3-8b" / "mine.txt").exists()


@pytest.mark.slow
def test_a_model_folder_symlinked_elsewhere_loses_only_the_link(tmp_path):
    victim = _victim(tmp_path)
    study = tmp_path / "t" / "storagebrief" / "checkpoint"
    study.mkdir(parents=True)
    (study / "llama3-8b").symlink_to(victim)
    res = _cli("checkpoint", "--params", str(_params(tmp_path)), "--out", str(tmp_path / "out"), "--progress", "off")
    assert res.returncode == 0, res.stderr
    assert (victim / "precious.txt").read_text() == "the user's" and (study / "llama3-8b").is_dir()
    assert not (study / "llama3-8b").is_symlink()
