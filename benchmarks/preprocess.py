"""Preprocessing benchmark: scaling efficiency and throttle accuracy, measured side by side.

    python benchmarks/preprocess.py [--images 32] [--processes N] [--dir data/targets/bench]

Prints two ratios (goals in brackets):
  1. images/s at P processes ÷ min(P × the 1-process rate, the device limit)   [>= 0.90]
     The device limit is the disk's O_DIRECT sequential read rate divided by the image size.
  2. emulated target's measured read MB/s ÷ its configured cap                   [0.95 – 1.05]
     Measured two ways: the reader's own bytes ÷ time, and the device counters (device-wide:
     run it on an otherwise idle disk).
"""
from __future__ import annotations

import argparse
import mmap
import os
import sys
import time
from pathlib import Path

from storagebrief.core import cache, cgroups, config, monitor, targets
from storagebrief.studies.preprocess import dataset, params, pipeline


def ingest_rate(files, root, out, procs, p) -> float:
    cache.cold_cache([root])
    m = pipeline.run_pipeline(files, root, out, procs, p)
    return m["images_per_s"]


def throttled_read(files: list[Path], target: targets.Target, block: int = 4 << 20) -> tuple[float, float]:
    """O_DIRECT sequential reads of files inside the target's throttle cgroup."""
    cache.cold_cache(files)
    with targets.emulation(target, "bench") as group:
        if group is None:
            raise SystemExit(f"throttle unavailable: {target.warnings}")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                cgroups.join(group.procs_files)
                os.read(r, 1)
                buf = mmap.mmap(-1, block)
                for f in files:
                    fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
                    while os.readv(fd, [buf]) > 0:
                        pass
                    os.close(fd)
            finally:
                os._exit(0)
        total = sum(f.stat().st_size for f in files)
        with monitor.Monitor(target.device.name, 0.5) as mon:
            start = time.perf_counter()
            os.write(w, b"g")
            os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
    return total / elapsed / 1e6, mon.summary().get("device_read_mb_per_s_avg", float("nan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--dir", default="data/targets/bench")
    ap.add_argument("--cap-mb-per-s", type=float, default=150.0,
                    help="bandwidth-only throttle for the accuracy check (an IOPS cap would bind first "
                         "when large reads are split into smaller requests)")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  (workers fork with it loaded, as in the study)

    p = params.PreprocessParams(image_count=args.images, image_counts=[], processes=[1, args.processes])
    catalogue = {**targets.DEVICE_PROFILES, "bandwidth_only": targets.DeviceProfile(read_mb_per_s=args.cap_mb_per_s)}
    tp = config.TargetParams(name="bench", path=args.dir, profile="bandwidth_only")
    target = targets.resolve(tp, catalogue)
    root = target.study_dir("preprocess") / "images"
    files = dataset.generate_dataset(root, p, args.images, log=lambda *a: None)
    out = target.study_dir("preprocess") / "tfrecords" / "bench"
    image_mb = sum(f.stat().st_size for f in files) / len(files) / 1e6

    one = ingest_rate(files, root, out, 1, p)
    many = ingest_rate(files, root, out, args.processes, p)
    cache.cold_cache(files)
    disk_mb = targets.probe_read_mb_per_s(files, max_bytes=1 << 40) or float("inf")
    ideal = min(args.processes * one, disk_mb / image_mb)
    print(f"ingest scaling: {args.processes} processes {many:.1f} images/s, 1 process {one:.1f} images/s, "
          f"device limit {disk_mb / image_mb:.1f} images/s ({disk_mb:.0f} MB/s O_DIRECT, {image_mb:.1f} MB/image)")
    print(f"  ratio images/s(P) / min(P x rate(1), device limit) = {many / ideal:.3f}   [goal >= 0.90]")

    cap = target.profile.read_mb_per_s
    reader, device = throttled_read(files, target)
    print(f"throttle accuracy (bandwidth cap {cap:.0f} MB/s, 4 MiB O_DIRECT reads): reader {reader:.1f} MB/s, "
          f"device counters {device:.1f} MB/s")
    print(f"  ratio reader MB/s / cap = {reader / cap:.3f}   device MB/s / cap = {device / cap:.3f}   "
          "[goal 0.95-1.05]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
