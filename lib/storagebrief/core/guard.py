"""Every delete storagebrief makes goes through here: it proves the path lies inside a folder this run
created or a study folder it owns, before anything is removed.

A path is removed only when, relative to its owner folder, it has no '..' and is not absolute, its
parent resolves (symlinks followed) inside the owner's real path, and it is not the owner folder
itself unless asked. A symlink is never followed: the link alone is removed, never what it points at.
The owner itself must not be a system directory (targets.check_target_path). A refusal is an
UnsafeDelete (a ValueError: one line, exit 2) and nothing is deleted.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path


class UnsafeDelete(ValueError):
    """A delete would leave the folder storagebrief owns; nothing was deleted."""


def check_inside(path: str | Path, owner: str | Path, allow_owner: bool = False) -> Path:
    """`path` (absolute, or relative to `owner`) if it provably lies inside `owner`; else UnsafeDelete."""
    from .targets import check_target_path

    owner = Path(os.path.abspath(owner))
    try:
        check_target_path(str(owner))
    except ValueError as exc:
        raise UnsafeDelete(f"refusing to delete below {owner}: {exc}") from None
    path = Path(path)
    path = path if path.is_absolute() else owner / path
    text = os.path.normpath(path)
    try:
        rel = Path(os.path.relpath(path, owner))
    except ValueError:
        rel = Path("..")
    if ".." in Path(str(path)).parts or ".." in rel.parts or rel.is_absolute():
        raise UnsafeDelete(f"refusing to delete '{path}': it is not inside {owner}, the folder storagebrief "
                           "owns there")
    if rel == Path(".") and not allow_owner:
        raise UnsafeDelete(f"refusing to delete '{path}': it is the owner folder itself")
    real_owner = os.path.realpath(owner)
    real_parent = os.path.realpath(Path(text).parent) if rel != Path(".") else real_owner
    if real_parent != real_owner and not real_parent.startswith(real_owner.rstrip("/") + "/"):
        raise UnsafeDelete(f"refusing to delete '{path}': through a symlink it resolves to "
                           f"{os.path.realpath(text)}, outside {real_owner}, the folder storagebrief owns there")
    return Path(text)


def remove_tree(path: str | Path, owner: str | Path, allow_owner: bool = False, missing_ok: bool = True) -> bool:
    """Remove `path` (a folder, a file or a symlink, which alone goes) once check_inside proves it is
    ours; True when something was removed. Errors of the removal itself are raised (a folder that
    cannot be emptied is the user's to know about), except a path already gone."""
    path = check_inside(path, owner, allow_owner)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
        return True
    if not path.exists():
        if missing_ok:
            return False
        raise FileNotFoundError(path)
    shutil.rmtree(path)
    return True


def study_folder(target_path: str | Path, study: str) -> Path:
    """<target>/storagebrief/<study>, the folder a study owns on a target, after proving that neither
    it nor storagebrief/ is a symlink leading out of the target (a delete below it stays on the target)."""
    target = Path(os.path.abspath(target_path))
    folder = target / "storagebrief" / study
    real_target, real = os.path.realpath(target), os.path.realpath(folder)
    if not real.startswith(real_target.rstrip("/") + "/"):
        raise UnsafeDelete(f"{folder} resolves to {real}, outside the target {real_target} (a symlink out): "
                           "storagebrief deletes only below the target; remove the symlink")
    return folder
