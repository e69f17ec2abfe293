"""A member of the inference consumer group: ResNet50 (tf.keras.applications, weights=None) on the
frames of its partitions. One process lives for the whole study (TensorFlow is loaded and the
model traced once), and serves one run after another over JSON lines:

    python -m storagebrief.studies.stream_inference.consumer '<json: input_size, batch_size>'
    -> {"event": "ready", "tf_device": ..., "startup_s": ...}
    <- {"cmd": "run", "bootstrap": ..., "group": ..., "partitions": [[topic, p], ...], "latency_file": ...}
    -> {"event": "assigned", ...}
    <- {"cmd": "drain", "deadline_s": ...}      (after every producer has flushed)
    -> {"event": "done", frames, bytes, lag, per-second flow, ...}
    <- {"cmd": "exit"}

Partitions are assigned statically (the parent splits them round-robin over the group), so no
rebalance delays a run; offsets are committed to the run's group id. Per frame: JPEG decode
(OpenCV), resize to the model input (INTER_AREA), BGR->RGB, ResNet50 preprocessing, batches of
batch_size (a short batch is padded, so the traced step never retraces; padding is not counted).
Latency = classified (after the batch's logits are on the host) - the producer's ts_ns header.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time

from ...kit.tf_import import tensorflow


def _commands() -> "queue.Queue[dict]":
    q: queue.Queue = queue.Queue()

    def reader():
        for line in sys.stdin:
            if line.strip():
                q.put(json.loads(line))
        q.put({"cmd": "exit"})                       # parent closed stdin: it is gone
    threading.Thread(target=reader, daemon=True, name="commands").start()
    return q


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Classifier:
    def __init__(self, input_size: int, batch_size: int):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import numpy as np
        tf = tensorflow()

        self.np, self.size, self.batch = np, input_size, batch_size
        gpus = tf.config.list_physical_devices("GPU")
        self.device = "GPU" if gpus else "CPU"
        self.model = tf.keras.applications.ResNet50(weights=None, input_shape=(input_size, input_size, 3),
                                                    classes=1000)
        self.preprocess = tf.keras.applications.resnet50.preprocess_input
        self.step = tf.function(lambda x: tf.argmax(self.model(x, training=False), axis=-1))
        self.step(np.zeros((batch_size, input_size, input_size, 3), np.float32)).numpy()   # trace once

    def frames(self, jpegs: list[bytes]):
        import cv2

        np = self.np
        out = np.zeros((self.batch, self.size, self.size, 3), np.float32)
        for i, data in enumerate(jpegs):
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            if img is None:
                raise ValueError("a frame is not a decodable JPEG")
            img = cv2.resize(img, (self.size, self.size), interpolation=cv2.INTER_AREA)
            out[i] = img[..., ::-1]
        return self.preprocess(out)

    def classify(self, batch) -> None:
        self.step(batch).numpy()


def _consumer(cmd: dict):
    """The run's Kafka consumer, its partitions assigned from the beginning; (consumer, partitions)."""
    import logging

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    log = logging.getLogger("storagebrief.kafka.consumer")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    consumer = Consumer({"bootstrap.servers": cmd["bootstrap"], "group.id": cmd["group"],
                         "enable.auto.commit": True, "auto.offset.reset": "earliest",
                         "fetch.message.max.bytes": 33554432, "logger": log})
    tps = [TopicPartition(t, int(p), OFFSET_BEGINNING) for t, p in cmd["partitions"]]
    consumer.assign(tps)
    consumer.poll(0.1)
    return consumer, tps


class _Served:
    """One run's consumer and what it counted: frames, bytes, batches, latencies, lag, the flow."""

    def __init__(self, consumer, tps: list):
        self.consumer, self.tps = consumer, tps
        self.latencies: list[float] = []
        self.frames = self.nbytes = self.batches = 0
        self.decode_s = self.infer_s = 0.0
        self.flow: list[dict] = []
        self.lag_max = 0
        self.targets: dict | None = None           # partition -> end offset to drain to
        self.t0 = time.time()
        self.next_sample = self.t0 + 1.0

    def lag_now(self) -> int:
        if not self.tps:
            return 0
        total = 0
        for tp in self.consumer.position(self.tps):
            lo, hi = self.consumer.get_watermark_offsets(tp, cached=True)
            if hi is not None and hi >= 0:
                total += max(0, hi - (tp.offset if tp.offset >= 0 else max(lo, 0)))
        return total

    def drain_to_end(self) -> None:
        self.targets = {(tp.topic, tp.partition): self.consumer.get_watermark_offsets(tp, timeout=10)[1]
                        for tp in self.tps}

    def done_draining(self) -> bool:
        if not self.tps:
            return True
        return all(tp.offset >= self.targets[(tp.topic, tp.partition)] for tp in self.consumer.position(self.tps)
                   if self.targets[(tp.topic, tp.partition)] > 0)

    def classify(self, clf: Classifier, pending: list) -> None:
        """One batch: decoded, classified, each frame's latency taken when its class is known."""
        a = time.perf_counter()
        batch = clf.frames([m.value() for m in pending])
        b = time.perf_counter()
        clf.classify(batch)
        now_ns = time.time_ns()
        self.infer_s += time.perf_counter() - b
        self.decode_s += b - a
        for m in pending:
            ts = dict(m.headers() or []).get("ts_ns")
            if ts is not None:
                self.latencies.append((now_ns - int(ts)) / 1e6)
            self.nbytes += len(m.value())
        self.frames += len(pending)
        self.batches += 1

    def sample(self, now: float) -> None:
        """Once a second: frames classified so far and the lag (the run's -flow series)."""
        if now >= self.next_sample:
            lag = self.lag_now()
            self.lag_max = max(self.lag_max, lag)
            self.flow.append({"t_s": round(now - self.t0, 3), "frames_classified": self.frames, "lag_frames": lag})
            self.next_sample += 1.0

    def finish(self, cmd: dict) -> dict:
        """Offsets committed, consumer closed, latencies saved; the 'done' message."""
        import numpy as np

        lag_end = self.lag_now()
        if self.frames:
            try:
                self.consumer.commit(asynchronous=False)
            except Exception:   # noqa: BLE001 -- offsets are bookkeeping, not a measurement
                pass
        self.consumer.close()
        lat = np.asarray(self.latencies, dtype=np.float64)
        if cmd.get("latency_file"):
            np.save(cmd["latency_file"], lat)
        return {"event": "done", "frames_classified": self.frames, "bytes_consumed": self.nbytes,
                "batches": self.batches, "decode_s": self.decode_s, "infer_s": self.infer_s,
                "lag_frames_max": max(self.lag_max, lag_end), "lag_frames_end": lag_end, "drained": lag_end == 0,
                "flow": self.flow, "first_t": self.t0, "end_t": time.time()}


def serve_run(clf: Classifier, cmd: dict, commands: "queue.Queue[dict]") -> dict:
    consumer, tps = _consumer(cmd)
    _say({"event": "assigned", "partitions": len(tps)})
    run = _Served(consumer, tps)
    pending: list = []
    drain_deadline = None
    while True:
        try:
            c = commands.get_nowait()
        except queue.Empty:
            c = None
        if c is not None:
            if c["cmd"] == "drain":
                drain_deadline = time.time() + float(c["deadline_s"])
                run.drain_to_end()
            elif c["cmd"] == "exit":
                consumer.close()
                raise SystemExit(0)
        msgs = consumer.consume(num_messages=clf.batch - len(pending), timeout=0.05) if tps else []
        pending.extend(m for m in msgs if not m.error())
        if pending and (len(pending) >= clf.batch or not msgs):
            run.classify(clf, pending)
            pending = []
        now = time.time()
        run.sample(now)
        if drain_deadline is not None and not pending and (run.done_draining() or now > drain_deadline):
            break
    return run.finish(cmd)


def main() -> None:
    from ...core.procs import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cfg = json.loads(sys.argv[1])
    t = time.time()
    clf = Classifier(int(cfg["input_size"]), int(cfg["batch_size"]))
    _say({"event": "ready", "tf_device": clf.device, "startup_s": time.time() - t})
    commands = _commands()
    while True:
        cmd = commands.get()
        if cmd["cmd"] == "exit":
            return
        if cmd["cmd"] == "run":
            try:
                _say(serve_run(clf, cmd, commands))
            except SystemExit:
                raise
            except Exception as exc:   # noqa: BLE001 -- reported to the parent, which fails the run
                _say({"event": "error", "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
