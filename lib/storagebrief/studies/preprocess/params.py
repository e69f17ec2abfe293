"""preprocess: section of params.yaml (validated before any work)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import ProjectPath, Strict, sorted_counts

INTERPOLATIONS = {"area": "INTER_AREA", "linear": "INTER_LINEAR", "cubic": "INTER_CUBIC",
                  "nearest": "INTER_NEAREST", "lanczos": "INTER_LANCZOS4"}


class PreprocessParams(Strict):
    source_dir: ProjectPath | None = None          # your own TIFFs (class subfolders optional)
    image_count: int = Field(48, ge=1, le=10_000_000)   # images in the process sweep
    image_counts: list[int] = Field(default_factory=lambda: [8, 24], min_length=0)
    processes: list[int] = Field(default_factory=lambda: [1, 2, 4], min_length=1)
    image_width: int = Field(1920, ge=16, le=40_000)
    image_height: int = Field(1080, ge=16, le=40_000)
    bit_depth: Literal[8, 16] = 8
    channels: Literal[1, 3] = 3
    num_classes: int = Field(4, ge=1, le=10_000)
    resize_width: int = Field(256, ge=8, le=8192)
    resize_height: int = Field(256, ge=8, le=8192)
    interpolation: Literal["area", "linear", "cubic", "nearest", "lanczos"] = "area"
    output_mode: Literal["sharded", "single"] = "sharded"
    repeats: int = Field(3, ge=1, le=100)
    seed: int = 0

    @field_validator("processes")
    @classmethod
    def _processes(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "process counts", 1, 1024)

    @field_validator("image_counts")
    @classmethod
    def _counts(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "image counts")

    @field_validator("source_dir")
    @classmethod
    def _source(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).expanduser().is_dir():
            raise ValueError(f"source folder '{v}' does not exist or is not a directory")
        return v

    @model_validator(mode="after")
    def _enough_images(self):
        if self.image_counts and max(self.image_counts) > self.image_count:
            raise ValueError(f"image_counts {self.image_counts} exceed image_count={self.image_count}: "
                             "the dataset has only image_count images")
        return self

    @property
    def image_bytes(self) -> int:
        return self.image_width * self.image_height * self.channels * (self.bit_depth // 8)

    def check_machine(self) -> None:
        """The largest process count's workers within this machine's process, file and memory limits (kit.budget;
        machine_fit.check_machine: `validate` and this study's run, before any work). A worker holds an image three
        times at its peak: the file's bytes, the decoded array and its colour-mapped copy (pipeline.decode_resize;
        the resized output is small), beside its own process memory."""
        from ...kit import budget
        n = max(self.processes)
        what, lower = f"preprocess.processes = {self.processes}: {n:,} worker processes", \
            "lower preprocess.processes (or the image size), or raise the limit"
        budget.check(f"{what},", tasks=n * budget.TASKS_PER_WORKER, how=f"{n:,} × {budget.TASKS_PER_WORKER}",
                     lower=lower)
        budget.check(f"{what},", files=n * budget.FILES_PER_WORKER, how=f"{n:,} × {budget.FILES_PER_WORKER} pipes",
                     lower=lower)
        per = 3 * self.image_bytes + budget.PROCESS_OWN_BYTES
        budget.check(what, memory=n * per, lower=lower,
                     how=f"{n:,} × (3 × {self.image_bytes / budget.MIB:,.1f} MiB per {self.image_width}x"
                         f"{self.image_height} image at {self.channels} × {self.bit_depth} bits + "
                         f"{budget.PROCESS_OWN_BYTES // budget.MIB} MiB per process)")


Params = PreprocessParams
