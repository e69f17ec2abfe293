"""Real folders below a target: what a study writes or deletes there stays in folders storagebrief made.

`<target>/storagebrief/<study>` comes from `study_folder` (through `targets.Target.study_dir`, the one accessor
every study uses) and a run's own folders below it from `folder_below`: each step is checked with lstat, never
followed, and a symlink or a file there is refused in one line (UnsafeFolder, a ValueError: exit 2) before
anything is written. So is a folder there that is not ours (another user's) or that group or others can write
without the sticky bit (`not_ours`: the question is answered here, once): another user could swap what we write
for a symlink. A data set's staging folder is `tempfile.mkdtemp` in such a checked folder (`staging_folder`), and
it is renamed into place through the parent's directory fd, opened O_NOFOLLOW and checked again (`rename_in`).
An output folder inside a target's storagebrief/ is refused too (`refuse_out_in_target_data`): a rebuild there
would delete it. A leaf: core.outdir (the delete guard), core.targets and core.results use it.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path


class UnsafeDelete(ValueError):
    """A delete would leave the folder storagebrief owns; nothing was deleted."""


class UnsafeFolder(UnsafeDelete):
    """A folder between a target and a run's files is a symlink, not a folder, or not ours: nothing was written."""


DATA = "storagebrief"          # <target>/storagebrief/: every study's folders on a target
MODE = 0o755                   # every folder we make below a target (a umask only removes bits: never 0775)
ALLOWED = ("storagebrief writes only in folders of its own below a target (owned by this user, not writable by "
           "group or others unless sticky)")


def not_ours(st: os.stat_result) -> str | None:
    """Why a folder (its lstat) is not one storagebrief may write into, or None: another user's, or group/other
    writable without the sticky bit (then anyone in it may rename what we made and put a symlink in its place)."""
    mode, me = stat.S_IMODE(st.st_mode), os.geteuid()
    if st.st_uid != me:
        return f"belongs to uid {st.st_uid} (mode {mode:04o}), not to this user (uid {me})"
    if mode & 0o022 and not mode & stat.S_ISVTX:
        who = "others" if mode & 0o002 else "its group"
        return f"is writable by {who} (owner uid {st.st_uid}, mode {mode:04o}, no sticky bit)"
    return None


def _refuse_not_ours(folder: Path, st: os.stat_result) -> None:
    why = not_ours(st)
    if why is not None:
        raise UnsafeFolder(f"{folder} {why}: {ALLOWED}; nothing was written there: remove it (or chmod go-w it if "
                           "it is yours) and run again")


def _real_folder(folder: Path, top: Path, top_is: str = "the target", own: bool = True) -> None:
    """Refuse `folder` when it is a symlink, something other than a folder (lstat: never followed) or, with `own`,
    a folder that is not ours (not_ours)."""
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
    if own:
        _refuse_not_ours(folder, st)


def study_folder(target_path: str | Path, study: str) -> Path:
    """<target>/storagebrief/<study>, the folder a study owns on a target (targets.Target.study_dir, the one
    accessor every study uses), after proving that neither it nor storagebrief/ is a symlink or a file: what a
    run writes or deletes below it stays on the target, in folders storagebrief made."""
    target = Path(os.path.abspath(target_path))
    folder = target / DATA / study
    for step in (folder.parent, folder):
        _real_folder(step, target)
    return folder


def folder_below(base: str | Path, *parts: str, create: bool = True) -> Path:
    """`base`/parts..., each part a real folder of ours (made here when missing, never through a symlink): a run's
    own folder below a study folder. A part that is a symlink, a file or not ours is refused (UnsafeFolder)."""
    folder = Path(base)
    if create and parts:
        ours(folder)
    for part in parts:
        if not part or part in (".", "..") or "/" in part:
            raise UnsafeFolder(f"refusing folder name '{part}' below {base}")
        folder = folder / part
        _real_folder(folder, Path(base), "the study folder")
        if create:
            try:
                os.mkdir(folder, MODE)          # 0755 at most whatever the umask: our own check accepts it
            except FileExistsError:
                _real_folder(folder, Path(base), "the study folder")     # made meanwhile: still no symlink
    return folder


def _data_steps(folder: Path) -> list[Path]:
    """`folder` and its parents up to the nearest storagebrief/ (the target's data), top first; `folder` alone when
    it is not below one."""
    steps = [folder]
    for parent in folder.parents:
        if steps[-1].name == DATA:
            return steps[::-1]
        steps.append(parent)
    return [folder]


def ours(folder: str | Path) -> Path:
    """`folder`, made when missing (0755 at most), then each step from the target's storagebrief/ down to it proven
    a real folder of ours (never followed): the one check before anything is written below a target."""
    folder = Path(os.path.abspath(folder))
    steps = _data_steps(folder)
    for step in steps:                  # before: no folder is made through a symlink or in another user's folder
        _real_folder(step, steps[0].parent)
    steps[0].parent.mkdir(parents=True, exist_ok=True)
    for step in steps:                  # one by one, 0755 whatever the umask; then: none was planted meanwhile
        try:
            os.mkdir(step, MODE)
        except FileExistsError:
            pass
        _real_folder(step, steps[0].parent)
    return folder


def staging_folder(directory: str | Path) -> Path:
    """A fresh folder beside `directory` to build it in: `tempfile.mkdtemp` (a name no one can predict, made by us
    alone) inside the parent, after the parent is proven ours (`ours`); readable as a data folder (0755)."""
    directory = Path(directory)
    parent = ours(directory.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=parent))
    os.chmod(tmp, MODE)             # its parent is ours and closed to others: the name cannot be swapped
    return tmp


def close_modes(tmp: Path) -> None:
    """Take group and other write off every folder a study made inside its staging folder `tmp` (walked through
    directory fds, never following a symlink), before it is renamed into place: under a umask such as 002 a plain
    mkdir there gives 0775, which `not_ours` would refuse on the next run."""
    for _, dirs, _, fd in os.fwalk(tmp, follow_symlinks=False):
        for name in dirs:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o022:
                os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o022, dir_fd=fd)


def stale_staging(directory: str | Path) -> list[Path]:
    """Staging folders an earlier killed run left beside `directory`: real folders of ours only."""
    directory = Path(directory)
    found = []
    for old in directory.parent.glob(f".{directory.name}.tmp-*"):
        try:
            st = os.lstat(old)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            found.append(old)
    return found


STAGED = re.compile(r"\..+\.tmp-[A-Za-z0-9_]+")     # staging_folder's names (mkdtemp's; older: a PID)


def _own_dir(name: str, fd: int) -> bool:
    """`name` in the folder `fd` is a real folder (lstat: a symlink is not) of this user."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def sweep_staging(study: Path, prefixes: tuple[str, ...] = (), depth: int = 2) -> list[str]:
    """Remove the staging folders killed runs left in a study folder and its folders down to `depth` levels:
    `staging_folder`'s `.<name>.tmp-*` and names starting with one of `prefixes` (other mkdtemp folders). Only real
    folders of ours, closed to others, are entered, and only real folders of ours are removed, each through its
    parent's directory fd (opened O_NOFOLLOW): a symlink is never followed. The caller holds the target's lock (no
    run of ours is staging there now). One line per folder removed."""
    try:
        fd = os.open(study, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    return _sweep_in(fd, Path(study), prefixes, depth)


def _sweep_in(fd: int, where: Path, prefixes: tuple[str, ...], depth: int) -> list[str]:
    lines: list[str] = []
    try:
        if not_ours(os.fstat(fd)) is not None:
            return lines
        for name in sorted(e.name for e in os.scandir(fd)):
            if not _own_dir(name, fd):
                continue
            if STAGED.fullmatch(name) or (prefixes and name.startswith(prefixes)):
                shutil.rmtree(name, dir_fd=fd)
                lines.append(f"removed leftover staging folder {where / name} (a killed run's half-made data)")
            elif depth > 1:
                try:
                    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                lines += _sweep_in(sub, where / name, prefixes, depth - 1)
    finally:
        os.close(fd)
    return lines


def rename_in(tmp: Path, directory: Path) -> None:
    """Put the staged `tmp` in `directory`'s place (the earlier one removed) through the parent's directory fd,
    opened O_NOFOLLOW and checked ours again: nothing is renamed or deleted through a symlink."""
    parent = Path(directory).parent
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _refuse_not_ours(parent, os.fstat(fd))
        name = Path(directory).name
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise UnsafeFolder(f"{directory} is {'a symlink' if stat.S_ISLNK(st.st_mode) else 'not a folder'}: "
                               f"{ALLOWED}; remove it and run again")
        if st is not None:
            shutil.rmtree(name, dir_fd=fd)
        os.rename(Path(tmp).name, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def refuse_out_in_target_data(out: str | Path, targets) -> None:
    """An output folder inside a target's storagebrief/ is refused (one line naming both): a rebuild of a data set
    there deletes it. `targets`: (name, path) pairs."""
    real = Path(os.path.realpath(out))
    for name, path in targets:
        data = Path(os.path.realpath(Path(path) / DATA))
        if real == data or data in real.parents:
            raise UnsafeFolder(f"output folder '{out}' lies inside target '{name}'s data ({data}): studies rebuild "
                               "and delete folders there; choose an output folder outside it")
