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


_USE = """import sys, time
from pathlib import Path
from storagebrief.core import runtime_dir
runtime_dir.SHM = Path(sys.argv[1])
folder = runtime_dir.path()
if sys.argv[2] == "file":
    (folder / "entry").write_text("a live run's")
print(folder, flush=True)
if sys.argv[2] == "hold":
    sys.stdin.read()
"""


def test_a_run_removes_the_runtime_folder_it_used_when_empty_and_never_one_in_use(tmp_path):
    """Before: every run (and doctor) left an empty /dev/shm/storagebrief-<uid>. Now a process that used the runtime
    folder removes it at exit when it is empty; not when it holds another entry, and not while another process that
    uses it still runs (that one removes it when it ends)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    folder = tmp_path / f"storagebrief-{os.geteuid()}"

    def use(how: str, **kw):
        return subprocess.run([sys.executable, "-c", _USE, str(tmp_path), how], env=env, capture_output=True,
                              text=True, check=True, timeout=60, **kw)

    assert use("plain").stdout.strip() == str(folder) and not folder.exists()       # used, empty: removed
    use("file")
    assert (folder / "entry").is_file()                                              # not empty: kept
    (folder / "entry").unlink()
    holder = subprocess.Popen([sys.executable, "-c", _USE, str(tmp_path), "hold"], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == str(folder)
        use("plain")
        assert folder.is_dir()                                     # another process still uses it: kept
    finally:
        holder.communicate("", timeout=60)
    assert not folder.exists()                                     # the last one out removed it
