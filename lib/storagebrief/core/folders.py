"""Real folders below a target: what a study writes or deletes there stays in folders storagebrief made.

`<target>/storagebrief/<study>` comes from `study_folder` (through `targets.Target.study_dir`, the one accessor
every study uses) and a run's own folders below it from `folder_below`: each step is checked with lstat, never
followed, and a symlink or a file there is refused in one line (UnsafeFolder, a ValueError: exit 2) before
anything is written. A leaf: core.outdir (the delete guard) and core.targets both use it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeDelete(ValueError):
    """A delete would leave the folder storagebrief owns; nothing was deleted."""


class UnsafeFolder(UnsafeDelete):
    """A folder between a target and a run's files is a symlink (or not a folder): nothing was written there."""


def _real_folder(folder: Path, top: Path, top_is: str = "the target") -> None:
    """Refuse `folder` when it is a symlink or something other than a folder (lstat: never followed)."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        real, real_top = os.path.realpath(folder), os.path.realpath(top)
        where = "" if real.startswith(real_top.rstrip("/") + "/") else f", outside {top_is} {real_top}"
        raise UnsafeFolder(f"{folder} is a symlink (it resolves to {real}{where}): storagebrief writes and deletes "
                           "only in real folders below the target; remove the symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{folder} is not a folder: storagebrief keeps its files there; move it away")


def study_folder(target_path: str | Path, study: str) -> Path:
    """<target>/storagebrief/<study>, the folder a study owns on a target (targets.Target.study_dir, the one
    accessor every study uses), after proving that neither it nor storagebrief/ is a symlink or a file: what a
    run writes or deletes below it stays on the target, in folders storagebrief made."""
    target = Path(os.path.abspath(target_path))
    folder = target / "storagebrief" / study
    for step in (folder.parent, folder):
        _real_folder(step, target)
    return folder


def folder_below(base: str | Path, *parts: str, create: bool = True) -> Path:
    """`base`/parts..., each part a real folder (made here when missing, never through a symlink): a run's own
    folder below a study folder. A part that is a symlink or a file is refused (UnsafeFolder, one line)."""
    folder = Path(base)
    if create and parts and not folder.exists():
        folder.mkdir(parents=True, exist_ok=True)
    for part in parts:
        if not part or part in (".", "..") or "/" in part:
            raise UnsafeFolder(f"refusing folder name '{part}' below {base}")
        folder = folder / part
        _real_folder(folder, Path(base), "the study folder")
        if create:
            try:
                os.mkdir(folder)
            except FileExistsError:
                _real_folder(folder, Path(base), "the study folder")     # made meanwhile: still no symlink
    return folder
