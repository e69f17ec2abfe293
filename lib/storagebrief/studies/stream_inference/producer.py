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


class _Stream:
    """One stream's video (looped when shorter than the stream) and its delivery counts."""

    def __init__(self, job: dict):
        import cv2

        self.cv2, self.job = cv2, job
        self.stream, self.quality = int(job["stream"]), int(job["jpeg_quality"])
        self.cap = cv2.VideoCapture(job["video"])
        if not self.cap.isOpened():
            raise OSError(f"stream {self.stream}: OpenCV cannot open {job['video']}")
        self.counts = {"delivered": 0, "failed": 0, "delivered_bytes": 0, "errors": []}

    def on_delivery(self, err, msg) -> None:
        counts = self.counts
        if err is None:
            counts["delivered"] += 1
            counts["delivered_bytes"] += len(msg.value())
        else:
            counts["failed"] += 1
            if len(counts["errors"]) < 3:
                counts["errors"].append(str(err))

    def read_frame(self):
        ok, frame = self.cap.read()
        if not ok:                                   # loop a video shorter than the stream
            self.cap.set(self.cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = self.cap.read()
            if not ok:
                raise OSError(f"stream {self.stream}: cannot decode a frame of {self.job['video']}")
        return frame

    def encode(self, frame) -> bytes:
        ok, buf = self.cv2.imencode(".jpg", frame, [self.cv2.IMWRITE_JPEG_QUALITY, self.quality])
        return buf.tobytes()


class _Tally:
    """The producer's clocks and counters over one play."""

    def __init__(self):
        self.decode = self.encode = self.produce = self.sleep = 0.0
        self.sent = self.sent_bytes = self.backpressure = self.late = 0
        self.lateness: list[float] = []
        self.start = self.end_publish = self.end = 0.0       # wall clock: go, last produce, flushed
        self.left = 0                                        # messages still queued after the flush


def _pace(tally: _Tally, due: float, fps: float) -> None:
    """Wait for the frame's slot (never run ahead); a frame more than one slot late counts as late."""
    now = time.time()
    if now < due:
        time.sleep(due - now)
        tally.sleep += time.time() - now
    elif now - due > 1.0 / fps:
        tally.late += 1
    tally.lateness.append(max(0.0, time.time() - due))


def _publish(producer, topic: str, data: bytes, key: bytes, i: int, on_delivery, tally: _Tally) -> None:
    """Produce one frame (waiting while the client's queue is full: never drop)."""
    c = time.perf_counter()
    while True:
        try:
            producer.produce(topic, data, key=key, on_delivery=on_delivery,
                             headers={"ts_ns": str(time.time_ns()).encode(), "stream": key,
                                      "frame": str(i).encode()})
            break
        except BufferError:                      # the client's queue is full: wait, never drop
            tally.backpressure += 1
            producer.poll(0.05)
    producer.poll(0)
    tally.produce += time.perf_counter() - c
    tally.sent += 1
    tally.sent_bytes += len(data)


def _result(src: _Stream, tally: _Tally, fps: float, frames: int, paced: bool) -> dict:
    """The stream's 'done' message."""
    from ...kit.latency import percentile

    counts, left = src.counts, tally.left
    start, end_publish, end = tally.start, tally.end_publish, tally.end
    # the stream's last frame occupies its slot until start + frames/fps
    span = max(end_publish, start + frames / fps if paced else end_publish) - start
    lateness = tally.lateness if tally.lateness else [0.0]
    return {"event": "done", "stream": src.stream, "topic": src.job["topic"], "frames_sent": tally.sent,
            "bytes_sent": tally.sent_bytes,
            "frames_delivered": counts["delivered"], "bytes_delivered": counts["delivered_bytes"],
            "frames_failed": counts["failed"] + left, "errors": counts["errors"],
            "target_fps": fps if paced else None, "achieved_fps": tally.sent / span if span > 0 else 0.0,
            "late_frames": tally.late, "lateness_ms_p99": percentile(lateness, 99, 1e3),
            "publish_s": end_publish - start, "flush_s": end - end_publish, "start": start, "end": end,
            "decode_s": tally.decode, "encode_s": tally.encode, "produce_s": tally.produce,
            "sleep_s": tally.sleep, "backpressure_waits": tally.backpressure}


def play(job: dict, wait_go=None, emit=print) -> dict:
    stream, fps, frames = int(job["stream"]), float(job["fps"]), int(job["frames"])
    topic = job["topic"]
    bare, paced = job.get("mode") == "bare", bool(job.get("paced", True))
    src = _Stream(job)
    producer = _client(job["bootstrap"], job.get("acks", "all"))
    producer.list_topics(topic, timeout=30)          # connected, metadata known
    fixed = src.encode(src.read_frame()) if bare else None
    emit(json.dumps({"event": "ready", "stream": stream}), flush=True)
    if wait_go is not None:
        wait_go()
    tally = _Tally()
    key = str(stream).encode()
    start = tally.start = time.time()
    for i in range(frames):
        if paced:
            _pace(tally, start + i / fps, fps)
        if bare:
            data = fixed
        else:
            a = time.perf_counter()
            frame = src.read_frame()
            b = time.perf_counter()
            data = src.encode(frame)
            tally.decode += b - a
            tally.encode += time.perf_counter() - b
        _publish(producer, topic, data, key, i, src.on_delivery, tally)
    tally.end_publish = time.time()
    tally.left = producer.flush(60)
    tally.end = time.time()
    src.cap.release()
    return _result(src, tally, fps, frames, paced)


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
