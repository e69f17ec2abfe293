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
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import time
from pathlib import Path

from . import results
from .engine_outputs import STATUS

SCHEMA = 1
# Written beside the study's results by others: papermill's executed notebook (dvc repro).
FOREIGN_BUT_EXPECTED = ("notebook.ipynb",)
# Temp files of atomic writes (results.atomic_write_text) a killed run may leave behind.
_ATOMIC_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}$")


class OutDirError(ValueError):
    """The output folder cannot be used; the message names it and says what to do."""


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def new_run_folder(reports: Path, study_name: str) -> Path:
    """reports/runs/<time>/<study>: a folder no earlier run used."""
    base = Path(reports) / "runs" / stamp()
    folder, n = base, 1
    while (folder / study_name).exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder / study_name


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


def foreign_files(folder: Path, study_name: str) -> list[str]:
    """Files in `folder` that no storagebrief run of this study wrote (by status.json's list)."""
    status = read_status(folder) or {}
    ours = set(status.get("files") or []) if status.get("study") == study_name else set()
    return [f for f in files_in(folder)
            if f not in ours and f not in FOREIGN_BUT_EXPECTED and not _ATOMIC_TEMP.match(Path(f).name)]


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
    parked = a.with_name(f".{a.name}.swap-{os.getpid()}")
    os.rename(a, parked)
    os.rename(b, a)
    os.rename(parked, b)


class OutputFolder:
    """Where one study run writes; `work` is the folder the engine and the study write into."""

    def __init__(self, final: Path, study_name: str):
        self.final, self.study_name = Path(final), study_name
        self.work = self.final
        self.status: dict = {}
        self._made = False
        self._before: set[str] = set()
        self.kept: Path | None = None          # the earlier folder, kept because it held unlisted files
        self.kept_because = ""

    def check(self) -> "OutputFolder":
        """Check ownership and choose the working folder, writing nothing; raises OutDirError."""
        final = self.final
        if final.exists() and not final.is_dir():
            raise OutDirError(f"output folder '{final}' is a file, not a directory")
        if final.is_dir() and [f for f in files_in(final) if f not in FOREIGN_BUT_EXPECTED]:
            status = read_status(final) or {}
            if status.get("study") != self.study_name:
                foreign = foreign_files(final, self.study_name)
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                raise OutDirError(
                    f"output folder '{final}' holds files no {self.study_name} run wrote "
                    f"('{foreign[0]}'{more}); storagebrief replaces only its own results: move them "
                    "or choose another output folder")
            # an earlier run's folder: it stays untouched until this run completes
            self.work = final.with_name(f"{final.name}.incomplete-{stamp()}-{os.getpid()}")
        return self

    def create(self) -> "OutputFolder":
        """Make the working folder and mark it incomplete (after the targets are locked)."""
        self._made = not self.work.exists()
        self._before = set(files_in(self.work)) if not self._made else set()
        try:
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
        """The run failed before its first row: leave nothing it wrote (bad input loses nothing)."""
        if not self.status:
            return
        try:
            self._remove_what_we_wrote()
        except OSError:
            pass            # a read-only or full filesystem: the original error is what the user needs
        self.status = {}

    def _remove_what_we_wrote(self) -> None:
        if self._made:
            shutil.rmtree(self.work, ignore_errors=True)
        else:       # in place: only papermill's notebook was here before (check() saw to that)
            for rel in set(files_in(self.work)) - self._before:
                (self.work / rel).unlink(missing_ok=True)
            (self.work / STATUS).unlink(missing_ok=True)
            for d in sorted((p for p in self.work.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass

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
                shutil.rmtree(old, ignore_errors=True)
        self.work = self.final
        return self.final
