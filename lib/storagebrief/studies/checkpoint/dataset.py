"""The checkpoint folders on a target: <target>/storagebrief/checkpoint/<model>/global_epoch1_step<k>/.

Nothing is generated ahead: the saves are the measured work. A checkpoint is complete only with its
manifest.json (written atomically after the last rank's fsync, then the folder fsync'ed): restores
read only complete checkpoints, and a folder without one (a save cut short, kill -9) is removed
before the next run writes anything."""
from __future__ import annotations

import json
from pathlib import Path

from ...core import results
from ...core.folders import ours
from ...core.outdir import remove_tree, study_folder
from ...core.checkpoint_workloads import CheckpointFile, checkpoint_folder
from ...kit.checkpoint import fsync_dir  # noqa: F401  (dataset.fsync_dir: the run uses it)

MANIFEST = "manifest.json"


# Folders of the study's other sweeps beside the models' folders: no shape may be named so.
RESERVED = ("cost", "framework", "mpi")


def owner(target, study: str) -> Path:
    """<target>/storagebrief/<study>, proven not to lead out of the target (the outdir delete guard)."""
    return study_folder(target.path, study)


def model_dir(target, study: str, model: str) -> Path:
    return target.study_dir(study) / model


def remove(path: Path, target, study: str) -> None:
    """Delete a folder of this study on `target` (the outdir delete guard proves it lies inside the study's folder)."""
    remove_tree(path, owner(target, study))


def folder(root: Path, step: int) -> Path:
    return root / checkpoint_folder(step)


def clear(root: Path, target, study: str) -> None:
    """Remove earlier runs' checkpoints (complete or not): every run starts from an empty folder."""
    remove(root, target, study)
    ours(root)                      # made, each step below storagebrief/ proven ours (core.folders)


def write_manifest(where: Path, model: str, step: int, scale: float, files: list[CheckpointFile]) -> dict:
    """The checkpoint is complete: its files, their bytes and ranks; fsync'ed with the folder."""
    doc = {"model": model, "step": step, "scale": scale, "bytes": sum(f.bytes for f in files),
           "files": [{"rank": f.rank, "name": f.name, "bytes": f.bytes} for f in files]}
    results.write_json(where / MANIFEST, doc)
    fsync_dir(where)
    return doc


def read_manifest(where: Path) -> dict | None:
    try:
        return json.loads((where / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def complete(where: Path) -> bool:
    """A manifest, and every file it lists present at its size."""
    doc = read_manifest(where)
    if doc is None:
        return False
    return all((where / f["name"]).is_file() and (where / f["name"]).stat().st_size == f["bytes"]
               for f in doc["files"])


def remove_incomplete(root: Path, target, study: str) -> list[Path]:
    """Folders under `root` without a manifest (cut short): removed, returned."""
    gone = []
    for d in sorted(root.glob("global_epoch*_step*")) if root.is_dir() and not root.is_symlink() else []:
        if d.is_dir() and not d.is_symlink() and read_manifest(d) is None:
            remove(d, target, study)
            gone.append(d)
    return gone
