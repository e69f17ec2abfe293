"""The KV files on a target: <target>/storagebrief/kv_cache/<run>/c<client>/<user>-t<turn>-<n>.kv.

Nothing is generated ahead: writing the caches is the measured work. Every run starts from an empty
folder and removes its own folder when it ends (also when it failed); a folder left by a killed run is
removed by the next run's prepare, before anything is written."""
from __future__ import annotations

from pathlib import Path

from ...core.folders import folder_below
from ...core.outdir import remove_tree
from . import STUDY


def root(target) -> Path:
    return target.study_dir(STUDY.name)


def run_dir(target, run_id: str) -> Path:
    return root(target) / run_id


def fresh(target, run_id: str) -> Path:
    """An empty run folder, a real one below the study folder (a symlink there is refused in one line)."""
    base = root(target)
    d = folder_below(base, run_id, create=False)
    remove_tree(d, base)
    return folder_below(base, run_id)


def remove(folder: Path) -> None:
    """The run's folder, only below its study folder (the link alone, were it a symlink)."""
    remove_tree(folder, folder.parent, ignore_errors=True)    # a failing filesystem: the run's own error says more


def mpi_dir(target) -> Path:
    """Open MPI's scratch folders for launcher: mpi (kit.mpi removes what it puts there)."""
    return folder_below(root(target), "mpi", create=False)


def remove_leftovers(target) -> list[Path]:
    """Run folders (named by their run id) under the target's kv_cache folder: a killed run's."""
    r = root(target)
    gone = [d for d in sorted(r.iterdir()) if d.name.startswith(f"{STUDY.name}-")
            and d.is_dir() and not d.is_symlink()] if r.exists() else []       # a symlink there is not ours
    for d in gone:
        remove_tree(d, r)
    return gone
