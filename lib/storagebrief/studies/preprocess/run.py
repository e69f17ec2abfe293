"""The preprocess sweep on the shared engine (core.sweep): process counts, then image counts.

Two sweeps on every target, cold cache, targets interleaved run by run: process counts
at image_count images (paper Table 2), then image_counts at each target's best process
count (paper Table 4). The kept output per target (tfrecords/final) is read back with
tf.data at the end; the training study reads it through outputs.json.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...core import results, targets as targets_mod
from ...core.config import ParamsError
from ...core.folders import folder_below
from ...core.outdir import remove_tree
from ...core.sweep import Measurement, Point
from ...kit.space import check_space
from . import STUDY
from ...kit.tf_import import tensorflow
from .dataset import generate_dataset, list_source
from .params import PreprocessParams
from .pipeline import run_pipeline, verify_tfrecords


@dataclass(frozen=True)
class PreprocessConfig:
    """One point: which sweep, the process count (None: the target's best, settled by configure) and images."""
    sweep: str                 # "processes" | "image_count"
    processes: int | None
    image_count: int


@dataclass(frozen=True)
class Dataset:
    """A target's input images: the folder and the files in run order."""
    root: Path
    files: list[Path]


@dataclass
class PreprocessState:
    """What prepare() and the runs leave for later runs and finish() (sweep.state)."""
    datasets: dict[str, Dataset] = field(default_factory=dict)        # target -> its images
    skipped: list[dict] = field(default_factory=list)                 # skipped_files.csv rows
    pending: dict[str, list[str]] = field(default_factory=dict)       # target -> last run's TFRecord names
    best: dict[str, int] = field(default_factory=dict)                # target -> best process count


def _source(p: PreprocessParams) -> Dataset:
    """The user's own folder (preprocess.source_dir), the same for every target."""
    root = Path(p.source_dir).expanduser().resolve()
    files = list_source(root)
    if len(files) < max([p.image_count, *p.image_counts]):
        raise ParamsError(f"preprocess.source_dir = '{p.source_dir}' holds {len(files)} files; "
                          f"preprocess.image_count = {p.image_count} needs at least that many")
    return Dataset(root, files[: p.image_count])


def _bytes_needed(p: PreprocessParams, t) -> int:
    """New bytes the generated TIFFs (less those already there) and their resized output need on a target."""
    root = folder_below(t.study_dir(STUDY.name), "images", create=False)
    needed = p.image_count * (p.image_bytes + 4096) + p.image_count * p.resize_width * p.resize_height * 4
    existing = sum(f.stat().st_size for f in root.rglob("*.tif")) if root.exists() else 0
    return max(0, needed - existing)


def _generated(sweep, t) -> Dataset:
    p: PreprocessParams = sweep.p
    root = folder_below(t.study_dir(STUDY.name), "images", create=False)
    files = generate_dataset(root, p, p.image_count, sweep.log, sweep.status)
    return Dataset(root, files[: p.image_count])


def prepare(sweep) -> None:
    """Datasets and prechecks on every target, before any measured work."""
    p: PreprocessParams = sweep.p
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sweep.status("loading TensorFlow")
    tensorflow()            # imported once here so forked workers share it

    sweep.state = PreprocessState()
    if not p.source_dir:
        check_space(sweep.targets, lambda t: _bytes_needed(p, t), "the TIFF dataset")
    for t in sweep.targets:
        data = _source(p) if p.source_dir else _generated(sweep, t)
        sweep.state.datasets[t.name] = data
        targets_mod.check_profile_speed(t, data.files[:16])


def plan(sweep) -> list[Point]:
    """(sweep, processes or None = the target's best, image_count) x repeats, in run order."""
    p: PreprocessParams = sweep.p
    configs = [PreprocessConfig("processes", proc, p.image_count) for proc in p.processes]
    configs += [PreprocessConfig("image_count", None, n) for n in p.image_counts]
    return [Point(c, r, f"{c.processes} processes, {c.image_count} images" if c.processes
                  else f"best process count, {c.image_count} images")
            for c in configs for r in range(1, p.repeats + 1)]


def configure(sweep, config: PreprocessConfig, target) -> PreprocessConfig:
    """The image-count sweep runs at each target's best process count (highest mean input MB/s)."""
    if config.processes is not None:
        return config
    best = sweep.state.best
    if not best:
        frame = sweep.frame()
        ps = frame[frame.sweep == "processes"].groupby(["target", "processes"]).input_mb_per_s.mean()
        best.update({t.name: int(ps[t.name].idxmax()) for t in sweep.targets})
    return dataclasses.replace(config, processes=best[target.name])


def run_id(config: PreprocessConfig, target, repeat: int) -> str:
    return (f"{STUDY.name}-{config.sweep}-{target.name}-p{config.processes}-n{config.image_count}"
            f"-r{repeat}")


def run_one(run, config: PreprocessConfig) -> Measurement:
    name, procs, count = config.sweep, config.processes, config.image_count
    t, p = run.target, run.p
    state: PreprocessState = run.sweep.state
    root, files = state.datasets[t.name].root, state.datasets[t.name].files
    out = folder_below(t.study_dir(STUDY.name), "tfrecords", create=False) / "current"
    run.cold_cache([root])
    group = run.throttle()
    m = run_pipeline(files[:count], root, out, procs, p, group.procs_files if group else None,
                     on_start=run.start_clock)
    run.stop_clock()
    if m["records_written"] != m["images_ok"]:
        raise RuntimeError(f"{run.run_id}: wrote {m['records_written']} records for {m['images_ok']} images")
    state.skipped += [{"run_id": run.run_id, "target": t.name, **s} for s in m["skipped"]]
    # The last run's output waits in 'pending'; it replaces the kept 'final' only when the whole
    # study completed (finish), so an interrupted study leaves final and outputs.json consistent.
    pending = folder_below(t.study_dir(STUDY.name), "tfrecords", create=False) / "pending"
    remove_tree(pending, pending.parent)
    out.rename(pending)
    state.pending[t.name] = [Path(f).name for f in m["outputs"]]
    row = {"sweep": name, "processes": procs, "image_count": count, "output_mode": p.output_mode,
           **{k: v for k, v in m.items() if k not in ("skipped", "outputs")}}
    return Measurement(row)


def finish(sweep, frame) -> None:
    """skipped_files.csv, and the kept output of every target read back with tf.data (outputs.json)."""
    import pandas as pd

    p: PreprocessParams = sweep.p
    state: PreprocessState = sweep.state
    results.write_csv(sweep.out_dir / "skipped_files.csv",
                      pd.DataFrame(state.skipped, columns=["run_id", "target", "file", "reason"]))
    final = {}
    for t in sweep.targets:
        if t.name not in state.pending:
            continue
        kept = folder_below(t.study_dir(STUDY.name), "tfrecords", create=False) / "final"
        remove_tree(kept, kept.parent)
        (folder_below(t.study_dir(STUDY.name), "tfrecords", create=False) / "pending").rename(kept)
        final[t.name] = [str(kept / f) for f in state.pending[t.name]]
    size = (p.resize_width, p.resize_height)
    checks = {name: verify_tfrecords(paths, int(frame[frame.target == name].iloc[-1].images_ok), size)
              for name, paths in final.items()}
    results.write_json(sweep.out_dir / "outputs.json", {"tfrecords": final, "verification": checks,
                                                        "best_processes": state.best})
    bad = [n for n, c in checks.items() if not c["ok"]]
    if bad:
        raise RuntimeError(f"TFRecord read-back failed for {bad}: {checks}")


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
skip = close = None
