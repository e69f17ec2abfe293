"""The ingest pipeline: P worker processes (kit.ranks, sharing one queue of images), each read -> decode +
resize -> encode + write.

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

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...formats.tfrecord import count_records, image_example
from ...kit.ranks import Forked, Worker
from ...kit.tf_import import tensorflow
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
    if img.shape[2] == 2:                       # gray + alpha: alpha dropped
        return cv2.cvtColor(np.ascontiguousarray(img[..., 0]), cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    if img.shape[2] == 3:
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    raise BadImage(f"unsupported: {img.shape[2]} channels")


# TIFF tags read from the first directory: enough to say why a file is unsupported, and
# whether its alpha is unassociated (OpenCV's libtiff RGBA path then premultiplies colour).
_TAGS = {258: "bits", 277: "samples", 338: "extra_samples", 339: "sample_format"}
_TYPE_SIZE = {1: 1, 3: 2, 4: 4, 16: 8}


def tiff_tags(data: bytes) -> dict[str, tuple[int, ...]]:
    """bits / samples / extra_samples / sample_format of a classic or BigTIFF's first image."""
    import struct

    try:
        bo = "<" if data[:2] == b"II" else ">"
        big = struct.unpack(bo + "H", data[2:4])[0] == 43
        off = struct.unpack(bo + ("Q" if big else "I"), data[8:16] if big else data[4:8])[0]
        n = struct.unpack(bo + ("Q" if big else "H"), data[off:off + (8 if big else 2)])[0]
        entry, pos, inline = (20, off + 8, 8) if big else (12, off + 2, 4)
        out = {}
        for i in range(min(n, 4096)):
            e = data[pos + i * entry: pos + (i + 1) * entry]
            tag, typ = struct.unpack(bo + "HH", e[:4])
            if tag not in _TAGS or typ not in _TYPE_SIZE:
                continue
            count = struct.unpack(bo + ("Q" if big else "I"), e[4:12] if big else e[4:8])[0]
            raw = e[12:20] if big else e[8:12]
            size = _TYPE_SIZE[typ] * count
            if size > inline:
                at = struct.unpack(bo + ("Q" if big else "I"), raw)[0]
                raw = data[at:at + size]
            fmt = {1: "B", 3: "H", 4: "I", 16: "Q"}[typ]
            out[_TAGS[tag]] = struct.unpack(bo + fmt * count, raw[:size])
        return out
    except (struct.error, IndexError, ValueError):
        return {}


def _why_undecodable(data: bytes) -> str:
    tags = tiff_tags(data)
    if "bits" not in tags:
        return "OpenCV could not decode it (truncated or corrupt)"
    bits, fmt = tags["bits"][0], tags.get("sample_format", (1,))[0]
    samples = tags.get("samples", (1,))[0]
    if fmt == 3 and bits == 16:
        return "unsupported: 16-bit floating-point samples (OpenCV reads 32/64-bit float only)"
    if samples > 4:
        return f"unsupported: {samples} samples per pixel (1-4 are ingested)"
    if fmt not in (1, 2, 3) or bits not in (1, 8, 16, 32, 64):
        return f"unsupported: {bits}-bit samples of sample format {fmt}"
    return "OpenCV could not decode it (truncated or corrupt)"


def _stored_colour(data: bytes) -> np.ndarray | None:
    """RGB as stored in an 8-bit RGBA TIFF with unassociated alpha (Pillow keeps it; OpenCV's
    libtiff RGBA path would return colour x alpha)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGBA"))[..., :3].copy() if im.mode == "RGBA" else None


def decode_resize(data: bytes, size: tuple[int, int], interpolation: str) -> np.ndarray:
    """Decode with OpenCV, map to 8-bit RGB, resize; BadImage names why a file cannot be ingested."""
    import cv2

    if not data:
        raise BadImage("zero-byte file")
    if data[:4] not in TIFF_MAGIC:
        raise BadImage("not a TIFF (bad magic bytes)")
    try:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:    # e.g. more pixels than CV_IO_MAX_IMAGE_PIXELS allows
        raise BadImage(f"OpenCV refused it: {_cv_reason(exc)}") from None
    if img is None:
        raise BadImage(_why_undecodable(data))
    rgb = None
    if img.ndim == 3 and img.shape[2] == 4 and img.dtype == np.uint8 and \
            tiff_tags(data).get("extra_samples", (0,))[0] == 2:
        rgb = _stored_colour(data)
    rgb = to_rgb8(img) if rgb is None else rgb
    try:
        return cv2.resize(rgb, size, interpolation=getattr(cv2, INTERPOLATIONS[interpolation]))
    except cv2.error as exc:
        raise BadImage(f"OpenCV could not resize it: {_cv_reason(exc)}") from None


def _cv_reason(exc) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:200]


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


@dataclass(frozen=True)
class IngestJob:
    """What every ingest worker of one run is told."""
    workers: int                     # how many there are (shard names)
    out_dir: str
    mode: str                        # sharded | single (params output_mode)
    size: tuple[int, int]            # resize (width, height)
    interp: str                      # params interpolation
    root: str                        # the dataset folder (labels from class subfolders)


def _open(wid: int, workers: int, job: IngestJob) -> tuple:
    """A worker's shard writer (sharded mode), opened in the run's cgroup before the clock."""
    if job.mode != "sharded":
        return None, None
    tf = tensorflow()
    shard = Path(job.out_dir) / f"part-{wid:05d}-of-{job.workers:05d}.tfrecord"
    return tf.io.TFRecordWriter(str(shard)), shard


def _ingest(state: tuple, wid: int, msg, line) -> dict:
    """One ingest worker's run: images from the shared queue until it ends; skips and (single mode) records go
    to the launcher as they happen; returns the worker's stage times and counts."""
    writer, shard = state
    job: IngestJob = msg
    size, interp, root = job.size, job.interp, job.root
    stats = {"read": 0.0, "decode": 0.0, "encode": 0.0, "ok": 0, "bytes": 0, "out": 0, "skipped_bytes": 0}
    for path in line.tasks():
        t0 = time.perf_counter()
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            line.emit(("skip", (path, f"unreadable: {exc.strerror}")))
            continue
        t1 = time.perf_counter()
        stats["read"] += t1 - t0
        try:
            rgb = decode_resize(data, size, interp)
            t2 = time.perf_counter()
            record = encode_example(rgb, label_for(Path(path), Path(root)), Path(path).name)
        except Exception as exc:   # one bad image never ends the run: skipped with its reason
            stats["decode"] += time.perf_counter() - t1
            stats["skipped_bytes"] += len(data)
            reason = str(exc) if isinstance(exc, BadImage) else f"{type(exc).__name__}: {exc}"[:300]
            line.emit(("skip", (path, reason)))
            continue
        stats["bytes"] += len(data)
        if writer is not None:
            writer.write(record)
        t3 = time.perf_counter()
        stats["decode"] += t2 - t1
        stats["encode"] += t3 - t2
        stats["ok"] += 1
        stats["out"] += len(record)
        if writer is None:
            line.emit(("record", record))
    if writer is not None:
        t = time.perf_counter()
        writer.close()
        fsync_path(shard)
        stats["encode"] += time.perf_counter() - t
    return stats


# Warmed up before joining the throttle cgroup: the libraries' code pages are not read through it.
WORKER = Worker("ingest worker", lambda wid, n, job: _open(wid, n, job), _ingest,
                warm_up=lambda job: warm_up(job.size, job.interp))


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


def run_pipeline(files: list[Path], root: Path, out_dir: Path, processes: int, p: PreprocessParams,
                 procs_files: list[str] | None = None, on_start=None) -> dict:
    """Ingest `files` with `processes` workers (kit.ranks, in the run's cgroup) into out_dir; returns measurements.

    on_start() is called right before the workers' start line (the clock starts). An interrupted or failed ingest
    stops its workers at once (the launcher's exit).
    """
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    job = IngestJob(processes, str(out_dir), p.output_mode, (p.resize_width, p.resize_height), p.interpolation,
                    str(root))
    single_writer = single_path = None
    skipped, parent_write = [], [0.0]

    def heard(wid: int, what: tuple) -> None:
        kind, payload = what
        if kind == "record":
            t = time.perf_counter()
            single_writer.write(payload)
            parent_write[0] += time.perf_counter() - t
        else:
            skipped.append({"file": payload[0], "reason": payload[1]})
    try:
        with Forked(WORKER, range(processes), job, procs_files=procs_files, tasks=True) as launch:
            if p.output_mode == "single":
                tf = tensorflow()
                single_path = out_dir / "data.tfrecord"
                single_writer = tf.io.TFRecordWriter(str(single_path))
            launch.put_tasks(str(f) for f in files)
            release, got = launch.operate(job, on_start=on_start, on_emit=heard)
        if single_writer is not None:
            t = time.perf_counter()
            single_writer.close()
            single_writer = None
            fsync_path(single_path)
            parent_write[0] += time.perf_counter() - t
        elapsed = time.monotonic() - release          # from the workers' start line
    finally:
        if single_writer is not None:
            single_writer.close()
    return _measurements(out_dir, skipped, [d.result for d in got], parent_write[0], elapsed)


def _measurements(out_dir: Path, skipped: list, done: list, parent_write: float, elapsed: float) -> dict:
    outputs = sorted(out_dir.glob("*.tfrecord"))
    records = sum(count_records(f) for f in outputs)
    agg = {k: sum(d[k] for d in done) for k in ("read", "decode", "encode", "ok", "bytes", "out", "skipped_bytes")}
    agg["encode"] += parent_write
    stage_total = agg["read"] + agg["decode"] + agg["encode"] or 1.0
    shares = {"read": agg["read"] / stage_total * 100, "decode_resize": agg["decode"] / stage_total * 100,
              "encode_write": agg["encode"] / stage_total * 100}
    output_bytes = sum(f.stat().st_size for f in outputs)
    return {
        "images_ok": agg["ok"], "images_skipped": len(skipped), "skipped": skipped,
        "input_bytes": agg["bytes"], "skipped_bytes": agg["skipped_bytes"], "output_bytes": output_bytes,
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
    tf = tensorflow()

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
