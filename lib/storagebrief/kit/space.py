"""Will the study's data fit? Checked on every target before any work, with targets that share a
filesystem added up (the default targets are two folders of one disk: each fitting alone is not
enough)."""
from __future__ import annotations

import os
from typing import Callable, Iterable

from ..core import targets as targets_mod


def filesystem_id(target) -> int:
    """st_dev of the target's folder, or of its nearest existing parent (not created yet)."""
    probe = target.path
    while not probe.exists():
        probe = probe.parent
    return os.stat(probe).st_dev


def check_space(targets: Iterable, needed: Callable[[object], int], what: str) -> None:
    """Refuse (TargetError naming the target, what, the bytes needed and free) when `needed(target)`
    bytes for each target, summed over the targets on one filesystem, do not fit beside the
    reserve core.targets keeps free."""
    per_fs: dict[int, int] = {}
    many: dict[int, int] = {}
    for t in targets:
        fs = filesystem_id(t)
        per_fs[fs] = per_fs.get(fs, 0) + max(0, int(needed(t)))
        many[fs] = many.get(fs, 0) + 1
        shared = " of this and earlier targets on the same filesystem" if many[fs] > 1 else ""
        targets_mod.check_free_space(t, per_fs[fs], what + shared)


def existing_bytes(folder) -> int:
    """Bytes already in a dataset folder (a kept dataset needs no new space)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0
