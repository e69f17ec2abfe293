"""train_resnet50: section of params.yaml (validated before any work) and memory settings.

A memory setting is 'none', a dataset:memory ratio ('2.5:1': caps the job's page cache at
dataset x memory/dataset) or an absolute size ('2GiB': caps the whole job, as `docker run -m`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import OnSomeTargets, ProjectPath, Strict, sorted_counts


MIB = 1 << 20
SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
RATIO_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$")
RESNET50_MIN_INPUT = 32  # keras.applications.ResNet50 refuses smaller inputs


@dataclass(frozen=True)
class MemorySetting:
    """'none', a dataset:memory ratio ('2.5:1') or an absolute size ('2GiB')."""

    text: str
    kind: Literal["none", "ratio", "bytes"]
    value: float = 0.0          # memory per dataset byte (ratio) or bytes (size)

    @property
    def limited(self) -> bool:
        return self.kind != "none"


def parse_memory(text) -> MemorySetting:
    """Parse a memory setting; ValueError says what is allowed."""
    raw = str(text).strip()
    if raw.lower() in ("none", "null", "unlimited", ""):
        return MemorySetting("none", "none")
    m = RATIO_RE.match(raw)
    if m:
        data, mem = float(m.group(1)), float(m.group(2))
        if data <= 0 or mem <= 0:
            raise ValueError(f"memory ratio '{raw}': both sides of dataset:memory must be > 0")
        return MemorySetting(raw, "ratio", mem / data)
    m = SIZE_RE.match(raw)
    if m and m.group(2).lower() in SIZE_UNITS:
        n = float(m.group(1)) * SIZE_UNITS[m.group(2).lower()]
        if n < 16 * MIB:
            raise ValueError(f"memory limit '{raw}' = {n:.0f} bytes is below 16 MiB; "
                             "TensorFlow alone needs over a GiB")
        return MemorySetting(raw, "bytes", n)
    raise ValueError(f"memory setting '{raw}' is not 'none', a dataset:memory ratio such as '2.5:1' or "
                     "'1:5', nor a size such as '2GiB', '1500MiB' or '3G'")


class TrainParams(OnSomeTargets):     # targets (a subset of the target names) and how the engine uses it: core.config
    dataset: Literal["auto", "preprocess", "generated"] = "auto"
    dataset_images: int = Field(160, ge=1, le=50_000_000)  # generated set size (auto: if > preprocess)
    preprocess_outputs: ProjectPath = Field("reports/preprocess/outputs.json", validate_default=True)
    record_kib: int = Field(1024, ge=8, le=16_384)     # generated record size (paper: 110, ImageNet JPEG)
    shards: int = Field(4, ge=1, le=4096)               # generated TFRecord files
    num_classes: int = Field(4, ge=2, le=100_000)
    input_size: int = Field(32, ge=RESNET50_MIN_INPUT, le=1024)
    batch_size: int = Field(32, ge=1, le=65_536)
    class_balanced_batches: bool = True   # generated sets: batch_size / num_classes records of each class a batch
    epochs: int = Field(2, ge=1, le=10_000)
    learning_rate: float = Field(0.001, gt=0, le=10)
    shuffle_buffer: int = Field(64, ge=1, le=1_000_000)
    read_parallelism: int = Field(4, ge=1, le=1024)     # TFRecord files read at once (interleave)
    warmup_steps: int = Field(2, ge=1, le=100)
    memory_limits: list[str] = Field(default_factory=lambda: ["none", "2.5:1"], min_length=1)
    memory_margin_mib: int = Field(48, ge=0, le=1 << 20)
    parallel_models: list[int] = Field(default_factory=lambda: [1, 2])
    parallel_memory: str = "2.5:1"
    ingest_mb_per_s: float = Field(20.0, ge=0, le=100_000)   # 0 = no ingest scenario
    ingest_memory: str = "none"
    checkpoint_every_steps: int = Field(4, ge=0, le=10_000_000)  # 0 = no checkpoint scenario
    checkpoint_default_interval_s: float = Field(600.0, gt=0)     # tf.estimator's default
    checkpoint_memory: str = "none"
    repeats: int = Field(1, ge=1, le=100)
    memory_runs: int = Field(1, ge=1, le=100)   # runs of the memory sweep (page 1's images/s and reads), repeats included
    stall_timeout_s: float = Field(240.0, ge=10, le=86_400)
    seed: int = 0

    @field_validator("memory_limits")
    @classmethod
    def _limits(cls, v: list) -> list[str]:
        out = []
        for item in v:
            parse_memory(item)
            text = str(item).strip()
            if text not in out:
                out.append(text)
        return out

    @field_validator("parallel_memory", "ingest_memory", "checkpoint_memory")
    @classmethod
    def _one_limit(cls, v) -> str:
        parse_memory(v)
        return str(v).strip()

    @field_validator("parallel_models")
    @classmethod
    def _models(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "model counts", 1, 256)

    @model_validator(mode="after")
    def _consistent(self):
        if self.dataset != "preprocess" and self.dataset_images < self.batch_size:
            raise ValueError(f"dataset_images={self.dataset_images} is smaller than batch_size="
                             f"{self.batch_size}: an epoch would have no full batch")
        if self.class_balanced_batches and self.batch_size % self.num_classes:
            raise ValueError(f"batch_size={self.batch_size} is not a multiple of num_classes={self.num_classes}: "
                             "class_balanced_batches needs one (or set class_balanced_batches: false)")
        return self


    def check_machine(self) -> None:
        """The most TensorFlow jobs a run trains at once (the largest of parallel_models, else one) within this
        machine's limits (kit.budget; machine_fit.check_machine: `validate` and the run, before any work). A job's
        figures are floors measured here (ResNet50 at 32x32, batch 16, 2 CPUs): 1,007 MiB resident and 9 threads
        once training; a larger input or batch needs more, which the memory-limited runs then measure."""
        from ...kit import budget
        jobs = max(self.parallel_models or [1])
        what = (f"train_resnet50.parallel_models = {self.parallel_models}: {jobs:,} TensorFlow "
                f"job{'s' if jobs > 1 else ''} at once")
        lower = "lower train_resnet50.parallel_models, or raise the limit"
        budget.check(f"{what},", tasks=jobs * JOB_TASKS, lower=lower, how=f"{jobs:,} × {JOB_TASKS} threads")
        budget.check(what, memory=jobs * JOB_BYTES, lower=lower, how=f"{jobs:,} × {JOB_BYTES // MIB:,} MiB each")


# One training job's floor (TensorFlow 2 + ResNet50, 32x32, batch 16, measured on this 2-CPU machine, 2026-12-07)
JOB_BYTES = 1007 * MIB
JOB_TASKS = 9

Params = TrainParams   # the name core.study looks for
