"""emulate: section of params.yaml, and the DLIO / MLPerf Storage reference workloads (validated before any work)."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ...core.config import Strict, sorted_counts

MLPERF_DATASET_FACTOR = 5    # dataset >= 5 x memory available to the run


class WorkloadSpec(Strict):
    """One training workload as DLIO / MLPerf Storage describe it."""

    description: str = ""
    format: Literal["npz", "tfrecord"]
    samples_per_file: int = Field(1, ge=1, le=1_000_000)
    record_bytes: int = Field(ge=1, le=1 << 40)          # bytes of one sample
    record_bytes_stdev: int = Field(0, ge=0, le=1 << 40)
    batch_size: int = Field(ge=1, le=1_000_000)
    batch_size_by_accelerator: dict[str, int] = Field(default_factory=dict)
    compute_s: dict[str, float]                          # accelerator type -> s per batch
    read_threads: int = Field(4, ge=1, le=256)
    au_threshold_percent: float = Field(90.0, gt=0, le=100)

    @field_validator("compute_s")
    @classmethod
    def _compute(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("compute_s needs at least one accelerator type, e.g. {v100: 1.3604}")
        bad = {k: s for k, s in v.items() if s is None or not s > 0 or not math.isfinite(s)}
        if bad:
            raise ValueError(f"compute time per batch must be > 0 seconds, got {bad}")
        return v

    @field_validator("batch_size_by_accelerator")
    @classmethod
    def _batches(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: b for k, b in v.items() if not isinstance(b, int) or b < 1}
        if bad:
            raise ValueError(f"batch sizes must be whole numbers >= 1, got {bad}")
        return v

    def batch_for(self, accelerator: str) -> int:
        return self.batch_size_by_accelerator.get(accelerator, self.batch_size)


# Reference values used by DLIO / MLPerf Storage (issue 4's table).
WORKLOADS: dict[str, dict] = {
    "unet3d": dict(description="3D U-Net, medical image segmentation (KiTS19): one sample per npz file",
                   format="npz", samples_per_file=1, record_bytes=146_600_628,
                   record_bytes_stdev=68_341_808, batch_size=7, batch_size_by_accelerator={"v100": 4},
                   compute_s={"v100": 1.3604, "a100": 0.636, "h100": 0.323}, read_threads=4,
                   au_threshold_percent=90.0),
    "resnet50": dict(description="ResNet-50, ImageNet: 1,251 samples per TFRecord file",
                     format="tfrecord", samples_per_file=1251, record_bytes=114_660,
                     record_bytes_stdev=0, batch_size=400, batch_size_by_accelerator={"v100": 64},
                     compute_s={"v100": 0.195, "a100": 0.435, "h100": 0.224}, read_threads=8,
                     au_threshold_percent=90.0),
    "cosmoflow": dict(description="CosmoFlow, cosmology 3D CNN: one sample per TFRecord file",
                      format="tfrecord", samples_per_file=1, record_bytes=2_828_486,
                      record_bytes_stdev=71_311, batch_size=1,
                      compute_s={"a100": 0.00551, "h100": 0.00350}, read_threads=4,
                      au_threshold_percent=70.0),
}


def merged_spec(name: str, overrides: dict[str, dict]) -> WorkloadSpec:
    """Built-in reference values with the user's overrides on top (or a new workload)."""
    base = dict(WORKLOADS.get(name, {}))
    extra = overrides.get(name) or {}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    try:
        return WorkloadSpec.model_validate(base)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])} = {e.get('input')!r}: {e['msg']}"
                 for e in exc.errors()]
        raise ValueError(f"workload '{name}': " + "; ".join(lines)) from None


class EmulateParams(Strict):
    workloads: list[str] = Field(default_factory=lambda: ["unet3d"], min_length=1)
    accelerator_type: str = "v100"                  # key of each workload's compute_s
    workload_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    accelerators: list[int] = Field(default_factory=lambda: [1, 2, 3, 4], min_length=1)
    stop_below_threshold: bool = False              # stop a target's sweep once AU < threshold
    repeats: int = Field(3, ge=1, le=100)
    epochs: int = Field(3, ge=1, le=10_000)
    num_files: int | None = Field(336, ge=1, le=100_000_000)
    dataset_sizing: Literal["mlperf", "memory_cap", "fixed"] = "memory_cap"
    memory_limit_mib: int = Field(32, ge=16, le=1 << 24)
    odirect: bool = False
    readahead: bool | None = None                   # None: off under the memory cap, else the kernel's
    read_threads: int | None = Field(None, ge=1, le=256)   # None: the workload's own
    prefetch: int = Field(2, ge=1, le=64)           # ready batches per read thread
    read_block_kib: int = Field(1024, ge=4, le=65536)
    checkpoint_every_steps: int = Field(0, ge=0)    # 0 = no checkpoints
    checkpoint_mib: float = Field(0, ge=0, le=1 << 20)
    seed: int = 0

    @field_validator("accelerators")
    @classmethod
    def _accelerators(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "accelerator counts", 1, 1024)

    @field_validator("read_block_kib")
    @classmethod
    def _block(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"read_block_kib must be a multiple of 4 (O_DIRECT alignment), got {v}")
        return v

    @model_validator(mode="after")
    def _check(self):
        known = sorted(set(WORKLOADS) | set(self.workload_overrides))
        unknown = [w for w in self.workloads if w not in known]
        if unknown:
            raise ValueError(f"unknown workload(s) {unknown}; allowed: {known} "
                             "(define new ones under emulate.workload_overrides)")
        if len(set(self.workloads)) != len(self.workloads):
            raise ValueError(f"workloads listed twice: {self.workloads}")
        for name in self.workload_overrides:
            merged_spec(name, self.workload_overrides)   # raises with the workload's name
        for name in self.workloads:
            spec = merged_spec(name, self.workload_overrides)
            if self.accelerator_type not in spec.compute_s:
                raise ValueError(f"workload '{name}' has no compute time for accelerator_type "
                                 f"'{self.accelerator_type}'; it has {sorted(spec.compute_s)}")
            if self.num_files is not None:
                per_acc = self.num_files // max(self.accelerators) * spec.samples_per_file
                batch = spec.batch_for(self.accelerator_type)
                if per_acc < batch:
                    raise ValueError(
                        f"workload '{name}': num_files = {self.num_files} gives each of "
                        f"{max(self.accelerators)} accelerators {per_acc} samples per epoch, fewer "
                        f"than one batch of {batch}; raise num_files to at least "
                        f"{math.ceil(batch / spec.samples_per_file) * max(self.accelerators)}")
        if self.dataset_sizing in ("memory_cap", "fixed") and self.num_files is None:
            raise ValueError(f"dataset_sizing = {self.dataset_sizing} needs num_files (only mlperf "
                             "derives the file count from the host's memory)")
        if self.dataset_sizing == "memory_cap":
            cap = self.memory_limit_mib * 2**20
            for name in self.workloads:
                spec = merged_spec(name, self.workload_overrides)
                size = self.num_files * spec.samples_per_file * spec.record_bytes
                if size < MLPERF_DATASET_FACTOR * cap:
                    need = math.ceil(MLPERF_DATASET_FACTOR * cap / (spec.samples_per_file * spec.record_bytes))
                    raise ValueError(
                        f"workload '{name}': dataset of {size / 1e6:.0f} MB is smaller than "
                        f"{MLPERF_DATASET_FACTOR} x memory_limit_mib ({MLPERF_DATASET_FACTOR * cap / 1e6:.0f} MB), "
                        f"so page-cache hits could exceed 20 %; raise num_files to >= {need} or lower "
                        "memory_limit_mib")
        if (self.checkpoint_every_steps > 0) != (self.checkpoint_mib > 0):
            raise ValueError("checkpoints need both checkpoint_every_steps > 0 and checkpoint_mib > 0 "
                             "(or both 0 to disable)")
        return self

    def spec(self, name: str) -> WorkloadSpec:
        return merged_spec(name, self.workload_overrides)


Params = EmulateParams   # the name core.study looks for
