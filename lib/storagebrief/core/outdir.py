"""A study's output folder: the run's own, replaced as a whole only when a study completes.

- An interactive run (a notebook, or the CLI without --out) gets a fresh folder,
  reports/runs/<time>/<study>/, so it never touches the pipeline's reports/<study>/.
- A folder is ours when it is empty or marked by an earlier run of the study (its status.json).
  A folder with files and no such mark is refused before any work. An earlier run's folder is
  deleted, once replaced, only when it holds nothing but the files its status.json lists; anything
  else there (a user's note, a killed run's unlisted files) keeps it whole beside the new results as
  `<name>.previous-<time>/`: we never delete what we did not create.
- An empty folder is written in place. A folder holding earlier results is left untouched while
  the new run writes a sibling `<name>.incomplete-<time>/`; only when the study completes are the
  two swapped (atomically where the kernel can) and the earlier results removed. An interrupted
  run leaves its partial folder, with status.json saying `complete: false`.
- Ours is recorded, never guessed from a file's shape: the files status.json lists, the temporary
  files of atomic writes (results.TEMP_PREFIX, a prefix no user writes) and, when a run stops before
  its first row, the outputs the study and the engine declare. Anything else is the user's.
- One writer per folder: a lock beside it (core.lock.FolderLock) held from the ownership check to
  the end; a second run waits or refuses (run.on_busy_target), naming the holder.
- An `--out` that is a symlink stays one: the run works in the folder it points at.
- Every delete, here and in the studies' folders on targets, goes through remove_tree (the delete
  guard, at the end of this module).
"""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import stat
import time
from pathlib import Path

from . import results
from .engine_outputs import ENGINE_OUTPUTS, STATUS, TRACES
from .folders import UnsafeDelete, UnsafeFolder, folder_below, not_ours, study_folder  # noqa: F401  (outdir's names stay)
from .lock import FolderLock, folder_lock_path, others_can_write
from .procs import SCRATCH_PREFIX

SCHEMA = 1
# Written beside the study's results by others: papermill's executed notebook (dvc repro).
FOREIGN_BUT_EXPECTED = ("notebook.ipynb",)
# What the engine writes for every study before or after its runs (core.sweep), beside the study's
# declared outputs: a run stopped before its first row removes these and nothing else.
ENGINE_WRITES = (*ENGINE_OUTPUTS, "runs.csv", "inventory.json", "metrics.json", "notes.json", "timeseries")
_CLAIMED: set[Path] = set()      # interactive folders new_run_folder made for this process


def is_temp(rel: str) -> bool:
    """A temporary file of an atomic write (results.TEMP_PREFIX) or anything in a scratch folder
    (procs.SCRATCH_PREFIX) a killed run may leave behind: named with a prefix no user writes."""
    return any(part.startswith((results.TEMP_PREFIX, SCRATCH_PREFIX)) for part in Path(rel).parts)


class OutDirError(ValueError):
    """The output folder cannot be used; the message names it and says what to do."""


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def new_run_folder(reports: Path, study_name: str) -> Path:
    """reports/runs/<time>/<study>: a folder no other run uses, claimed by creating it (mkdir fails
    for the second of two runs started in the same second, which takes <time>-2, ...)."""
    base = Path(reports) / "runs" / stamp()
    folder, n = base, 1
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / study_name).mkdir()
        except FileExistsError:
            n += 1
            folder = base.with_name(f"{base.name}-{n}")
            continue
        _CLAIMED.add(folder / study_name)
        return folder / study_name


def unclaim(folder: Path) -> None:
    """A folder new_run_folder claimed, given back by a run that kept nothing in it: it and its <time> parent are
    removed when empty (rmdir only: whatever a user put there meanwhile keeps them). Called after the lock's release."""
    folder = Path(folder)
    if folder not in _CLAIMED:
        return
    _CLAIMED.discard(folder)
    lock = folder_lock_path(folder)          # its released lock file beside it, in the <time> folder only this run used
    if lock.parent == folder.parent and not lock.is_symlink():
        lock.unlink(missing_ok=True)
    for d in (folder, folder.parent):
        try:
            d.rmdir()
        except FileNotFoundError:
            continue                         # abandon() removed it already
        except OSError:
            break


def files_in(folder: Path) -> list[str]:
    """Every file below `folder` as a relative path (status.json itself excluded)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if not p.is_dir() and p.name != STATUS)


def read_status(folder: Path) -> dict | None:
    try:
        data = json.loads((Path(folder) / STATUS).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def our_trace(folder: Path, rel: str) -> bool:
    """A raw block trace a run of ours wrote in traces/ (its content proves it: our magic line, which the trace
    reader writes out at once), listed or not: a run killed while tracing leaves one its status.json never saw."""
    from .characterize.tracefs_raw import is_raw
    parts = Path(rel).parts
    return len(parts) == 2 and parts[0] == TRACES and is_raw(Path(folder) / rel)


def foreign_files(folder: Path, study_name: str) -> list[str]:
    """Files in `folder` that no storagebrief run of this study wrote (by status.json's list, or by content)."""
    status = read_status(folder) or {}
    ours = set(status.get("files") or []) if status.get("study") == study_name else set()
    return [f for f in files_in(folder) if f not in ours and f not in FOREIGN_BUT_EXPECTED and not is_temp(f)
            and not (status.get("study") == study_name and our_trace(folder, f))]


def _exchange(a: Path, b: Path) -> None:
    """Swap two folders in one step (renameat2 RENAME_EXCHANGE) so no reader ever sees neither;
    two renames where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        at_fdcwd, rename_exchange = -100, 2
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
    except (AttributeError, OSError):
        pass
    parked = a.with_name(f".{a.name}.swap-{os.getpid()}-{secrets.token_hex(8)}")   # not predictable: never planted
    os.rename(a, parked)
    os.rename(b, a)
    os.rename(parked, b)


def _refuse_others_folder(final: Path) -> None:
    """An --out in a folder others can write (/tmp) that another user made (or planted as a symlink) is theirs:
    storagebrief neither writes into it nor replaces it."""
    if not others_can_write(final.parent):
        return
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        return
    if st.st_uid != os.geteuid():
        raise OutDirError(f"output folder '{final}' belongs to uid {st.st_uid}, not to this user, in '{final.parent}', "
                          "a folder others can write: choose an output folder of your own")


def check_own_out(value: str | Path, option: str = "--out") -> Path:
    """A folder a command writes its files straight into (`storagebrief brief --out`), refused in one line before
    any work when it is a system directory (also through a symlink), a file, a symlink (lstat: a link planted in a
    shared folder would send the files elsewhere) or a folder that is not ours (core.folders.not_ours: another
    user's, or writable by group or others without the sticky bit). Returns the absolute path; call it again after
    making the folder."""
    from .targets import check_target_path      # inside: targets imports pydantic, heavy for the CLI's start
    try:
        path = check_target_path(str(value))
    except ValueError as exc:
        why = str(exc).split("; ")[0].split(" (targets")[0].replace("target path", option, 1)   # its advice: targets'
        raise OutDirError(f"{why}; choose an ordinary folder of your own") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(st.st_mode):
        raise OutDirError(f"{option} '{value}' is a symlink (it resolves to {os.path.realpath(path)}): storagebrief "
                          "writes only into real folders; give the folder itself")
    if not stat.S_ISDIR(st.st_mode):
        raise OutDirError(f"{option} '{value}' is a file, not a folder; choose a folder")
    why = not_ours(st)
    if why:
        raise OutDirError(f"{option} '{value}' {why}: choose a folder of your own (or chmod go-w it if it is yours)")
    return path


def _free_sibling(work: Path) -> Path:
    """`<name>.incomplete-<time>-<pid>`, or the first `-<k>` after it that no file, folder or symlink holds: in a
    folder others can write the name is predictable, and what is planted there is never used (create() makes the
    folder with mkdir, not exist_ok)."""
    for k in range(100):
        cand = work if k == 0 else work.with_name(f"{work.name}-{k}")
        if not os.path.lexists(cand):
            return cand
    raise OutDirError(f"cannot choose a working folder beside '{work.parent}': 100 names taken ('{work.name}-…')")


class OutputFolder:
    """Where one study run writes; `work` is the folder the engine and the study write into."""

    def __init__(self, final: Path, study_name: str, outputs: tuple[str, ...] = (), on_busy: str = "wait",
                 log=print):
        final = Path(final)
        self.link = final if final.is_symlink() else None      # an --out symlink stays a symlink
        self.final, self.study_name = (Path(os.path.realpath(final)) if self.link else final), study_name
        self.outputs = tuple(dict.fromkeys((*ENGINE_WRITES, *outputs)))
        self.lock = FolderLock(self.final, on_busy, log)
        self.work = self.final
        self.status: dict = {}
        self._made = False
        self._before: set[str] = set()
        self.kept: Path | None = None          # the earlier folder, kept because it held unlisted files
        self.kept_because = ""

    def check(self) -> "OutputFolder":
        """Lock the folder (one writer), check ownership and choose the working folder, writing nothing in
        it; raises OutDirError, or FolderBusy when another run writes it and run.on_busy_target=refuse."""
        final = self.final
        if final.exists() and not final.is_dir():
            raise OutDirError(f"output folder '{final}' is a file, not a directory")
        try:
            return self._check_locked(final)
        except BaseException:
            self.lock.release()        # refused here: the caller has no folder to release (a lock file in
            raise                      # /dev/shm was left behind, held until the process ended)

    def _check_locked(self, final: Path) -> "OutputFolder":
        if final.parent.is_dir():
            self.lock.acquire()        # released by release(), which the engine calls however the run ends
            _refuse_others_folder(final)
        if final.is_dir() and [f for f in files_in(final) if f not in FOREIGN_BUT_EXPECTED and not is_temp(f)]:
            status = read_status(final) or {}
            if status.get("study") != self.study_name:
                foreign = foreign_files(final, self.study_name)
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                raise OutDirError(
                    f"output folder '{final}' holds files no {self.study_name} run wrote "
                    f"('{foreign[0]}'{more}); storagebrief replaces only its own results: move them "
                    "or choose another output folder")
            # an earlier run's folder: it stays untouched until this run completes
            self.work = _free_sibling(final.with_name(f"{final.name}.incomplete-{stamp()}-{os.getpid()}"))
        return self

    def release(self) -> None:
        self.lock.release()

    def create(self) -> "OutputFolder":
        """Make the working folder and mark it incomplete (after the targets are locked)."""
        if not self.final.parent.is_dir():
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        self._made = not self.work.exists() or self.work in _CLAIMED
        self._before = set(files_in(self.work)) if not self._made else set()
        try:
            if self.work != self.final:
                try:
                    os.mkdir(self.work)          # never one that appeared since check(): not ours
                except FileExistsError:
                    raise OutDirError(f"'{self.work}' appeared between the output folder's check and its creation "
                                      "(another process made it); it is not used: run again") from None
                self._made, self._before = True, set()
            else:
                self.work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            hint = results.os_error_hint(exc)
            raise OutDirError(f"cannot create output folder '{self.work}': {exc.strerror}"
                              + (f"; {hint}" if hint else "")) from None
        self.status = {"schema": SCHEMA, "study": self.study_name, "complete": False,
                       "runs_planned": None, "runs_done": 0, "started_at": results.utc_now(),
                       "finished_at": None, "stopped_by": None, "final_folder": str(self.final.resolve())}
        self._write()
        return self

    def abandon(self) -> None:
        """The run failed before its first row: remove what it wrote (its declared outputs, status.json,
        temporary files) and nothing else: a file the user saved there meanwhile stays, and so does the
        folder holding it (bad input loses nothing)."""
        if not self.status:
            return
        try:
            self._remove_what_we_wrote()
        except OSError:
            pass            # a read-only or full filesystem: the original error is what the user needs
        self.status = {}

    def _ours(self, rel: str) -> bool:
        top = Path(rel).parts[0]
        return rel not in self._before and (top in self.outputs or is_temp(rel) or rel == STATUS)

    def _remove_what_we_wrote(self) -> None:
        for rel in [f for f in files_in(self.work) if self._ours(f)] + [STATUS]:
            remove_tree(rel, self.work)
        for d in sorted((p for p in self.work.rglob("*") if p.is_dir() and not p.is_symlink()),
                        key=lambda p: -len(p.parts)):
            if Path(d.relative_to(self.work)).parts[0] in self.outputs:
                try:
                    d.rmdir()          # only when empty: a user's file inside keeps it
                except OSError:
                    pass
        if self._made:
            try:
                self.work.rmdir()
            except OSError:
                pass

    @property
    def left_behind(self) -> list[str]:
        """After abandon(): what is still in the working folder (the user's files), if it is there."""
        return files_in(self.work) if self.work.is_dir() else []

    def _write(self) -> None:
        self.status["files"] = files_in(self.work)
        results.write_json(self.work / STATUS, self.status)

    def progress(self, done: int, planned: int | None) -> None:
        self.status.update(runs_done=done, runs_planned=planned)
        self._write()

    def stopped(self, why: str) -> None:
        """The run ended early: the folder stays, marked incomplete, saying why."""
        self.status.update(stopped_by=why, finished_at=results.utc_now())
        try:
            self._write()
        except OSError:
            pass            # a full disk stopped the run: its status.json keeps the last count it could

    def complete(self) -> Path:
        """Mark complete and put the results in place of any earlier ones; returns the final folder.
        The earlier folder is deleted only when it holds nothing but what its run listed; otherwise
        (a user's file, a killed run's unlisted files) it is kept beside as `<name>.previous-<time>`."""
        self.status.update(complete=True, finished_at=results.utc_now())
        self._write()
        if self.work == self.final:
            return self.final
        if not self.final.exists():          # moved away during the run
            self.work.rename(self.final)
        else:
            _exchange(self.final, self.work)          # the earlier results are now at self.work
            old = self.work
            unlisted = foreign_files(old, self.study_name)
            if unlisted:
                self.kept = old.with_name(f"{self.final.name}.previous-{stamp()}")
                old.rename(self.kept)
                self.kept_because = unlisted[0]
            else:
                remove_tree(old, old, allow_owner=True)
        self.work = self.final
        return self.final


# --------------------------------------------------------------------------- the delete guard
# Every delete storagebrief makes goes through here: it proves the path lies inside a folder this run
# created or a study folder it owns, before anything is removed.
#
# A path is removed only when, relative to its owner folder, it has no '..' and is not absolute, its
# parent resolves (symlinks followed) inside the owner's real path, and it is not the owner folder
# itself unless asked. A symlink is never followed: the link alone is removed, never what it points at.
# The owner itself must not be a system directory (targets.check_target_path). A refusal is an
# UnsafeDelete (a ValueError: one line, exit 2) and nothing is deleted.
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


def remove_tree(path: str | Path, owner: str | Path, allow_owner: bool = False, missing_ok: bool = True,
                ignore_errors: bool = False) -> bool:
    """Remove `path` (a folder, a file or a symlink, which alone goes) once check_inside proves it is
    ours; True when something was removed. Errors of the removal itself are raised (a folder that
    cannot be emptied is the user's to know about), except a path already gone, or all of them with
    ignore_errors (a clean-up after a failure, whose own error says more); a refusal always is."""
    path = check_inside(path, owner, allow_owner)
    try:
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink(missing_ok=True)
            return True
        if not path.exists():
            if missing_ok:
                return False
            raise FileNotFoundError(path)
        shutil.rmtree(path)
    except OSError:
        if not ignore_errors:
            raise
    return True
