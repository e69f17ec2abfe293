"""One video stream: decode a video with OpenCV at its frame rate, JPEG-encode each frame and publish
it to Kafka (confluent-kafka). Run as a process:

    python -m storagebrief.studies.stream_inference.producer '<json job>'

It prints {"event": "ready"} once the video is open and the client connected, waits for a line
"go" on stdin, then plays `frames` frames: frame i is due at go + i/fps (the stream never runs
ahead; a stream that cannot keep up runs late and its achieved FPS says so), and prints one JSON
result line. mode "bare" publishes the stream's first JPEG over and over without decoding
(the benchmark's producer-overhead baseline); paced false publishes as fast as it can.
Each message: key = stream id (a stream's frames stay in order in one partition), value = JPEG,
headers ts_ns (wall-clock ns just before produce), stream, frame.
"""
from __future__ import annotations

import json
import signal
import sys
import time


def _client(bootstrap: str, acks: str):
    import logging

    from confluent_kafka import Producer

    log = logging.getLogger("storagebrief.kafka.producer")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.max.bytes": 33554432,
                     "linger.ms": 5, "compression.type": "none", "logger": log})


def play(job: dict, wait_go=None, emit=print) -> dict:
    import cv2
    import numpy as np

    stream, fps, frames = int(job["stream"]), float(job["fps"]), int(job["frames"])
    topic, quality = job["topic"], int(job["jpeg_quality"])
    bare, paced = job.get("mode") == "bare", bool(job.get("paced", True))
    cap = cv2.VideoCapture(job["video"])
    if not cap.isOpened():
        raise OSError(f"stream {stream}: OpenCV cannot open {job['video']}")
    producer = _client(job["bootstrap"], job.get("acks", "all"))
    producer.list_topics(topic, timeout=30)          # connected, metadata known
    counts = {"delivered": 0, "failed": 0, "delivered_bytes": 0, "errors": []}

    def on_delivery(err, msg):
        if err is None:
            counts["delivered"] += 1
            counts["delivered_bytes"] += len(msg.value())
        else:
            counts["failed"] += 1
            if len(counts["errors"]) < 3:
                counts["errors"].append(str(err))

    def read_frame():
        ok, frame = cap.read()
        if not ok:                                   # loop a video shorter than the stream
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = cap.read()
            if not ok:
                raise OSError(f"stream {stream}: cannot decode a frame of {job['video']}")
        return frame

    fixed = None
    if bare:
        ok, buf = cv2.imencode(".jpg", read_frame(), [cv2.IMWRITE_JPEG_QUALITY, quality])
        fixed = buf.tobytes()
    emit(json.dumps({"event": "ready", "stream": stream}), flush=True)
    if wait_go is not None:
        wait_go()
    t_decode = t_encode = t_produce = t_sleep = 0.0
    sent = sent_bytes = backpressure = late = 0
    lateness: list[float] = []
    key = str(stream).encode()
    start = time.time()
    for i in range(frames):
        due = start + i / fps
        if paced:
            now = time.time()
            if now < due:
                time.sleep(due - now)
                t_sleep += time.time() - now
            elif now - due > 1.0 / fps:
                late += 1
            lateness.append(max(0.0, time.time() - due))
        if bare:
            data = fixed
        else:
            a = time.perf_counter()
            frame = read_frame()
            b = time.perf_counter()
            ok, buf = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
            data = buf.tobytes()
            t_decode += b - a
            t_encode += time.perf_counter() - b
        c = time.perf_counter()
        while True:
            try:
                producer.produce(topic, data, key=key, on_delivery=on_delivery,
                                 headers={"ts_ns": str(time.time_ns()).encode(), "stream": key,
                                          "frame": str(i).encode()})
                break
            except BufferError:                      # the client's queue is full: wait, never drop
                backpressure += 1
                producer.poll(0.05)
        producer.poll(0)
        t_produce += time.perf_counter() - c
        sent += 1
        sent_bytes += len(data)
    end_publish = time.time()
    left = producer.flush(60)
    end = time.time()
    cap.release()
    # the stream's last frame occupies its slot until start + frames/fps
    span = max(end_publish, start + frames / fps if paced else end_publish) - start
    lat = np.asarray(lateness) if lateness else np.zeros(1)
    return {"event": "done", "stream": stream, "topic": topic, "frames_sent": sent, "bytes_sent": sent_bytes,
            "frames_delivered": counts["delivered"], "bytes_delivered": counts["delivered_bytes"],
            "frames_failed": counts["failed"] + left, "errors": counts["errors"],
            "target_fps": fps if paced else None, "achieved_fps": sent / span if span > 0 else 0.0,
            "late_frames": late, "lateness_ms_p99": float(np.percentile(lat, 99) * 1e3),
            "publish_s": end_publish - start, "flush_s": end - end_publish, "start": start, "end": end,
            "decode_s": t_decode, "encode_s": t_encode, "produce_s": t_produce, "sleep_s": t_sleep,
            "backpressure_waits": backpressure}


def main() -> None:
    from ...core.procs import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent decides when a run stops
    job = json.loads(sys.argv[1])

    def wait_go():
        line = sys.stdin.readline()
        if line.strip() != "go":
            raise SystemExit(3)
    result = play(job, wait_go)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
