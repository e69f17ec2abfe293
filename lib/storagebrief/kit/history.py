"""Earlier studies of the same knobs on this machine (issues 48, 61): a page-1 range built from one study's repeats
held neither the next study's answer nor this VM's drift (ingest 512.6 (500.4–524.8) then 494.3 (489.0–499.6) 23
minutes apart), and with one history per results folder a notebook run, a CLI run and `make study` never saw each
other (vector search 175, 92.2 and 263 queries/s, each "(one run)").

One history per project: `<project>/reports/history/answers.csv` (the project: the nearest folder above the results
holding params.yaml and dvc.yaml). Every study run records the values behind its page-1 answers there when it ends
(notebook.run_study, `storagebrief <study>`, `dvc repro` through the notebooks), and every brief render records
those of the studies it shows; a brief of any study of the same study, parameters (params hash), code (the commit)
and machine (host, CPU, threads, memory, kernel) shows the range over all of them, and how many came from each
entry point. Results outside any project keep their history beside them, in `<reports>/history/answers.csv`.

The file is tidy, one row per value: recorded_utc, study, run_id (sha256 of the study's runs.csv, 12 hex: a
re-render of the same results adds nothing), params_hash, code, machine, entry (pipeline, notebook or CLI), measure,
target, value. Rows are only appended: one write() of whole lines to a file opened O_APPEND, under an flock on it,
so two processes recording at once both land. The file and its folder are data anyone with write access to a shared
project could have made: a symlink, something not a regular file, another user's or one others can write is refused
in one line (UnsafeHistory) and read as empty; nothing from it is printed but parsed numbers and counts by entry
point (an unknown entry counts as "other"). It is not a DVC output: `dvc repro` leaves it; delete it to forget.

Before issue 61 each brief kept `<reports>/answers-history.csv` beside its results. Those files are read, never
written: a brief of a study there still counts the earlier studies they hold (as "other": their entry point was not
recorded), matched as they were then."""
from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import stat
import time
from collections import Counter
from pathlib import Path

from ..core.folders import UnsafeFolder

FOLDER, FILE = "history", "answers.csv"
SHOWN = "reports/history/answers.csv"            # how the brief names it
LEGACY = "answers-history.csv"                   # the per-folder file before issue 61: read, never written
COLUMNS = ["recorded_utc", "study", "run_id", "params_hash", "code", "machine", "entry", "measure", "target", "value"]
LEGACY_COLUMNS = ["recorded_utc", "study", "run_id", "params_hash", "code", "machine", "measure", "target", "value"]
ENTRIES = ("pipeline", "notebook", "CLI")        # core.inventory.entry_point; anything else counts as "other"
MACHINE_KEYS = ("hostname", "cpu_model", "cpu_threads", "memory_total_bytes", "kernel")
PROJECT_MARKERS = ("params.yaml", "dvc.yaml")    # core.config.project_root's


class UnsafeHistory(UnsafeFolder):
    """The history file or its folder is a symlink, not a regular file/folder, or not ours: nothing was read or
    written there."""


def project_of(folder) -> Path | None:
    """The project holding `folder` (walking up its path as given, so a reports/ that is a symlink still belongs to
    its project), or None."""
    here = Path(os.path.abspath(folder))
    for d in (here, *here.parents):
        if all((d / m).is_file() for m in PROJECT_MARKERS):
            return d
    return None


def location(reports_dir, project_only: bool = False) -> Path | None:
    """The history file for results in `reports_dir`: the project's, or beside them outside any project (None with
    project_only: a run's end writes nowhere outside a project but the folders it was given)."""
    root = project_of(reports_dir)
    if root is None:
        return None if project_only else Path(reports_dir) / FOLDER / FILE
    return root / "reports" / FOLDER / FILE


def identity(study_dir) -> dict | None:
    """{study, run_id, params_hash, code, legacy_code, machine, entry} of a study's results folder, or None without
    runs.csv or inventory.json. code: the package's commit, or the project's (its git_commit, "-dirty" included)
    where the package is the project's own checkout; legacy_code: what the per-folder files recorded."""
    if study_dir is None:
        return None
    d = Path(study_dir)
    try:
        run_id = hashlib.sha256((d / "runs.csv").read_bytes()).hexdigest()[:12]
        inv = json.loads((d / "inventory.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(inv, dict) or not inv.get("params_hash"):
        return None
    try:
        status = json.loads((d / "status.json").read_text())
    except (OSError, ValueError):
        status = {}
    study = status.get("study") if isinstance(status, dict) and isinstance(status.get("study"), str) else d.name
    package = str(inv.get("package_git_commit", ""))
    code = str(inv.get("git_commit", "")) if package in ("same checkout", "") else package
    return {"study": study, "run_id": run_id, "params_hash": str(inv["params_hash"]), "code": code,
            "legacy_code": package, "machine": "|".join(str(inv.get(k, "")) for k in MACHINE_KEYS),
            "entry": _entry(inv.get("entry"))}


def _entry(text) -> str:
    return text if text in ENTRIES else "other"


def _why_not_ours(st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"is writable by {'others' if mode & 0o002 else 'its group'} (mode {mode:04o})"
    return None


def _refuse(path: Path, why: str) -> UnsafeHistory:
    return UnsafeHistory(f"answers history {path} {why}: storagebrief reads and appends only a regular file of its "
                         "own there (not writable by group or others); move it away and run again")


def _checked(path: Path, fd: int, kind) -> int:
    st = os.fstat(fd)
    why = None if kind(st.st_mode) else "is not a " + ("folder" if kind is stat.S_ISDIR else "regular file")
    why = why or _why_not_ours(st)
    if why:
        os.close(fd)
        raise _refuse(path, why)
    return fd


def _open(path: Path, write: bool) -> int | None:
    """An fd of the history file (None: there is none to read), never followed, proven a regular file of ours; the
    history/ folder holding it proven a folder of ours too (a per-folder file's folder is the user's results)."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if write:
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path.parent, 0o755)
        except FileExistsError:
            pass
    dfd, at = None, path.parent
    try:
        if path.parent.name == FOLDER:
            dfd = _checked(path.parent, os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | flags), stat.S_ISDIR)
        mode, at = (os.O_RDWR | os.O_APPEND | os.O_CREAT) if write else os.O_RDONLY, path
        fd = os.open(path.name if dfd is not None else path, mode | flags, 0o644, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):         # O_NOFOLLOW met a symlink (or a file for a folder)
            link = os.path.islink(at)
            raise _refuse(at, "is a symlink" if link else "is not a folder") from None
        raise
    finally:
        if dfd is not None:
            os.close(dfd)
    return _checked(path, fd, stat.S_ISREG)


def _read_fd(fd: int) -> str:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _parse(text: str, columns: list[str]) -> list[dict]:
    """Whole lines only (a line being appended right now is not one yet); rows without every column ignored."""
    text = text[: text.rfind("\n") + 1]
    return [r for r in csv.DictReader(io.StringIO(text)) if set(columns) <= set(r) and None not in r.values()]


def _rows(path: Path, columns: list[str]) -> list[dict]:
    """The rows of a history file; [] when there is none or it is refused (record() says why, in one line)."""
    try:
        fd = _open(path, write=False)
    except (UnsafeHistory, OSError):
        return []
    if fd is None:
        return []
    try:
        return _parse(_read_fd(fd), columns)
    finally:
        os.close(fd)


class Earlier(list):
    """The values of earlier studies, one list per study (oldest first), with each one's entry point (`entries`)
    and this study's own (`own`)."""

    def __init__(self, values=(), entries=(), own: str = "other"):
        super().__init__(values)
        self.entries, self.own = list(entries), own

    def origins(self) -> str:
        """'2 notebook, 1 pipeline': where this study and the earlier ones came from."""
        n = Counter([self.own, *self.entries])
        return ", ".join(f"{n[e]} {e}" for e in (*ENTRIES, "other") if n[e])


def earlier(study_dir, measure: str, target: str) -> Earlier:
    """The values of `measure` on `target` from every other recorded study of the same study, parameters and code
    on the same machine as `study_dir`'s (the project's history, then a per-folder file beside it), one list per
    study, oldest first; empty when none or nothing can be matched."""
    me = identity(study_dir)
    if me is None:
        return Earlier()
    reports = Path(study_dir).parent
    by_run: dict[str, tuple[str, list[float]]] = {}
    for rows, code, legacy in ((_rows(location(reports), COLUMNS), me["code"], False),
                               (_rows(reports / LEGACY, LEGACY_COLUMNS), me["legacy_code"], True)):
        fresh: dict[str, tuple[str, list[float]]] = {}
        for r in rows:
            same = (r["study"], r["measure"], r["target"], r["params_hash"], r["code"], r["machine"]) == (
                me["study"], measure, target, me["params_hash"], code, me["machine"])
            if not same or r["run_id"] in (me["run_id"], *by_run):
                continue
            v = _value(r["value"])
            if v is not None:
                fresh.setdefault(r["run_id"], ("other" if legacy else _entry(r["entry"]), []))[1].append(v)
        by_run.update(fresh)                # a study in both files: the project's rows only
    return Earlier([v for _, v in by_run.values()], [e for e, _ in by_run.values()], me["entry"])


def _value(text) -> float | None:
    """A recorded value, or None when it is not a finite positive number: the file is anyone's to edit, and a
    row of -5e9 or inf must not stretch page 1's range to "-5,000,000,000.0–inf"."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _append(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def record(reports_dir, answers: list[dict], study_dirs: dict, project_only: bool = False) -> int:
    """Append the values behind page-1 answers (each answer's `measures`: {measure: values}, its `study` a key of
    study_dirs) not recorded yet to the history of `reports_dir`'s results (location()); returns how many rows
    were added. A history file that is not ours raises UnsafeHistory (one line)."""
    path = location(reports_dir, project_only)
    if path is None:
        return 0
    fd = _open(path, write=True)
    if fd is None:                          # its folder went away between the mkdir and the open
        raise FileNotFoundError(errno.ENOENT, "the answers history's folder vanished", str(path.parent))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)      # one recorder at a time: the check for rows already there holds
        text = _read_fd(fd)
        seen = {(r["run_id"], r["measure"], r["target"]) for r in _parse(text, COLUMNS)}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        new = []
        for a in answers:
            me = identity(study_dirs.get(a.get("study")))
            if me is None:
                continue
            for measure, values in (a.get("measures") or {}).items():
                key = (me["run_id"], measure, str(a["target"]))
                if key in seen:
                    continue
                seen.add(key)
                new += [{**me, "recorded_utc": now, "study": a["study"], "measure": measure,
                         "target": str(a["target"]), "value": repr(float(v))} for v in values if _value(v) is not None]
        if new:
            out = io.StringIO()
            w = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
            if not text:
                w.writeheader()
            w.writerows(new)
            lead = "\n" if text and not text.endswith("\n") else ""    # a line a killed writer cut stays its own
            _append(fd, (lead + out.getvalue()).encode())
    finally:
        os.close(fd)                        # and the lock with it
    return len(new)
