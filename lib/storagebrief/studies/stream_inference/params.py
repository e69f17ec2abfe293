"""stream_inference: section of params.yaml (validated before any work) and the video catalogue.

A video is '<geometry>@<fps>' with a geometry from GEOMETRIES ('1080p@24' is the Samsung SDC 2023 study's Big Buck
Bunny, '2160p@60' its Costa Rica clip). The sweep is one base configuration (the largest stream
count, the first of every other list) plus one factor varied at a time around it, and the Samsung SDC 2023 study's
table: every video x every topic count at the largest stream count.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from ...core.config import OnSomeTargets, ProjectPath, Strict, sorted_counts

GEOMETRIES = {"144p": (256, 144), "240p": (426, 240), "360p": (640, 360), "480p": (854, 480),
              "720p": (1280, 720), "1080p": (1920, 1080), "1440p": (2560, 1440), "2160p": (3840, 2160)}
VIDEO_RE = re.compile(r"^\s*([0-9a-zA-Z]+)\s*@\s*([-+0-9.eE]+)\s*$")
RESNET50_MIN_INPUT = 32


@dataclass(frozen=True)
class Video:
    geometry: str
    width: int
    height: int
    fps: float

    @property
    def text(self) -> str:
        return f"{self.geometry}@{self.fps:g}"

    @property
    def slug(self) -> str:
        return f"{self.geometry}-{self.fps:g}fps".replace(".", "_")


def parse_video(text) -> Video:
    """'1080p@24' -> Video; ValueError names what is allowed."""
    raw = str(text)
    m = VIDEO_RE.match(raw)
    if not m:
        raise ValueError(f"video '{raw}' is not '<geometry>@<fps>' such as '1080p@24' "
                         f"(geometries: {', '.join(GEOMETRIES)})")
    geometry, fps_text = m.group(1).lower(), m.group(2)
    if geometry not in GEOMETRIES:
        raise ValueError(f"video '{raw}': unknown geometry '{m.group(1)}'; allowed: {', '.join(GEOMETRIES)}")
    try:
        fps = float(fps_text)
    except ValueError:
        raise ValueError(f"video '{raw}': FPS '{fps_text}' is not a number") from None
    if not fps > 0 or fps > 240:
        raise ValueError(f"video '{raw}': FPS must be > 0 and <= 240, got {fps_text}")
    return Video(geometry, *GEOMETRIES[geometry], fps)


class StreamParams(OnSomeTargets):     # targets (a subset of the target names) and how the engine uses it: core.config
    bootstrap_servers: list[str] = Field(default_factory=list)   # an external cluster: no brokers started
    kafka_lib: ProjectPath | None = None          # folder of Kafka jars; null = <repo>/.kafka/lib (`make kafka`)
    brokers: int = Field(3, ge=1, le=9)   # combined broker+controller nodes started per target
    broker_heap_mib: int = Field(320, ge=128, le=65536)
    base_port: int | None = Field(None, ge=1024, le=65000)   # null = free loopback ports
    startup_timeout_s: float = Field(120, gt=0, le=3600)
    flush_messages: int | None = Field(1, ge=1)   # Kafka log.flush.interval.messages; null = OS writeback
    videos: list[str] = Field(default_factory=lambda: ["240p@24"], min_length=1)
    video_dir: ProjectPath | None = None          # your own videos (one per stream, in turn); null = generate
    duration_s: float = Field(6, gt=0, le=86400)       # seconds of video each stream plays
    streams: list[int] = Field(default_factory=lambda: [2, 4], min_length=1)
    topics: list[int] = Field(default_factory=lambda: [1, 3], min_length=1)
    partitions: list[int] = Field(default_factory=lambda: [6], min_length=1)
    replication_factors: list[int] = Field(default_factory=lambda: [3], min_length=1)
    jpeg_quality: int = Field(90, ge=1, le=100)
    acks: str = Field("all", pattern=r"^(all|-1|0|1)$")
    consumers: int = Field(1, ge=1, le=256)             # processes in the consumer group
    input_size: int = Field(32, ge=RESNET50_MIN_INPUT, le=1024)   # ResNet50 input (paper 224)
    batch_size: int = Field(16, ge=1, le=4096)
    drain_timeout_s: float = Field(20, ge=0, le=86400)  # after the last frame: time to classify what is queued
    repeats: int = Field(1, ge=1, le=100)
    keep_data: bool = False               # keep the brokers' log.dirs under the target after the study
    seed: int = 0

    def check_tools(self) -> None:
        """The Kafka jars and Java 17+ of the brokers started here (none for an external cluster): checked by
        core.machine_fit when a run starts, before anything is made (KafkaSetupError, one line)."""
        if self.bootstrap_servers:
            return
        from . import cluster as kafka
        kafka.check_lib(Path(self.kafka_lib).expanduser() if self.kafka_lib else kafka.default_lib_dir())
        kafka.check_java()

    @field_validator("videos")
    @classmethod
    def _videos(cls, v: list[str]) -> list[str]:
        return [parse_video(x).text for x in v]

    @field_validator("streams")
    @classmethod
    def _streams(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "stream counts", 1, 100_000)

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "topic counts", 1, 1000)

    @field_validator("partitions")
    @classmethod
    def _partitions(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "partition counts", 1, 10_000)

    @field_validator("replication_factors")
    @classmethod
    def _rf(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "replication factors", 1, 9)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        for s in v:
            if not re.match(r"^[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}$", s):
                raise ValueError(f"bootstrap server '{s}' is not host:port")
        return v

    @field_validator("video_dir")
    @classmethod
    def _video_dir(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).expanduser().is_dir():
            raise ValueError(f"video folder '{v}' does not exist or is not a directory")
        return v

    @model_validator(mode="after")
    def _replication_fits(self):
        if not self.bootstrap_servers and max(self.replication_factors) > self.brokers:
            raise ValueError(f"replication_factors {self.replication_factors}: a replication factor of "
                             f"{max(self.replication_factors)} needs at least that many brokers, but brokers = "
                             f"{self.brokers}")
        return self

    @property
    def video_list(self) -> list[Video]:
        return [parse_video(x) for x in self.videos]

    def check_machine(self) -> None:
        """The brokers started here, one producer process per stream (the largest stream count) and the consumer
        group within this machine's limits (kit.budget; machine_fit.check_machine: `validate` and the run, before any
        work). The figures are floors measured here (see the constants below)."""
        from ...kit import budget
        brokers = 0 if self.bootstrap_servers else self.brokers
        streams = max(self.streams)
        producer_tasks = PRODUCER_TASKS + max(brokers, len(self.bootstrap_servers), 1)   # librdkafka: one per broker
        tasks = brokers * BROKER_TASKS + streams * producer_tasks + self.consumers * CONSUMER_TASKS
        memory = (brokers * (self.broker_heap_mib * MIB + BROKER_OWN_BYTES) + streams * PRODUCER_BYTES
                  + self.consumers * CONSUMER_BYTES)
        what = (f"stream_inference.streams = {self.streams}, consumers = {self.consumers}, brokers = {brokers}: "
                f"{brokers:,} brokers, {streams:,} producer processes and {self.consumers:,} consumers")
        lower = "lower stream_inference.streams, consumers or brokers (broker_heap_mib), or raise the limit"
        budget.check(f"{what},", tasks=tasks, lower=lower,
                     how=f"{brokers:,} × {BROKER_TASKS} + {streams:,} × {producer_tasks} + {self.consumers:,} × "
                         f"{CONSUMER_TASKS} threads")
        budget.check(what, memory=memory, lower=lower,
                     how=f"{brokers:,} × ({self.broker_heap_mib:,} MiB heap + {BROKER_OWN_BYTES // MIB} MiB) + "
                         f"{streams:,} × {PRODUCER_BYTES // MIB} MiB + {self.consumers:,} × {CONSUMER_BYTES // MIB} MiB")


# Floors measured on this machine (2 CPUs, 2026-12-07): a Kafka 4.4.0 broker 89 threads and 37-73 MiB resident
# beside a 256 MiB heap; a producer (Python, OpenCV, librdkafka) 54 MiB and 5 threads plus one per broker; a consumer
# (TensorFlow, ResNet50 inference at 32x32) 880 MiB and 10 threads.
MIB = 1 << 20
BROKER_TASKS, BROKER_OWN_BYTES = 89, 64 * MIB
PRODUCER_TASKS, PRODUCER_BYTES = 5, 54 * MIB
CONSUMER_TASKS, CONSUMER_BYTES = 10, 880 * MIB


@dataclass(frozen=True)
class Config:
    """One measured configuration."""
    sweep: str
    streams: int
    video: str
    topics: int
    partitions: int
    replication_factor: int

    @property
    def label(self) -> str:
        return (f"{self.streams} streams of {self.video}, {self.topics} topic(s) x {self.partitions} partitions, "
                f"RF {self.replication_factor}")


def configurations(p: StreamParams) -> list[Config]:
    """Base = largest stream count with the first of every other list; each factor varied around
    it; then every video x topic count at the base stream count (the Samsung SDC 2023 study's table). No duplicates."""
    s0, v0, t0, p0, r0 = max(p.streams), p.videos[0], p.topics[0], p.partitions[0], p.replication_factors[0]
    out: list[Config] = []
    seen: set = set()

    def add(sweep, s, v, t, pa, r):
        key = (s, v, t, pa, r)
        if key not in seen:
            seen.add(key)
            out.append(Config(sweep, s, v, t, pa, r))

    for s in p.streams:
        add("streams", s, v0, t0, p0, r0)
    for v in p.videos:
        for t in p.topics:
            add("video_topics", s0, v, t, p0, r0)
    for pa in p.partitions:
        add("partitions", s0, v0, t0, pa, r0)
    for r in p.replication_factors:
        add("replication", s0, v0, t0, p0, r)
    return out


Params = StreamParams
