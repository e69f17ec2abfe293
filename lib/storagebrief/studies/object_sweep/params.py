"""object_sweep: section of params.yaml (validated before any work)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import OnSomeTargets, Strict, sorted_counts
from ...kit.sizes import parse_size


class BusyParams(Strict):
    cpu_percent: float = Field(86.0, gt=0, le=100)   # stress-ng CPU load on every CPU (as the transfer sweep's)
    settle_s: float = Field(0.2, ge=0, le=30)        # the load runs this long before the point starts


class ObjectSweepParams(OnSomeTargets):     # targets (a subset of the target names) and how the engine uses it: core.config
    client: Literal["minio-go"] = "minio-go"             # the compiled client (kit/s3worker): docs/studies/object_sweep.md
    ops: list[Literal["put", "get"]] = Field(default_factory=lambda: ["put", "get"], min_length=1)
    object_sizes: list[int | str] = Field(default_factory=lambda: ["64k", "1m"], min_length=1, validate_default=True)
    concurrency: list[int] = Field(default_factory=lambda: [1, 8], min_length=1)
    # client processes sharing each point's requests (never more than the point's concurrency): one Python process
    # tops out near one core (its interpreter lock), so several let the client use more cores
    client_processes: int = Field(1, ge=1, le=64)
    # also run the compiled reference client (benchmarks/s3ref, Go with minio-go; `make s3ref`) at every idle point
    # on a local-gateway target, on the same keys and cold state, order alternating by repeat: its MB/s beside ours.
    # Since issue 58 the study's client is minio-go too (a newer release): a check of one library against itself,
    # not an independent reference; benchmarks/object_clients.py compares with s3dlio
    reference_client: bool = False
    mib_per_point: float = Field(8, gt=0, le=1 << 20)     # data moved per point: objects = this / object size ...
    min_objects: int = Field(8, ge=1, le=1 << 20)         # ... but at least this many
    max_objects: int = Field(64, ge=1, le=1 << 20)        # ... and at most this many
    loads: list[Literal["idle", "busy"]] = Field(default_factory=lambda: ["idle", "busy"], min_length=1)
    busy: BusyParams = BusyParams()
    repeats: int = Field(2, ge=1, le=100)
    seed: int = 0

    @field_validator("object_sizes")
    @classmethod
    def _sizes(cls, v: list) -> list[int]:
        out = [parse_size(x, "object size") for x in v]
        bad = [x for x, n in zip(v, out) if n < 1 or n > 5 << 30]
        if bad:
            raise ValueError(f"object sizes {bad} outside 1 byte .. 5 GiB (the largest single S3 PUT)")
        return sorted(set(out))

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "concurrency (requests in flight)", 1, 1024)

    @field_validator("loads", "ops")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))

    @model_validator(mode="after")
    def _check(self):
        if self.min_objects > self.max_objects:
            raise ValueError(f"min_objects = {self.min_objects} is above max_objects = {self.max_objects}")
        return self

    def check_machine(self) -> None:
        """The worker, its threads and the largest object within the machine's limits (machine_fit.check_machine:
        `validate` and this study's run, not a load of another study's params)."""
        from .worker import check_budget
        check_budget(self)

    def check_tools(self) -> None:
        """The compiled client every batch runs in (kit/s3worker, `make s3worker`): checked by core.machine_fit when
        a run starts, before anything is made (one line)."""
        from ...kit import s3worker
        if s3worker.missing():
            raise ValueError(f"object_sweep: {s3worker.missing()}")

    def objects_for(self, size: int) -> int:
        return max(self.min_objects, min(self.max_objects, int(self.mib_per_point * 2**20 // size)))


Params = ObjectSweepParams
