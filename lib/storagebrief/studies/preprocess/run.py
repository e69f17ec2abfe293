"""The preprocess sweep on the shared engine (core.sweep): process counts, then image counts.

Two sweeps on every target, cold cache, targets interleaved run by run: process counts
at image_count images (paper Table 2), then image_counts at each target's best process
count (paper Table 4). The kept output per target (tfrecords/final) is read back with
tf.data at the end; the training study reads it through outputs.json.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...core import results, targets as targets_mod
from ...core.config import ParamsError
from ...core.sweep import Measurement, Point
from .dataset import generate_dataset, list_source
from .params import PreprocessParams
from .pipeline import run_pipeline, verify_tfrecords

STUDY = "preprocess"


def _dataset(sweep, t) -> tuple[Path, list[Path]]:
    p: PreprocessParams = sweep.p
    if p.source_dir:
        root = Path(p.source_dir).expanduser().resolve()
        files = list_source(root)
        if len(files) < max([p.image_count, *p.image_counts]):
            raise ParamsError(f"preprocess.source_dir = '{p.source_dir}' holds {len(files)} files; "
                              f"preprocess.image_count = {p.image_count} needs at least that many")
        return root, files[: p.image_count]
    root = t.study_dir(STUDY) / "images"
    needed = p.image_count * (p.image_bytes + 4096) + p.image_count * p.resize_width * p.resize_height * 4
    existing = sum(f.stat().st_size for f in root.rglob("*.tif")) if root.exists() else 0
    targets_mod.check_free_space(t, max(0, needed - existing), "the TIFF dataset")
    files = generate_dataset(root, p, p.image_count, sweep.log, sweep.status)
    return root, files[: p.image_count]


def prepare(sweep) -> None:
    """Datasets and prechecks on every target, before any measured work."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sweep.status("loading TensorFlow")
    import tensorflow  # noqa: F401  (imported once here so forked workers share it)

    sweep.state.update(datasets={}, skipped=[], pending={}, best={})
    for t in sweep.targets:
        root, files = _dataset(sweep, t)
        sweep.state["datasets"][t.name] = (root, files)
        targets_mod.check_profile_speed(t, files[:16])


def plan(sweep) -> list[Point]:
    """(sweep, processes or None = the target's best, image_count) x repeats, in run order."""
    p: PreprocessParams = sweep.p
    configs = [("processes", proc, p.image_count) for proc in p.processes]
    configs += [("image_count", None, n) for n in p.image_counts]
    return [Point(c, r, f"{c[1]} processes, {c[2]} images" if c[1] else f"best process count, {c[2]} images")
            for c in configs for r in range(1, p.repeats + 1)]


def configure(sweep, config, target):
    """The image-count sweep runs at each target's best process count (highest mean input MB/s)."""
    name, procs, count = config
    if procs is not None:
        return config
    best = sweep.state["best"]
    if not best:
        frame = sweep.frame()
        ps = frame[frame.sweep == "processes"].groupby(["target", "processes"]).input_mb_per_s.mean()
        best.update({t.name: int(ps[t.name].idxmax()) for t in sweep.targets})
    return name, best[target.name], count


def run_id(config, target, repeat: int) -> str:
    name, procs, count = config
    return f"{STUDY}-{name}-{target.name}-p{procs}-n{count}-r{repeat}"


def run_one(run, config) -> Measurement:
    name, procs, count = config
    t, p = run.target, run.p
    root, files = run.sweep.state["datasets"][t.name]
    out = t.study_dir(STUDY) / "tfrecords" / "current"
    run.cold_cache([root])
    group = run.throttle()
    m = run_pipeline(files[:count], root, out, procs, p, group.procs_files if group else None,
                     on_start=run.start_clock)
    run.stop_clock()
    if m["records_written"] != m["images_ok"]:
        raise RuntimeError(f"{run.run_id}: wrote {m['records_written']} records for {m['images_ok']} images")
    run.sweep.state["skipped"] += [{"run_id": run.run_id, "target": t.name, **s} for s in m["skipped"]]
    # The last run's output waits in 'pending'; it replaces the kept 'final' only when the whole
    # study completed (finish), so an interrupted study leaves final and outputs.json consistent.
    pending = t.study_dir(STUDY) / "tfrecords" / "pending"
    if pending.exists():
        shutil.rmtree(pending)
    out.rename(pending)
    run.sweep.state["pending"][t.name] = [Path(f).name for f in m["outputs"]]
    row = {"sweep": name, "processes": procs, "image_count": count, "output_mode": p.output_mode,
           **{k: v for k, v in m.items() if k not in ("skipped", "outputs")}}
    return Measurement(row)


def finish(sweep, frame) -> None:
    """skipped_files.csv, and the kept output of every target read back with tf.data (outputs.json)."""
    import pandas as pd

    p: PreprocessParams = sweep.p
    results.write_csv(sweep.out_dir / "skipped_files.csv",
                      pd.DataFrame(sweep.state["skipped"], columns=["run_id", "target", "file", "reason"]))
    final = {}
    for t in sweep.targets:
        if t.name not in sweep.state["pending"]:
            continue
        kept = t.study_dir(STUDY) / "tfrecords" / "final"
        if kept.exists():
            shutil.rmtree(kept)
        (t.study_dir(STUDY) / "tfrecords" / "pending").rename(kept)
        final[t.name] = [str(kept / f) for f in sweep.state["pending"][t.name]]
    size = (p.resize_width, p.resize_height)
    checks = {name: verify_tfrecords(paths, int(frame[frame.target == name].iloc[-1].images_ok), size)
              for name, paths in final.items()}
    results.write_json(sweep.out_dir / "outputs.json", {"tfrecords": final, "verification": checks,
                                                        "best_processes": sweep.state["best"]})
    bad = [n for n, c in checks.items() if not c["ok"]]
    if bad:
        raise RuntimeError(f"TFRecord read-back failed for {bad}: {checks}")
