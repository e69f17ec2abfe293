"""Results I/O: one row per measured run, written atomically.

A row is appended only after its run finished, by rewriting the CSV to a temp
file and renaming it over the old one, so an interrupted run leaves no row and
no half-written file. Readers check the schema.
"""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .columns import REQUIRED_COLUMNS as COMMON_COLUMNS  # every runs.csv has them (one list: core.columns)
from .columns import RUNS_SCHEMA_VERSION, SCHEMA_FILE


class SchemaError(ValueError):
    pass


# What to do about the environment's failures (a disk that filled, a read-only mount): one line each.
OS_ERROR_HINTS = {errno.ENOSPC: "free space there or choose another target / output folder",
                  errno.EDQUOT: "free space there (disk quota) or choose another target / output folder",
                  errno.EROFS: "the filesystem is read-only: choose a writable folder",
                  errno.EACCES: "you may not write there: choose a folder you own",
                  errno.EPERM: "the operation is not permitted here: choose a folder you own"}


def os_error_hint(exc: OSError) -> str:
    return OS_ERROR_HINTS.get(exc.errno, "")


def utc_now() -> str:
    """The started_at stamp of a run row."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp makes 0600 files; results get the usual mode so others on a shared server can read them.
FILE_MODE = 0o666 & ~_umask()


# Temporary files of atomic writes start with this (a prefix no user writes), so a killed run's are
# told from a user's own hidden files by name, never by shape (core.outdir).
TEMP_PREFIX = ".storagebrief-tmp."


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:        # write()/fsync() name no file: say which one filled the disk
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def finite(obj):
    """`obj` with every NaN or infinite number (float, numpy, pandas NA) made None: results JSON is strict JSON,
    which has no NaN (a reader other than Python's json refuses the file)."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():      # a numpy scalar
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj


def json_text(obj, indent: int = 2, sort_keys: bool = True) -> str:
    """Strict JSON (allow_nan=False) of `obj` after `finite`: NaN and infinities are null."""
    return json.dumps(finite(obj), indent=indent, sort_keys=sort_keys, default=str, allow_nan=False)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json_text(obj) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


class RunTable:
    """Accumulates finished-run rows and keeps `path` equal to them on disk."""

    def __init__(self, path: Path, fresh: bool = True):
        self.path = Path(path)
        self.rows: list[dict] = []
        if not fresh and self.path.exists():
            self.rows = pd.read_csv(self.path).to_dict("records")
        else:
            self.path.unlink(missing_ok=True)

    def append(self, row: dict) -> None:
        missing = [c for c in COMMON_COLUMNS if c not in row]
        if missing:
            raise SchemaError(f"run row lacks required columns {missing}")
        self.rows.append(row)
        write_csv(self.path, self.frame())

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def check_schema_version(runs_path: Path) -> int:
    """The run table's schema version from its sidecar (1 when there is none: written before it
    existed); a table from a newer storagebrief is refused rather than misread."""
    sidecar = Path(runs_path).with_name(SCHEMA_FILE)
    if not sidecar.is_file():
        return 1
    try:
        version = json.loads(sidecar.read_text()).get("schema_version")
    except (OSError, ValueError, AttributeError) as exc:
        raise SchemaError(f"{sidecar} cannot be read: {exc}") from None
    if not isinstance(version, int) or version < 1:
        raise SchemaError(f"{sidecar}: schema_version {version!r} is not a positive whole number")
    if version > RUNS_SCHEMA_VERSION:
        raise SchemaError(f"{runs_path} has run-table schema {version}; this storagebrief reads up to "
                          f"{RUNS_SCHEMA_VERSION}: update storagebrief to read it")
    return version


def read_runs(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    from .reruns import kept
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results at {path}: run the study first")
    check_schema_version(path)
    frame = pd.read_csv(path)
    missing = [c for c in (*COMMON_COLUMNS, *required) if c not in frame.columns]
    if missing:
        raise SchemaError(f"{path} lacks columns {missing}")
    return kept(frame)     # disturbed runs a later row re-ran left out (core/reruns.py)


@contextmanager
def staged_dir(directory: Path):
    """Build a dataset folder beside its final place, then rename it in (write its manifest last,
    inside the block). A run killed mid-way leaves no half dataset where the next run looks for
    one; halves of earlier killed runs (ours) are removed first (the target lock keeps our other runs
    out). The staging folder is mkdtemp's, in a parent proven ours (core.folders: another user can
    neither predict nor swap it), and the rename goes through the parent's directory fd."""
    from .folders import close_modes, rename_in, stale_staging, staging_folder
    directory = Path(directory)
    tmp = staging_folder(directory)          # its parent proven ours first
    for old in stale_staging(directory):
        if old != tmp:
            shutil.rmtree(old, ignore_errors=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    close_modes(tmp)                         # folders the study made inside: 0755 whatever the umask
    rename_in(tmp, directory)
