"""The ingest pipeline: P worker processes, each read -> decode + resize -> encode + write.

Per image, timed separately so a reader sees what bound the run:
  read          the file's bytes (open + read; the storage part)
  decode_resize cv2.imdecode + depth/colour mapping + cv2.resize
  encode_write  PNG encode + tf.train.Example + TFRecordWriter.write
                (single-file mode: the parent's write is added to this stage)

Depth and colour mapping (documented choice): every output is 8-bit RGB.
16-bit input is scaled linearly over the full range (v * 255 / 65535, rounded),
not per-image normalised, so intensities stay comparable between images; float
input in [0, 1] is scaled by 255. Gray is replicated to three channels; alpha
is dropped. OpenCV's BGR order is converted to RGB.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import time
import traceback
from pathlib import Path

import numpy as np

from ...core import cgroups
from ...formats.tfrecord import count_records, image_example
from .dataset import label_for
from .params import INTERPOLATIONS, PreprocessParams

TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


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

    ok, png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise BadImage("PNG encode failed")
    return image_example(png.tobytes(), "png", rgb.shape[0], rgb.shape[1], label, filename)


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


def _start_workers(ctx, workers: list, processes: int, tasks, out_q, out_dir: Path, p: PreprocessParams,
                   root: Path, procs_files: list[str]) -> None:
    """Start the workers (into `workers`, so the caller reaps them even if one fails) and wait until ready."""
    size = (p.resize_width, p.resize_height)
    for w in range(processes):
        proc = ctx.Process(target=_worker, args=(w, processes, tasks, out_q, str(out_dir), p.output_mode,
                                                 size, p.interpolation, str(root), procs_files), daemon=True)
        proc.start()
        workers.append(proc)
    ready = 0
    while ready < processes:
        kind, wid, payload = out_q.get(timeout=120)
        if kind == "error":
            raise RuntimeError(f"ingest worker {wid} failed to start:\n{payload}")
        ready += 1


def _collect(out_q, workers, single_writer) -> tuple[list, list, float]:
    """Results of every worker: (skipped files, per-worker stats, parent write seconds)."""
    skipped, done, parent_write = [], [], 0.0
    while len(done) < len(workers):
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
    return skipped, done, parent_write


def run_pipeline(files: list[Path], root: Path, out_dir: Path, processes: int, p: PreprocessParams,
                 procs_files: list[str] | None = None, on_start=None) -> dict:
    """Ingest `files` with `processes` workers into out_dir; returns measurements.

    on_start() is called right before the first image is handed out (the clock starts).
    """
    ctx = mp.get_context("fork")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tasks, out_q = ctx.Queue(), ctx.Queue()
    workers: list = []
    single_writer = single_path = None
    try:
        _start_workers(ctx, workers, processes, tasks, out_q, out_dir, p, root, procs_files or [])
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
        skipped, done, parent_write = _collect(out_q, workers, single_writer)
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
    return _measurements(out_dir, skipped, done, parent_write, elapsed)


def _measurements(out_dir: Path, skipped: list, done: list, parent_write: float, elapsed: float) -> dict:
    outputs = sorted(out_dir.glob("*.tfrecord"))
    records = sum(count_records(f) for f in outputs)
    agg = {k: sum(d[k] for d in done) for k in ("read", "decode", "encode", "ok", "bytes", "out")}
    agg["encode"] += parent_write
    stage_total = agg["read"] + agg["decode"] + agg["encode"] or 1.0
    shares = {"read": agg["read"] / stage_total * 100, "decode_resize": agg["decode"] / stage_total * 100,
              "encode_write": agg["encode"] / stage_total * 100}
    output_bytes = sum(f.stat().st_size for f in outputs)
    return {
        "images_ok": agg["ok"], "images_skipped": len(skipped), "skipped": skipped,
        "input_bytes": agg["bytes"], "output_bytes": output_bytes,
        "records_written": records, "completion_time_s": elapsed,
        "input_mb_per_s": agg["bytes"] / elapsed / 1e6,
        "images_per_s": agg["ok"] / elapsed,
        "output_mb_per_s": output_bytes / elapsed / 1e6,
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
