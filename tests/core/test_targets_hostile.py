"""Hostile targets: symlinks into system folders, files, missing parents, read-only and small filesystems.

(Split from tests/test_faults.py, issue 10/20: tests unchanged.)"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from storagebrief.cli import main as cli_main
from storagebrief.core import config, targets
from conftest import needs_root as _needs_root, write_params as _write_params

needs_root = _needs_root("needs root (mounts, cgroups)")


# --------------------------------------------------------------------------- hostile targets
def test_symlink_into_a_system_directory_is_refused(tmp_path):
    (tmp_path / "etc-link").symlink_to("/etc")
    (tmp_path / "root-link").symlink_to("/")
    for link in ("etc-link", "root-link", "etc-link/sub"):
        with pytest.raises(ValueError, match="symlink"):
            targets.check_target_path(str(tmp_path / link))
    f = _write_params(tmp_path)
    assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={tmp_path / 'etc-link'}"]) == 2


def test_file_target_missing_parent_and_root_folder_are_refused_by_validate(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    f = _write_params(tmp_path)
    cases = {str(tmp_path / "a-file"): "is a file", str(tmp_path / "no" / "such" / "dir"): "parent",
             "/storagebrief-new-folder-at-root": "filesystem root"}
    for path, words in cases.items():
        assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={path}"]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "no").exists() and not Path("/storagebrief-new-folder-at-root").exists()


def test_out_that_is_a_file_is_refused_before_work(tmp_path, capsys):
    f = _write_params(tmp_path)
    (tmp_path / "out-file").write_text("x")
    assert cli_main(["preprocess", "--params", str(f), "--out", str(tmp_path / "out-file")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert not (tmp_path / "fast").exists()


@pytest.fixture
def small_fs(tmp_path):
    """A 50 MB tmpfs (root only): small filesystems must work with small datasets."""
    d = tmp_path / "small"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield d
    subprocess.run(["umount", "-l", str(d)])


@needs_root
def test_read_only_target_is_refused_by_validate_and_run_with_nothing_written(small_fs, tmp_path, capsys):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    f = _write_params(tmp_path)
    for target in (small_fs, small_fs / "new"):
        assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={target}"]) == 2
        assert "read-only" in capsys.readouterr().err
    assert cli_main(["preprocess", "--params", str(f), "-S", f"targets.0.path={small_fs}",
                     "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists() and not (tmp_path / "slow").exists()


@needs_root
def test_small_filesystem_holds_a_small_dataset_and_sizes_have_fitting_units(small_fs):
    t = targets.resolve(config.TargetParams(name="s", path=str(small_fs)), targets.DEVICE_PROFILES)
    targets.check_free_space(t, int(3.5e6), "a 3.5 MB dataset")      # 5 % + 1 GiB would refuse this
    with pytest.raises(targets.TargetError, match=r"needs 60\.0 MB but only [0-9.]+ MB is free"):
        targets.check_free_space(t, int(60e6), "a 60 MB dataset")


