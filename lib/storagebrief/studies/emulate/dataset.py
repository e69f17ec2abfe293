"""The emulate datasets: each workload's files of real random bytes (npz, TFRecord or JPEG), on every target."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ...core import results
from ...formats import jpeg, npz, tfrecord
from . import mlperf
from .params import MLPERF_DATASET_FACTOR, WORKLOADS, EmulateParams, WorkloadSpec

# Bumped when a format's files change, so older datasets are regenerated rather than reused.
# tfrecord 2: every frame carries the real masked CRC-32C of its data (version 1 wrote 0,
# which tf.data rejects as corrupt).
FORMAT_VERSION = {"npz": 1, "tfrecord": 2, "jpeg": 1}


def sample_sizes(spec: WorkloadSpec, num_files: int, seed: int) -> np.ndarray:
    """Bytes of every sample, shape (files, samples_per_file): normal(mean, stdev), clipped."""
    rng = np.random.default_rng([seed, 17])
    shape = (num_files, spec.samples_per_file)
    if spec.record_bytes_stdev == 0:
        return np.full(shape, spec.record_bytes, dtype=np.int64)
    sizes = rng.normal(spec.record_bytes, spec.record_bytes_stdev, size=shape)
    hi = spec.record_bytes + 4 * spec.record_bytes_stdev
    return np.clip(np.rint(sizes), min(4096, spec.record_bytes), hi).astype(np.int64)


def dataset_spec(name: str, spec: WorkloadSpec, num_files: int, seed: int) -> dict:
    """What a dataset on disk must match to be reused (the manifest's "spec")."""
    return {"workload": name, "format": spec.format, "num_files": num_files,
            "samples_per_file": spec.samples_per_file, "record_bytes": spec.record_bytes,
            "record_bytes_stdev": spec.record_bytes_stdev, "seed": seed, "version": FORMAT_VERSION[spec.format]}


def _reusable(directory: Path, want: dict) -> dict | None:
    manifest = directory / "manifest.json"
    if not manifest.exists():
        return None
    try:
        old = json.loads(manifest.read_text())
        files = [directory / f for f in old.get("files", [])]
        if old.get("spec") == want and all(f.exists() for f in files):
            return {"files": [str(f) for f in files], "spans": old["spans"], "bytes": old["bytes"]}
    except (ValueError, KeyError):
        pass
    return None


def generate_dataset(directory: Path, name: str, spec: WorkloadSpec, num_files: int, seed: int,
                     log=print) -> dict:
    """Write the workload's files with real random bytes; reuse a matching set.

    Returns {"files": [...], "spans": [[(offset, length), ...] per file], "bytes": total}.
    """
    want = dataset_spec(name, spec, num_files, seed)
    found = _reusable(directory, want)
    if found is not None:
        return found
    sizes = sample_sizes(spec, num_files, seed)
    rng = np.random.default_rng([seed, 23])
    ext = {"npz": "npz", "tfrecord": "tfrecord", "jpeg": "jpg"}[spec.format]
    names, spans = [], []
    with results.staged_dir(directory) as tmp:
        for i in range(num_files):
            fname = f"img_{i:07d}_of_{num_files:07d}.{ext}"
            path = tmp / fname
            if spec.format == "npz":
                spans.append([list(npz.write_random(path, sizes[i, 0], rng))])
            elif spec.format == "jpeg":
                spans.append([list(jpeg.write_random(path, sizes[i, 0], rng))])
            else:
                payloads = (rng.bytes(int(n)) for n in sizes[i])
                spans.append([list(s) for s in tfrecord.write_frames(path, payloads)])
            names.append(fname)
        total = sum((tmp / n).stat().st_size for n in names)
        os.sync()
        results.write_json(tmp / "manifest.json", {"spec": want, "files": names, "spans": spans, "bytes": total})
    log(f"generated {num_files} {spec.format} files for {name} ({total / 1e6:.1f} MB) in {directory}")
    return {"files": [str(directory / n) for n in names], "spans": spans, "bytes": total}


def planned_files(p: EmulateParams, spec: WorkloadSpec) -> int:
    """Files to generate: num_files, or at least 5 x host memory under the MLPerf rule (with mlperf_rules: the
    rules' formula, which also asks for 500 steps per epoch at the largest accelerator count)."""
    if p.dataset_sizing in ("memory_cap", "fixed"):
        return int(p.num_files)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if p.mlperf_rules:
        return max(p.num_files or 0, mlperf.dataset_files(spec.batch_for(p.accelerator_type), p.max_accelerators,
                                                          p.mlperf_hosts, mem, spec.record_bytes, spec.samples_per_file))
    per_file = spec.samples_per_file * spec.record_bytes
    return max(p.num_files or 0, math.ceil(MLPERF_DATASET_FACTOR * mem / per_file))


def files_for(p: EmulateParams, spec: WorkloadSpec, name: str, n: int, base: int) -> int:
    """Files a run of `n` accelerators reads: `base` (planned_files), grown with N as MLPerf Storage sizes its data
    set (Rules.md 3.1.2: steps per epoch x batch x accelerators) so that each accelerator gets
    emulate.min_steps_per_epoch full steps per epoch; a run reads the first files of its target's dataset."""
    steps = p.steps_floor(name)
    if not steps:
        return base
    batch = spec.batch_for(p.accelerator_type)
    return max(base, n * -(-steps * batch // spec.samples_per_file))


def first_files(data: dict, count: int) -> dict:
    """The dataset description (core.store's fill) cut to its first `count` files: what a run at N reads."""
    if count >= len(data["files"]):
        return data
    sizes = data["sizes"][:count]
    return {**data, "files": data["files"][:count], "spans": data["spans"][:count], "sizes": sizes,
            "bytes": int(sum(sizes))}


def study_description(p: EmulateParams, datasets: dict, tlist) -> dict:
    """What ran, for the brief (study.json): resolved workloads vs their reference values."""
    out = {"scale_note": "", "workloads": {}, "accelerator_type": p.accelerator_type, "epochs": p.epochs,
           "min_steps_per_epoch": {name: p.steps_floor(name) for name in p.workloads},
           "dataset_sizing": p.dataset_sizing, "memory_limit_mib": p.memory_limit_mib, "odirect": p.odirect}
    scaled = []
    for name in p.workloads:
        spec = p.spec(name)
        ref = WORKLOADS.get(name)
        entry = {"spec": spec.model_dump(), "reference": ref}
        data = datasets[(tlist[0].name, name)]
        entry["num_files"], entry["dataset_bytes"] = len(data["files"]), data["bytes"]
        if ref:
            ref_spec = WorkloadSpec.model_validate(ref)
            differs = (spec.record_bytes != ref_spec.record_bytes or
                       spec.compute_s.get(p.accelerator_type) != ref_spec.compute_s.get(p.accelerator_type) or
                       spec.batch_for(p.accelerator_type) != ref_spec.batch_for(p.accelerator_type))
            entry["scaled_down"] = differs
            if differs:
                scaled.append(
                    f"{name}: records {spec.record_bytes / 1e6:.2f} MB (reference {ref_spec.record_bytes / 1e6:.1f} MB), "
                    f"batch {spec.batch_for(p.accelerator_type)} (reference {ref_spec.batch_for(p.accelerator_type)}), "
                    f"compute {spec.compute_s[p.accelerator_type]} s per batch (reference "
                    f"{ref_spec.compute_s.get(p.accelerator_type)} s on {p.accelerator_type})")
        out["workloads"][name] = entry
    if scaled:
        out["scale_note"] = "; ".join(scaled)
    return out
