"""This user's private runtime folder (core/runtime_dir.py, issue 44): a candidate another user made first, or a
symlink at its name, is passed over with the reason, never trusted or repaired."""
from __future__ import annotations

import os

from storagebrief.core import runtime_dir
from another_user import NOBODY, _plant, as_root, shared  # noqa: F401  (shared: a fixture)


@as_root
def test_a_squatted_runtime_folder_is_never_used(tmp_path, shared, monkeypatch):
    """Another user made /dev/shm/storagebrief-<uid> first: it is passed over (and said why), never trusted."""
    monkeypatch.setattr(runtime_dir, "SHM", shared)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    squat = shared / f"storagebrief-{os.geteuid()}"
    _plant(lambda: os.mkdir(squat, 0o777))
    got = runtime_dir.path()
    assert got == tmp_path / "home" / ".cache" / "storagebrief" / "runtime"
    assert any(str(squat) in why and f"uid {NOBODY}" in why for why in runtime_dir.skipped())
    assert squat not in runtime_dir.usable() and got in runtime_dir.usable()
    assert not os.lstat(got).st_mode & 0o077
    # a symlink at the name is passed over too
    os.rmdir(squat)
    _plant(lambda: os.symlink(tmp_path, squat))
    assert runtime_dir.path() == got and any("symbolic link" in why for why in runtime_dir.skipped())
