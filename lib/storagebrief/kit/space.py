"""Will the study's data fit? Checked on every target before any work, with targets that share a
filesystem added up (the default targets are two folders of one disk: each fitting alone is not
enough)."""
from __future__ import annotations

import errno
import os
import re
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


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(exc: BaseException) -> str | None:
    """Why a run failed when the cause is a full filesystem or an exhausted quota, else None: an
    OSError in `exc`'s chain, or the errno a worker's traceback text carries (a rank's error comes
    back as text)."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS:
            where = f" writing {e.filename}" if e.filename else ""
            return f"{os.strerror(e.errno)} (errno {e.errno}){where}"
        e = e.__cause__ or e.__context__
    codes = "|".join(str(n) for n in NO_SPACE_ERRNOS)
    m = re.search(rf"\[Errno ({codes})\] ([^\n]*)", str(exc))
    if m is None:
        return None
    who = str(exc).splitlines()[0].rstrip(":")
    return f"{m.group(2)} (errno {m.group(1)}), {who}"
