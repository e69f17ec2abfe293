"""What does a stream cost beyond publishing, and what reaches the brokers' disk? Measured side by side.

    python benchmarks/streaming.py [--params params.yaml] [--target local] [--streams 2] [--frames 240]
                                   [--video 240p@24] [--rounds 2]

One 3-node Kafka cluster (the study's, log.dirs under the target, fsync every message) and one topic of
6 partitions, RF 3. Rounds interleave the two producer variants, S processes each, unpaced (as fast as
they can), the same frame count:
  streams   the study's producer: OpenCV decode of the video + JPEG encode + publish
  bare      the same client publishing the stream's first JPEG over and over (no decode, no encode)
Prints frames/s of each and the ratio streams ÷ bare (the producer overhead of video decoding and
encoding), and for every measured variant the brokers' device write bytes ÷ (bytes produced × RF)
(write amplification; expected near 1, above it by index, metadata and journal writes). Not a test:
numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _variant(mode: str, args, video: dict, bootstrap: str, topic: str, logs: Path, device: str | None):
    from storagebrief.core import monitor
    from storagebrief.studies.stream_inference.run import Worker

    jobs = [{"stream": s, "video": video["path"], "fps": video["fps"], "frames": args.frames, "topic": topic,
             "jpeg_quality": 90, "bootstrap": bootstrap, "acks": "all", "paced": False, "mode": mode}
            for s in range(args.streams)]
    workers = [Worker("producer", j, logs / f"bench-{mode}.log") for j in jobs]
    try:
        for w in workers:
            w.expect("ready", 120)
        mon = monitor.Monitor(device, 0.25)
        mon.start()
        go = time.time()
        for w in workers:
            w.send("go")
        done = [w.expect("done", 600) for w in workers]
        mon.stop()
    finally:
        for w in workers:
            w.stop(2)
    frames = sum(d["frames_delivered"] for d in done)
    seconds = max(d["end"] for d in done) - go
    written = mon.summary().get("device_write_bytes")
    produced = sum(d["bytes_delivered"] for d in done)
    return frames / seconds, (written / (produced * 3) if written is not None and produced else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--target", default=None, help="target name (default: the first)")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--frames", type=int, default=240, help="frames per stream per measurement")
    ap.add_argument("--video", default="240p@24")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    from storagebrief.core import config, targets as targets_mod
    from storagebrief.studies.stream_inference import cluster as kafka
    from storagebrief.studies.stream_inference.dataset import generate_videos
    from storagebrief.studies.stream_inference.params import parse_video

    params = config.load(args.params)
    targets = targets_mod.resolve_all(params, create=True)
    target = next(t for t in targets if args.target in (None, t.name))
    base = target.study_dir("stream_inference") / "benchmark"
    v = parse_video(args.video)
    video = generate_videos(base / "videos", [v], args.frames / v.fps, 90, 0)[v.text]
    logs = base / "logs"
    cl = kafka.Cluster(base / "kafka", logs, brokers=3, heap_mib=320,
                       properties={"log.flush.interval.messages": 1, "message.max.bytes": 33554432})
    cl.start()
    try:
        print(f"Kafka {kafka.kafka_version()} on '{target.name}' ({target.path}), 3 nodes up in {cl.startup_s:.1f} s")
        admin = AdminClient({"bootstrap.servers": cl.bootstrap})
        res = {"streams": [], "bare": []}
        for r in range(args.rounds):
            for mode in ("streams", "bare"):
                topic = f"bench-{mode}-{r}"
                [f.result() for f in admin.create_topics([NewTopic(topic, 6, 3)]).values()]
                fps, wa = _variant(mode, args, video, cl.bootstrap, topic, logs,
                                   target.device.name if target.device else None)
                [f.result() for f in admin.delete_topics([topic]).values()]
                res[mode].append((fps, wa))
                print(f"round {r + 1} {mode:8s}: {fps:8.1f} frames/s published, device writes ÷ (produced × RF) = {wa:.2f}")
    finally:
        cl.stop()
        cl.remove_data()
    s = statistics.median(f for f, _ in res["streams"])
    b = statistics.median(f for f, _ in res["bare"])
    print(f"\n{args.streams} unpaced producer(s) of {args.video}, {args.frames} frames each (medians of {args.rounds} rounds):")
    print(f"  frames/s, study producers (decode + encode + publish): {s:,.1f}")
    print(f"  frames/s, bare publish loop (same client, same JPEG):  {b:,.1f}")
    print(f"  producer overhead ratio streams ÷ bare:                 {s / b:.3f}")
    for mode in ("streams", "bare"):
        print(f"  write amplification, {mode:7s} (device writes ÷ produced × 3): "
              f"{statistics.median(w for _, w in res[mode]):.2f}")


if __name__ == "__main__":
    main()
