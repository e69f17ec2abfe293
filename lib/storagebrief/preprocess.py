"""Preprocessing ingest study: TIFF -> OpenCV resize -> TFRecord with P processes.

Reproduces Colfax/Micron (2018): read large TIFFs with OpenCV, rescale each to a
low resolution, append it to a TFRecord and write it back, with P concurrent
processes; bandwidth (input MB/s) and completion time per process count, then
per image count at the best process count, compared across storage targets.

Pipeline per image (timed separately so a reader sees what bound the run):
  read          the file's bytes (open + read; the storage part)
  decode_resize cv2.imdecode + depth/colour mapping + cv2.resize
  encode_write  PNG encode + tf.train.Example + TFRecordWriter.write
                (single-file mode: the parent's write is added to this stage)

Depth and colour mapping (documented choice): every output is 8-bit RGB.
16-bit input is scaled linearly over the full range (v * 255 / 65535, rounded),
not per-image normalised, so intensities stay comparable between images; float
input in [0, 1] is scaled by 255. Gray is replicated to three channels; alpha
is dropped. OpenCV's BGR order is converted to RGB.

Bad files (zero-byte, not a TIFF, truncated, undecodable) are skipped, counted
and listed per run; the run goes on. Labels follow the ImageFolder convention:
the index of the file's class subfolder (sorted), or 0 for a flat folder.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import shutil
import struct
import time
import traceback
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from . import cache, cgroups, inventory, monitor, results, targets as targets_mod
from .config import Params, ParamsError, Strict, sorted_counts

STUDY = "preprocess"
TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
INTERPOLATIONS = {"area": "INTER_AREA", "linear": "INTER_LINEAR", "cubic": "INTER_CUBIC",
                  "nearest": "INTER_NEAREST", "lanczos": "INTER_LANCZOS4"}
RUN_COLUMNS = (
    "study", "run_id", "sweep", "target", "profile", "processes", "image_count", "repeat",
    "started_at", "cache_method", "emulated", "output_mode", "images_ok", "images_skipped",
    "input_bytes", "output_bytes", "records_written", "completion_time_s", "input_mb_per_s",
    "images_per_s", "output_mb_per_s", "read_s_total", "decode_resize_s_total",
    "encode_write_s_total", "read_share_percent", "decode_resize_share_percent",
    "encode_write_share_percent", "dominant_stage",
)


class PreprocessParams(Strict):
    source_dir: str | None = None          # your own TIFFs (class subfolders optional)
    image_count: int = Field(48, ge=1, le=10_000_000)   # images in the process sweep
    image_counts: list[int] = Field(default_factory=lambda: [8, 24], min_length=0)
    processes: list[int] = Field(default_factory=lambda: [1, 2, 4], min_length=1)
    image_width: int = Field(1920, ge=16, le=40_000)
    image_height: int = Field(1080, ge=16, le=40_000)
    bit_depth: Literal[8, 16] = 8
    channels: Literal[1, 3] = 3
    num_classes: int = Field(4, ge=1, le=10_000)
    resize_width: int = Field(256, ge=8, le=8192)
    resize_height: int = Field(256, ge=8, le=8192)
    interpolation: Literal["area", "linear", "cubic", "nearest", "lanczos"] = "area"
    output_mode: Literal["sharded", "single"] = "sharded"
    repeats: int = Field(3, ge=1, le=100)
    seed: int = 0

    @field_validator("processes")
    @classmethod
    def _processes(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "process counts", 1, 1024)

    @field_validator("image_counts")
    @classmethod
    def _counts(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "image counts")

    @field_validator("source_dir")
    @classmethod
    def _source(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).expanduser().is_dir():
            raise ValueError(f"source folder '{v}' does not exist or is not a directory")
        return v

    @model_validator(mode="after")
    def _enough_images(self):
        if self.image_counts and max(self.image_counts) > self.image_count:
            raise ValueError(f"image_counts {self.image_counts} exceed image_count={self.image_count}: "
                             "the dataset has only image_count images")
        return self

    @property
    def image_bytes(self) -> int:
        return self.image_width * self.image_height * self.channels * (self.bit_depth // 8)


# --------------------------------------------------------------------------- dataset
def class_pattern(label: int, num_classes: int, h: int, w: int, rng: np.random.Generator,
                  channels: int, bit_depth: int) -> np.ndarray:
    """Class-dependent content (learnable) plus noise (not compressible)."""
    hue = 2 * math.pi * label / max(1, num_classes)
    tint = np.array([math.cos(hue), math.cos(hue + 2.1), math.cos(hue + 4.2)]) * 0.3 + 0.5
    freq = 2 + 3 * (label % 5)
    x = np.linspace(0, 2 * math.pi * freq, w, dtype=np.float32)
    stripes = (0.5 + 0.25 * np.sin(x))[None, :]
    base = stripes[..., None] * tint[None, None, :].astype(np.float32)   # (1, w, 3)
    noise = rng.standard_normal((h, w, 3), dtype=np.float32) * 0.12
    img = np.clip(base + noise, 0, 1)
    if channels == 1:
        img = img.mean(axis=2)
    scale = 255 if bit_depth == 8 else 65535
    return (img * scale).astype(np.uint8 if bit_depth == 8 else np.uint16)


def generate_dataset(directory: Path, p: PreprocessParams, count: int, log=print) -> list[Path]:
    """Write `count` synthetic uncompressed TIFFs in class subfolders; reuse a matching set."""
    import cv2

    spec = {"count": count, "w": p.image_width, "h": p.image_height, "depth": p.bit_depth,
            "channels": p.channels, "classes": p.num_classes, "seed": p.seed, "version": 1}
    manifest = directory / "manifest.json"
    if manifest.exists():
        import json
        try:
            if json.loads(manifest.read_text()) == spec:
                files = sorted(directory.rglob("*.tif"), key=lambda f: f.name)
                if len(files) == count:
                    return files
        except ValueError:
            pass
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(p.seed)
    files = []
    for i in range(count):
        label = i % p.num_classes
        img = class_pattern(label, p.num_classes, p.image_height, p.image_width, rng,
                            p.channels, p.bit_depth)
        if img.ndim == 3:
            img = img[..., ::-1]  # OpenCV writes BGR
        sub = directory / f"class_{label:04d}"
        sub.mkdir(exist_ok=True)
        f = sub / f"img_{i:07d}.tif"
        if not cv2.imwrite(str(f), np.ascontiguousarray(img), [cv2.IMWRITE_TIFF_COMPRESSION, 1]):
            raise OSError(f"OpenCV could not write {f}")
        files.append(f)
    results.write_json(manifest, spec)
    log(f"generated {count} TIFFs ({p.image_bytes / 1e6:.1f} MB each) in {directory}")
    return files  # in index order, so any prefix holds every class


def list_source(directory: Path) -> list[Path]:
    """Every regular file below the folder (non-TIFFs are skipped later, and listed)."""
    return sorted(f for f in directory.rglob("*") if f.is_file() and f.name != "manifest.json")


def label_for(path: Path, root: Path) -> int:
    rel = path.relative_to(root)
    if len(rel.parts) < 2:
        return 0
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    return classes.index(rel.parts[0])


# --------------------------------------------------------------------------- pipeline
class BadImage(Exception):
    pass


def to_rgb8(img: np.ndarray) -> np.ndarray:
    """Map any decoded image to 8-bit RGB (see module docstring)."""
    import cv2

    if img.dtype == np.uint16:
        img = cv2.convertScaleAbs(img, alpha=255.0 / 65535.0)
    elif img.dtype in (np.float32, np.float64):
        img = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise BadImage(f"unsupported sample type {img.dtype}")
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    if img.shape[2] == 3:
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    raise BadImage(f"unsupported channel count {img.shape[2]}")


def decode_resize(data: bytes, size: tuple[int, int], interpolation: str) -> np.ndarray:
    import cv2

    if not data:
        raise BadImage("zero-byte file")
    if data[:4] not in TIFF_MAGIC:
        raise BadImage("not a TIFF (bad magic bytes)")
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise BadImage("OpenCV could not decode it (truncated or corrupt)")
    rgb = to_rgb8(img)
    return cv2.resize(rgb, size, interpolation=getattr(cv2, INTERPOLATIONS[interpolation]))


def encode_example(rgb: np.ndarray, label: int, filename: str) -> bytes:
    import cv2
    import tensorflow as tf

    ok, png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise BadImage("PNG encode failed")
    f = tf.train.Feature
    example = tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": f(bytes_list=tf.train.BytesList(value=[png.tobytes()])),
        "image/format": f(bytes_list=tf.train.BytesList(value=[b"png"])),
        "image/height": f(int64_list=tf.train.Int64List(value=[rgb.shape[0]])),
        "image/width": f(int64_list=tf.train.Int64List(value=[rgb.shape[1]])),
        "image/channels": f(int64_list=tf.train.Int64List(value=[3])),
        "image/class/label": f(int64_list=tf.train.Int64List(value=[label])),
        "image/filename": f(bytes_list=tf.train.BytesList(value=[filename.encode()])),
    }))
    return example.SerializeToString()


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _worker(wid: int, nworkers: int, tasks, out_q, out_dir: str, mode: str, size, interp: str,
            root: str, procs_files: list[str]) -> None:
    """One ingest process: warm up, join the throttle cgroup, then take images until None."""
    try:
        warm_up(size, interp)
        if procs_files:
            cgroups.join(procs_files)
        writer, shard = None, None
        if mode == "sharded":
            import tensorflow as tf
            shard = Path(out_dir) / f"part-{wid:05d}-of-{nworkers:05d}.tfrecord"
            writer = tf.io.TFRecordWriter(str(shard))
        out_q.put(("ready", wid, None))
        stats = {"read": 0.0, "decode": 0.0, "encode": 0.0, "ok": 0, "bytes": 0, "out": 0}
        while True:
            item = tasks.get()
            if item is None:
                break
            path = item
            t0 = time.perf_counter()
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                out_q.put(("skip", wid, (path, f"unreadable: {exc.strerror}")))
                continue
            t1 = time.perf_counter()
            stats["read"] += t1 - t0
            stats["bytes"] += len(data)
            try:
                rgb = decode_resize(data, size, interp)
            except BadImage as exc:
                stats["decode"] += time.perf_counter() - t1
                out_q.put(("skip", wid, (path, str(exc))))
                continue
            t2 = time.perf_counter()
            record = encode_example(rgb, label_for(Path(path), Path(root)), Path(path).name)
            if writer is not None:
                writer.write(record)
                payload = None
            else:
                payload = record
            t3 = time.perf_counter()
            stats["decode"] += t2 - t1
            stats["encode"] += t3 - t2
            stats["ok"] += 1
            stats["out"] += len(record)
            if payload is not None:
                out_q.put(("record", wid, payload))
        if writer is not None:
            t = time.perf_counter()
            writer.close()
            fsync_path(shard)
            stats["encode"] += time.perf_counter() - t
        out_q.put(("done", wid, stats))
    except BaseException:  # report, never hang the parent
        out_q.put(("error", wid, traceback.format_exc()))


def warm_up(size, interp: str) -> None:
    """Run the whole per-image path once on a tiny in-memory TIFF.

    Dropping caches also evicts the libraries' code pages; without this the first
    image of every worker would page OpenCV/TensorFlow code in from disk (through
    the throttle, on an emulated target) and charge library loading to the run.
    """
    import cv2

    rng = np.random.default_rng(0)
    for shape, dtype in (((1024, 1024, 3), np.uint8), ((256, 256), np.uint16)):
        img = (rng.random(shape) * np.iinfo(dtype).max).astype(dtype)
        for compression in (1, 5):  # none and LZW take different libtiff paths
            ok, tiff = cv2.imencode(".tiff", img, [cv2.IMWRITE_TIFF_COMPRESSION, compression])
            rgb = decode_resize(tiff.tobytes(), size, interp)
            encode_example(rgb, 0, "warm-up")


def record_lengths(path: Path) -> list[int]:
    """Payload lengths of a TFRecord file's frames, from its length headers (no TensorFlow)."""
    out = []
    with open(path, "rb") as fh:
        while True:
            header = fh.read(12)
            if not header:
                return out
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header")
            (length,) = struct.unpack("<Q", header[:8])
            fh.seek(length + 4, os.SEEK_CUR)
            out.append(length)


def count_records(path: Path) -> int:
    return len(record_lengths(path))


def run_pipeline(files: list[Path], root: Path, out_dir: Path, processes: int, p: PreprocessParams,
                 procs_files: list[str] | None = None, on_start=None) -> dict:
    """Ingest `files` with `processes` workers into out_dir; returns measurements.

    on_start() is called right before the first image is handed out (monitor start).
    """
    ctx = mp.get_context("fork")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tasks, out_q = ctx.Queue(), ctx.Queue()
    size = (p.resize_width, p.resize_height)
    workers = [ctx.Process(target=_worker, args=(w, processes, tasks, out_q, str(out_dir), p.output_mode,
                                                 size, p.interpolation, str(root), procs_files or []),
                           daemon=True) for w in range(processes)]
    for w in workers:
        w.start()
    single_writer = single_path = None
    try:
        ready = 0
        while ready < processes:
            kind, wid, payload = out_q.get(timeout=120)
            if kind == "error":
                raise RuntimeError(f"ingest worker {wid} failed to start:\n{payload}")
            ready += 1
        if p.output_mode == "single":
            import tensorflow as tf
            single_path = out_dir / "data.tfrecord"
            single_writer = tf.io.TFRecordWriter(str(single_path))
        if on_start:
            on_start()
        t_start = time.perf_counter()
        for f in files:
            tasks.put(str(f))
        for _ in workers:
            tasks.put(None)
        skipped, done, parent_write = [], [], 0.0
        while len(done) < processes:
            try:
                kind, wid, payload = out_q.get(timeout=5)
            except queue.Empty:
                dead = [w.pid for w in workers if not w.is_alive() and w.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(f"ingest workers {dead} died (killed or out of memory)")
                continue
            if kind == "record":
                t = time.perf_counter()
                single_writer.write(payload)
                parent_write += time.perf_counter() - t
            elif kind == "skip":
                skipped.append({"file": payload[0], "reason": payload[1]})
            elif kind == "done":
                done.append(payload)
            elif kind == "error":
                raise RuntimeError(f"ingest worker {wid} failed:\n{payload}")
        if single_writer is not None:
            t = time.perf_counter()
            single_writer.close()
            single_writer = None
            fsync_path(single_path)
            parent_write += time.perf_counter() - t
        elapsed = time.perf_counter() - t_start
    finally:
        if single_writer is not None:
            single_writer.close()
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
                w.join()
    outputs = sorted(out_dir.glob("*.tfrecord"))
    records = sum(count_records(f) for f in outputs)
    agg = {k: sum(d[k] for d in done) for k in ("read", "decode", "encode", "ok", "bytes", "out")}
    agg["encode"] += parent_write
    stage_total = agg["read"] + agg["decode"] + agg["encode"] or 1.0
    shares = {"read": agg["read"] / stage_total * 100, "decode_resize": agg["decode"] / stage_total * 100,
              "encode_write": agg["encode"] / stage_total * 100}
    return {
        "images_ok": agg["ok"], "images_skipped": len(skipped), "skipped": skipped,
        "input_bytes": agg["bytes"], "output_bytes": sum(f.stat().st_size for f in outputs),
        "records_written": records, "completion_time_s": elapsed,
        "input_mb_per_s": agg["bytes"] / elapsed / 1e6,
        "images_per_s": agg["ok"] / elapsed,
        "output_mb_per_s": sum(f.stat().st_size for f in outputs) / elapsed / 1e6,
        "read_s_total": agg["read"], "decode_resize_s_total": agg["decode"],
        "encode_write_s_total": agg["encode"],
        "read_share_percent": shares["read"], "decode_resize_share_percent": shares["decode_resize"],
        "encode_write_share_percent": shares["encode_write"],
        "dominant_stage": max(shares, key=shares.get),
        "outputs": [str(f) for f in outputs],
    }


def verify_tfrecords(paths: list[str], expected: int, size: tuple[int, int]) -> dict:
    """Read the output back with tf.data: count, shapes and labels."""
    import tensorflow as tf

    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    ds = tf.data.TFRecordDataset(paths).map(lambda r: tf.io.parse_single_example(r, spec))
    count, shapes, labels = 0, set(), set()
    for ex in ds:
        img = tf.io.decode_png(ex["image/encoded"])
        shapes.add(tuple(int(x) for x in img.shape))
        labels.add(int(ex["image/class/label"]))
        count += 1
    want = (size[1], size[0], 3)
    return {"records": count, "expected": expected, "shapes": sorted(shapes), "labels": sorted(labels),
            "ok": count == expected and shapes <= {want}}


# --------------------------------------------------------------------------- study
def plan(p: PreprocessParams) -> list[tuple[str, int | None, int]]:
    """(sweep, processes or None=best, image_count) in run order."""
    runs = [("processes", proc, p.image_count) for proc in p.processes]
    runs += [("image_count", None, n) for n in p.image_counts]
    return runs


def run_study(params: Params, out_dir: str | Path = "reports/preprocess", log=print) -> "pd.DataFrame":
    """Run the whole study on every target; write runs.csv and friends to out_dir."""
    import pandas as pd

    p: PreprocessParams = params.section(STUDY)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "timeseries").mkdir(exist_ok=True)
    tlist = targets_mod.resolve_all(params)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  (imported once here so forked workers share it)

    # ---- datasets and prechecks, before any measured work
    datasets: dict[str, tuple[Path, list[Path]]] = {}
    for t in tlist:
        if p.source_dir:
            root = Path(p.source_dir).expanduser().resolve()
            files = list_source(root)
            if len(files) < max([p.image_count, *p.image_counts]):
                raise ParamsError(f"preprocess.source_dir = '{p.source_dir}' holds {len(files)} files; "
                                  f"preprocess.image_count = {p.image_count} needs at least that many")
        else:
            root = t.study_dir(STUDY) / "images"
            needed = p.image_count * (p.image_bytes + 4096) + p.image_count * p.resize_width * p.resize_height * 4
            existing = sum(f.stat().st_size for f in root.rglob("*.tif")) if root.exists() else 0
            targets_mod.check_free_space(t, max(0, needed - existing), "the TIFF dataset")
            files = generate_dataset(root, p, p.image_count, log)
        datasets[t.name] = (root, files[: p.image_count])
        targets_mod.check_profile_speed(t, files[:16])
    table = results.RunTable(out_dir / "runs.csv")
    skipped_rows: list[dict] = []
    final_outputs: dict[str, list[str]] = {}
    inv = inventory.collect(params, tlist)
    results.write_json(out_dir / "inventory.json", inv)
    best: dict[str, int] = {}
    for sweep, proc, count in plan(p):
        for repeat in range(1, p.repeats + 1):
            for t in tlist:
                procs = proc if proc is not None else best[t.name]
                root, files = datasets[t.name]
                run_id = f"{STUDY}-{sweep}-{t.name}-p{procs}-n{count}-r{repeat}"
                log(f"[{run_id}] {procs} processes, {count} images")
                out = t.study_dir(STUDY) / "tfrecords" / "current"
                method = cache.cold_cache([root], params.run.cold_cache)
                mon = monitor.Monitor(t.device.name if t.device else None, params.run.monitor_interval_s)
                started = results.utc_now()
                with targets_mod.emulation(t, run_id) as group:
                    try:
                        m = run_pipeline(files[:count], root, out, procs, p,
                                         group.procs_files if group else None, on_start=mon.start)
                    finally:
                        if mon.snapshots:
                            mon.stop()
                if m["records_written"] != m["images_ok"]:
                    raise RuntimeError(f"{run_id}: wrote {m['records_written']} records for "
                                       f"{m['images_ok']} images")
                row = {"study": STUDY, "run_id": run_id, "sweep": sweep, "target": t.name,
                       "profile": t.profile_name or "", "processes": procs, "image_count": count,
                       "repeat": repeat, "started_at": started, "cache_method": method,
                       "emulated": group is not None, "output_mode": p.output_mode,
                       **{k: v for k, v in m.items() if k not in ("skipped", "outputs")},
                       **mon.summary()}
                results.write_csv(out_dir / "timeseries" / f"{run_id}.csv", pd.DataFrame(mon.timeseries()))
                table.append(row)
                skipped_rows += [{"run_id": run_id, "target": t.name, **s} for s in m["skipped"]]
                final = t.study_dir(STUDY) / "tfrecords" / "final"
                if final.exists():
                    shutil.rmtree(final)
                out.rename(final)
                final_outputs[t.name] = [str(final / Path(f).name) for f in m["outputs"]]
        if sweep == "processes" and proc == p.processes[-1]:
            frame = table.frame()
            ps = frame[frame.sweep == "processes"].groupby(["target", "processes"]).input_mb_per_s.mean()
            best = {t.name: int(ps[t.name].idxmax()) for t in tlist}
    frame = table.frame()
    results.write_csv(out_dir / "skipped_files.csv",
                      pd.DataFrame(skipped_rows, columns=["run_id", "target", "file", "reason"]))
    size = (p.resize_width, p.resize_height)
    checks = {name: verify_tfrecords(paths, int(frame[frame.target == name].iloc[-1].images_ok), size)
              for name, paths in final_outputs.items()}
    results.write_json(out_dir / "outputs.json", {"tfrecords": final_outputs, "verification": checks,
                                                  "best_processes": best})
    results.write_json(out_dir / "notes.json", {"warnings": [w for t in tlist for w in t.warnings]})
    results.write_json(out_dir / "metrics.json", metrics(frame, [t.name for t in tlist]))
    bad = [n for n, c in checks.items() if not c["ok"]]
    if bad:
        raise RuntimeError(f"TFRecord read-back failed for {bad}: {checks}")
    return frame


# --------------------------------------------------------------------------- analysis
def headlines(frame, target_names: list[str]) -> list[dict]:
    """Reference target (first) vs each other: up-to deltas over matched configurations."""
    from .report import versus_reference

    return versus_reference(frame, target_names, ["sweep", "processes", "image_count"],
                            [("input_mb_per_s", "higher", "Ingest bandwidth (input MB/s)"),
                             ("completion_time_s", "lower", "Completion time")])


def metrics(frame, target_names: list[str]) -> dict:
    """Headline figures for `dvc metrics show`."""
    out: dict = {"runs": int(len(frame))}
    for name, g in frame.groupby("target"):
        out[name] = {"max_input_mb_per_s": float(g.groupby(["sweep", "processes", "image_count"])
                                                  .input_mb_per_s.mean().max()),
                     "max_images_per_s": float(g.groupby(["sweep", "processes", "image_count"])
                                                .images_per_s.mean().max()),
                     "images_skipped": int(g.images_skipped.sum())}
    out["headlines"] = {h["id"]: h["delta_percent"] for h in headlines(frame, target_names)}
    return out


# --------------------------------------------------------------------------- brief section
TITLE = "Preprocessing ingest: TIFF → resize → TFRecord"


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def process_table(frame, names: list[str]):
    """Paper Table 2: bandwidth and time per process count, per target (means over repeats)."""
    import pandas as pd

    ps = frame[frame.sweep == "processes"]
    g = ps.groupby(["processes", "target"]).agg(mb=("input_mb_per_s", "mean"), t=("completion_time_s", "mean"),
                                                 dev=("device_read_mb_per_s_max", "mean")
                                                 if "device_read_mb_per_s_max" in ps else ("input_mb_per_s", "size"),
                                                 read=("read_share_percent", "mean"))
    out = pd.DataFrame({"Processes": sorted(ps.processes.unique())})
    for n in names:
        sub = g.xs(n, level="target") if n in g.index.get_level_values("target") else None
        if sub is None:
            continue
        out[f"{n}: input MB/s"] = out.Processes.map(sub.mb)
        out[f"{n}: time s"] = out.Processes.map(sub.t)
        out[f"{n}: read share %"] = out.Processes.map(sub.read)
    return out


def image_count_table(frame, names: list[str]):
    """Paper Table 4: per image count, each target's bandwidth and time, speedup and time saved."""
    import pandas as pd

    ic = frame[frame.sweep == "image_count"]
    if ic.empty or len(names) < 2:
        return pd.DataFrame()
    g = ic.groupby(["image_count", "target"]).agg(mb=("input_mb_per_s", "mean"), t=("completion_time_s", "mean"),
                                                   p=("processes", "first"), size=("input_bytes", "mean"))
    ref, other = names[0], names[1]
    rows = []
    for n in sorted(ic.image_count.unique()):
        if (n, ref) not in g.index or (n, other) not in g.index:
            continue
        a, b = g.loc[(n, ref)], g.loc[(n, other)]
        rows.append({"Images": int(n), "Dataset MB": a["size"] / 1e6,
                     f"{ref}: processes": int(a.p), f"{ref}: MB/s": a.mb, f"{ref}: time s": a.t,
                     f"{other}: processes": int(b.p), f"{other}: MB/s": b.mb, f"{other}: time s": b.t,
                     "Speedup ×": b.t / a.t, "Time saved s": b.t - a.t})
    return pd.DataFrame(rows)


def brief_section(study_dir, frame, names: list[str]) -> None:
    import json
    import matplotlib.pyplot as plt
    import seaborn as sns
    from .report import show_figure, show_html, show_md, show_table, style

    style()
    study_dir = Path(study_dir)
    ps = frame[frame.sweep == "processes"]
    ref = names[0]
    n_images = int(ps.image_count.iloc[0]) if not ps.empty else 0
    mb_each = ps.input_bytes.mean() / max(1, n_images) / 1e6 if not ps.empty else 0
    show_md(
        f"**What ran.** {n_images} TIFF images of {mb_each:.1f} MB each were read with OpenCV, resized and "
        "appended as `tf.train.Example` records to TFRecord files by P concurrent processes, cold cache before "
        f"every run, {int(frame.repeat.max())} repeats, on every target. *Input MB/s* is the paper's bandwidth: "
        "bytes of the input images ÷ completion time (MB = 10⁶ bytes). Device MB/s comes from the block-device "
        "counters sampled during the run.")
    # Table 2 and Figure 1
    t2 = process_table(frame, names)
    show_table(t2, "Bandwidth and completion time by process count (means over repeats; read share = "
                   "share of per-image time spent reading the file).")
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
    sns.lineplot(data=ps, x="processes", y="input_mb_per_s", hue="target", hue_order=names, marker="o",
                 errorbar="sd", ax=axes[0])
    axes[0].set(xlabel="processes", ylabel="input MB/s", title="Throughput vs processes")
    sns.lineplot(data=ps, x="processes", y="completion_time_s", hue="target", hue_order=names, marker="o",
                 errorbar="sd", ax=axes[1], legend=False)
    axes[1].set(xlabel="processes", ylabel="seconds", title="Completion time vs processes")
    for ax in axes:
        ax.set_xticks(sorted(ps.processes.unique()))
    show_figure(fig, "TFRecord creation: throughput and completion time vs processes (error bars: ±1 sd over repeats).")
    # Where the time went
    split = ps.groupby(["target", "processes"])[["read_share_percent", "decode_resize_share_percent",
                                                 "encode_write_share_percent"]].mean().reset_index()
    fig, ax = plt.subplots(figsize=(8, 3.0))
    labels = [f"{t}\nP={p}" for t, p in zip(split.target, split.processes)]
    bottom = np.zeros(len(split))
    for col, name in (("read_share_percent", "read"), ("decode_resize_share_percent", "decode + resize"),
                      ("encode_write_share_percent", "encode + write")):
        ax.bar(labels, split[col], bottom=bottom, label=name)
        bottom += split[col].to_numpy()
    ax.set(ylabel="% of per-image time", ylim=(0, 100), title="Where each image's time went")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    show_figure(fig, "Split of per-image time (summed over processes): a large read share means the run "
                     "waited on storage; a large decode/resize share means it was CPU-bound.")
    # Analysis text
    lines = []
    means = ps.groupby(["target", "processes"]).input_mb_per_s.mean()
    for n in names:
        if n not in means.index.get_level_values(0):
            continue
        m = means[n]
        best_p, best_v = int(m.idxmax()), float(m.max())
        one = float(m.iloc[0])
        read = float(ps[(ps.target == n) & (ps.processes == best_p)].read_share_percent.mean())
        bound = "storage-bound (most time in reads)" if read >= 50 else "CPU-bound (most time decoding and resizing)"
        lines.append(f"- **{n}**: {one:.0f} MB/s at {int(m.index[0])} process(es), best {best_v:.0f} MB/s at "
                     f"{best_p} processes (×{best_v / one:.1f} speedup from parallelism); at its best it was "
                     f"{bound}, read share {read:.0f} %.")
    cpus = os.cpu_count() or 1
    lines.append(f"- This machine has {cpus} logical CPUs: process counts beyond that compete for cores, so "
                 "gains past it come from overlapping I/O waits, not from more compute.")
    show_md("**Analysis.**\n\n" + "\n".join(lines))
    # Table 4 and completion vs image count
    ic = frame[frame.sweep == "image_count"]
    if not ic.empty:
        t4 = image_count_table(frame, names)
        if not t4.empty:
            show_table(t4, "Completion time by image count at each target's best process count; speedup = "
                           f"{names[1]} time ÷ {ref} time.")
        fig, ax = plt.subplots(figsize=(7.2, 3.2))
        sns.lineplot(data=ic, x="image_count", y="completion_time_s", hue="target", hue_order=names, marker="o",
                     errorbar="sd", ax=ax)
        ax.set(xlabel="images", ylabel="seconds", title="Completion time vs image count")
        show_figure(fig, "Completion time vs number of images at the best process count per target.")
        if not t4.empty:
            last = t4.iloc[-1]
            show_md(f"**Analysis.** At {int(last.Images)} images ({last['Dataset MB']:.0f} MB) {ref} finished in "
                    f"{_fmt_s(last[f'{ref}: time s'])} and {names[1]} in {_fmt_s(last[f'{names[1]}: time s'])}: "
                    f"×{last['Speedup ×']:.1f}, {_fmt_s(abs(last['Time saved s']))} "
                    f"{'saved' if last['Time saved s'] >= 0 else 'lost'}. Small image counts are dominated by "
                    "process start-up and fit in memory; the paper isolates storage with datasets larger than RAM.")
    # Device view
    if "device_read_mb_per_s_avg" in frame:
        dev = ps.groupby(["target", "processes"])[["device_read_mb_per_s_avg", "device_read_mb_per_s_max",
                                                   "device_write_mb_per_s_avg", "device_util_percent_avg",
                                                   "cpu_busy_percent", "cpu_iowait_percent"]].mean().reset_index()
        dev.columns = ["Target", "Processes", "Device read MB/s avg", "Device read MB/s max",
                       "Device write MB/s avg", "Device util %", "CPU busy %", "CPU iowait %"]
        show_table(dev, "Device counters and CPU measured during the process sweep (means over repeats; max = "
                        "largest sampling interval).")
    # Bad input
    skipped = study_dir / "skipped_files.csv"
    total_skipped = int(frame.images_skipped.sum())
    if total_skipped and skipped.exists():
        import pandas as pd
        sk = pd.read_csv(skipped).drop_duplicates(["target", "file", "reason"])
        show_md(f"**Skipped input files.** {len(sk)} distinct files could not be ingested and were skipped "
                "(counted per run in `images_skipped`):")
        show_table(sk[["target", "file", "reason"]].head(30))
    outputs = study_dir / "outputs.json"
    if outputs.exists():
        ver = json.loads(outputs.read_text()).get("verification", {})
        ok = ", ".join(f"{n}: {v['records']} records, shapes {v['shapes']}, labels {v['labels']}"
                       for n, v in ver.items())
        show_md(f"**Output check.** The last TFRecord set per target was read back with `tf.data`: {ok}.")
