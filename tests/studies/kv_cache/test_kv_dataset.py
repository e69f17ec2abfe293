"""kv_cache's run folders on a target (studies/kv_cache/dataset.py, issue 44): a run folder that is a symlink is
refused in one line and nothing is deleted; a killed run's leftovers are only real run folders below the guarded
study folder."""
from __future__ import annotations

import pytest

from storagebrief.core import outdir, targets
from storagebrief.studies.kv_cache import dataset as kv_dataset
from users_folder import _unchanged, _victim


def test_a_kv_run_folder_that_is_a_symlink_is_one_line_and_nothing_is_deleted(tmp_path):
    """The run folder <study>/<run id> a symlink: refused with one line (UnsafeFolder, exit 2), the user's
    folder kept. Before: shutil.rmtree's OSError, a traceback ('a bug')."""
    victim, files = _victim(tmp_path)
    t = targets.Target("t", tmp_path / "t")
    root = tmp_path / "t" / "storagebrief" / "kv_cache"
    root.mkdir(parents=True)
    (root / "kv_cache-t-r0").symlink_to(victim)
    with pytest.raises(outdir.UnsafeFolder, match="kv_cache-t-r0 is a symlink"):
        kv_dataset.fresh(t, "kv_cache-t-r0")
    _unchanged(victim, files)


def test_kv_leftovers_delete_only_real_run_folders_below_the_guarded_folder(tmp_path):
    """A killed run's folder goes; a symlink named like one (to a user's folder) is neither followed nor
    removed: it is not ours."""
    victim, files = _victim(tmp_path)
    t = targets.Target("t", tmp_path / "t")
    root = tmp_path / "t" / "storagebrief" / "kv_cache"
    (root / "kv_cache-t-r1" / "c0").mkdir(parents=True)
    (root / "kv_cache-t-r1" / "c0" / "u-t0-0.kv").write_bytes(b"kv")
    (root / "kv_cache-link").symlink_to(victim / "kv_cache")
    assert kv_dataset.remove_leftovers(t) == [root / "kv_cache-t-r1"]
    assert not (root / "kv_cache-t-r1").exists() and (root / "kv_cache-link").is_symlink()
    _unchanged(victim, files)
