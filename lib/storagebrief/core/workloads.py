"""The training workloads of DLIO / MLPerf Storage: one catalogue, read by every study that needs
a workload's demand (emulate runs them; a transfer-size forecast turns them into bandwidth).

Each number's source is in SOURCES (and in docs/studies/emulate.md): MLPerf Storage v3.0 where it defines
the (workload, accelerator) pair, the v1.0/v2.0 configs for a100/h100, DLIO's own configs for v100.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from .config import Strict, check_name
from .params_input import explain_error
from .measured_accelerators import with_measured

MLPERF_DATASET_FACTOR = 5    # dataset >= 5 x memory available to the run


class WorkloadSpec(Strict):
    """One training workload as DLIO / MLPerf Storage describe it."""

    description: str = ""
    format: Literal["npz", "tfrecord", "jpeg"]
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

    def demand_bytes_per_s(self, accelerator: str) -> float:
        """What one accelerator reads per second when it is never kept waiting:
        batch x mean sample bytes / compute time per batch."""
        return self.batch_for(accelerator) * self.record_bytes / self.compute_s[accelerator]


_MLPERF = "mlcommons/storage configs/dlio/workload"
SOURCES: dict[str, dict[str, str]] = {
    "unet3d": {"v100": "DLIO configs/workload/unet3d_v100.yaml (MLPerf Storage v0.5)",
               "a100": f"{_MLPERF}/unet3d_a100.yaml (v1.0/v2.0)",
               "h100": f"{_MLPERF}/unet3d_h100.yaml (v1.0/v2.0)",
               "b200": f"{_MLPERF}/unet3d_b200.yaml @0d75b41 (v3.0 closed: the H100 time ÷ 2, as the file says)"},
    "resnet50": {"v100": "DLIO configs/workload/resnet50_v100.yaml",
                 "a100": f"{_MLPERF}/resnet50_a100.yaml (v1.0/v2.0)",
                 "h100": f"{_MLPERF}/resnet50_h100.yaml (v1.0/v2.0)"},
    "cosmoflow": {"a100": f"{_MLPERF}/cosmoflow_a100.yaml (v1.0/v2.0)",
                  "h100": f"{_MLPERF}/cosmoflow_h100.yaml (v1.0/v2.0)"},
    "retinanet": {"b200": f"{_MLPERF}/retinanet_b200.yaml @11460d0 (v3.0 closed)",
                  "mi355": f"{_MLPERF}/retinanet_mi355.yaml @76f4545 (v3.0 closed)"},
}

# MLPerf Storage v3.0's closed training workloads and accelerators. Where a pair has no config in
# mlcommons/storage, the catalogue has no compute time for it and says why instead of inventing one.
MLPERF_V3_CLOSED = {"unet3d": ("b200", "mi355"), "retinanet": ("b200", "mi355")}
NOT_PUBLISHED: dict[tuple[str, str], str] = {
    ("unet3d", "mi355"): "mlcommons/storage has no unet3d_mi355.yaml: no published MI355 compute time for unet3d",
    ("retinanet", "a100"): "retinanet_a100.yaml describes another dataset (153,600 ± 51,200 B records, batch 16) "
                           "than v3.0's closed retinanet (322,957 B): its 0.210 s is not this workload's",
    ("retinanet", "h100"): "retinanet_h100.yaml describes another dataset (153,600 ± 51,200 B records, batch 16) "
                           "than v3.0's closed retinanet (322,957 B): its 0.180 s is not this workload's",
}

# Reference values (see SOURCES for where each accelerator's numbers come from).
WORKLOADS: dict[str, dict] = {
    "unet3d": dict(description="3D U-Net, medical image segmentation (KiTS19): one sample per npz file",
                   format="npz", samples_per_file=1, record_bytes=146_600_628,
                   record_bytes_stdev=68_341_808, batch_size=7, batch_size_by_accelerator={"v100": 4},
                   compute_s={"v100": 1.3604, "a100": 0.636, "h100": 0.323, "b200": 0.162}, read_threads=4,
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
    "retinanet": dict(description="RetinaNet, object detection (OpenImages): one JPEG image per file",
                      format="jpeg", samples_per_file=1, record_bytes=322_957, record_bytes_stdev=0,
                      batch_size=24, batch_size_by_accelerator={"mi355": 32},
                      compute_s={"b200": 0.04755, "mi355": 0.0634}, read_threads=8,
                      au_threshold_percent=85.0),
}


def missing_compute_note(name: str, accelerator: str) -> str:
    """Why the catalogue has no compute time for this pair, when it is a known gap ('' otherwise)."""
    return NOT_PUBLISHED.get((name, accelerator), "")


def merged_spec(name: str, overrides: dict[str, dict]) -> WorkloadSpec:
    """Built-in reference values with the user's overrides on top (or a new workload). A workload's name becomes
    a folder (<name>/data) and stands in the brief: the name rule of targets applies (core/config.check_name)."""
    check_name(name, "workload_overrides: a workload's name")
    base = dict(WORKLOADS.get(name, {}))
    base = with_measured(name, base)        # + accelerators measured here (calibrate-accelerator)
    extra = overrides.get(name) or {}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    try:
        return WorkloadSpec.model_validate(base)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {explain_error(WorkloadSpec, e)}"
                 if e.get("type") == "extra_forbidden" else
                 f"{'.'.join(str(p) for p in e['loc'])} = {e.get('input')!r}: {explain_error(WorkloadSpec, e)}"
                 for e in exc.errors()]
        raise ValueError(f"workload '{name}': " + "; ".join(lines)) from None
