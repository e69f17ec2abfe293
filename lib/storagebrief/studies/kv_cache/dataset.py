"""The KV files on a target: <target>/storagebrief/kv_cache/<run>/c<client>/<user>-t<turn>-<n>.kv.

Nothing is generated ahead: writing the caches is the measured work. Every run starts from an empty
folder and removes its own folder when it ends (also when it failed); a folder left by a killed run is
removed by the next run's prepare, before anything is written."""
from __future__ import annotations

import shutil
from pathlib import Path

from . import STUDY


def root(target) -> Path:
    return target.study_dir(STUDY.name)


def run_dir(target, run_id: str) -> Path:
    return root(target) / run_id


def fresh(target, run_id: str) -> Path:
    d = run_dir(target, run_id)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def mpi_dir(target) -> Path:
    """Open MPI's scratch folders for launcher: mpi (kit.mpi removes what it puts there)."""
    return root(target) / "mpi"


def remove_leftovers(target) -> list[Path]:
    """Run folders (named by their run id) under the target's kv_cache folder: a killed run's."""
    r = root(target)
    gone = [d for d in sorted(r.iterdir()) if d.is_dir() and d.name.startswith(f"{STUDY.name}-")] if r.exists() else []
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone
