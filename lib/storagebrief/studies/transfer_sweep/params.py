"""transfer_sweep: section of params.yaml (validated before any work)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import ProjectPath, Strict, sorted_counts
from ...core.workloads import WORKLOADS, merged_spec

from ...kit.sizes import parse_size, size_label  # noqa: F401  (the study's modules import them from here)


class BusyParams(Strict):
    tool: Literal["stress-ng", "stressapptest"] = "stress-ng"
    cpu_percent: float = Field(86.0, gt=0, le=100)               # Micron's GDS brief: 86 % of all CPUs
    memory_bandwidth_percent: float = Field(50.0, ge=0, le=100)  # of this machine's measured peak
    peak_seconds: float = Field(2.0, gt=0, le=60)                # peak memory-bandwidth measurement
    calibrate_seconds: float = Field(1.0, gt=0, le=60)           # per calibration round (stress-ng)
    settle_s: float = Field(0.2, ge=0, le=30)                    # load runs this long before fio starts


class ForecastParams(Strict):
    workloads: list[str] = Field(default_factory=lambda: ["unet3d"])
    accelerator_type: str = "v100"
    workload_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    request_kib: int = Field(1024, ge=1, le=1 << 20)   # the loader's read call size (emulate: read_block_kib)
    emulate_dir: ProjectPath = Field("reports/emulate", validate_default=True)              # use its workload spec and answer when it ran

    @model_validator(mode="after")
    def _check(self):
        known = sorted(set(WORKLOADS) | set(self.workload_overrides))
        unknown = [w for w in self.workloads if w not in known]
        if unknown:
            raise ValueError(f"unknown workload(s) {unknown}; allowed: {known}")
        for name in self.workloads:
            spec = merged_spec(name, self.workload_overrides)
            if self.accelerator_type not in spec.compute_s:
                raise ValueError(f"workload '{name}' has no compute time for accelerator_type "
                                 f"'{self.accelerator_type}'; it has {sorted(spec.compute_s)}")
        return self


class TransferSweepParams(Strict):
    engine: Literal["io_uring", "libaio", "psync"] = "io_uring"
    rw: list[Literal["randread", "read", "randwrite", "write"]] = Field(default_factory=lambda: ["randread"],
                                                                       min_length=1)
    block_sizes: list[int | str] = Field(default_factory=lambda: ["4k", "128k", "1m"], min_length=1,
                                         validate_default=True)
    queue_depths: list[int] = Field(default_factory=lambda: [1, 8, 32], min_length=1)
    numjobs: int = Field(1, ge=1, le=256)     # QD = iodepth x numjobs (psync: numjobs = QD, iodepth 1)
    ramp_time_s: float = Field(0.15, ge=0, le=3600)
    runtime_s: float = Field(0.6, gt=0, le=86400)
    repeats: int = Field(2, ge=1, le=100)
    file_mib: int = Field(256, ge=1, le=1 << 24)   # the preconditioned file per target
    loads: list[Literal["idle", "busy"]] = Field(default_factory=lambda: ["idle", "busy"], min_length=1)
    busy: BusyParams = BusyParams()
    gpu: Literal["auto", "off"] = "auto"           # kvikio path when a CUDA GPU is visible
    forecast: ForecastParams = ForecastParams()
    seed: int = 0

    @field_validator("block_sizes")
    @classmethod
    def _sizes(cls, v: list) -> list[int]:
        out = [parse_size(x) for x in v]
        bad = [x for x, n in zip(v, out) if n < 512 or n % 512]
        if bad:
            raise ValueError(f"block sizes {bad} are not multiples of 512 bytes, which direct I/O (O_DIRECT) "
                             "needs; use e.g. 4k, 128k, 1m")
        return sorted(set(out))

    @field_validator("queue_depths")
    @classmethod
    def _qds(cls, v: list[int]) -> list[int]:
        return sorted_counts(v, "queue depths", 1, 65536)

    @field_validator("rw")
    @classmethod
    def _rw(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"rw lists a pattern twice: {v}")
        return v

    @field_validator("loads")
    @classmethod
    def _loads(cls, v: list[str]) -> list[str]:
        return [x for x in ("idle", "busy") if x in v]

    @model_validator(mode="after")
    def _check(self):
        if self.engine != "psync":
            bad = [q for q in self.queue_depths if q % self.numjobs]
            if bad:
                raise ValueError(f"queue_depths {bad} are not multiples of numjobs = {self.numjobs} "
                                 "(queue depth = iodepth x numjobs)")
        if max(self.block_sizes) > self.file_mib * 2**20:
            raise ValueError(f"file_mib = {self.file_mib} is smaller than the largest block size "
                             f"{max(self.block_sizes)} bytes")
        return self

    @property
    def file_bytes(self) -> int:
        return self.file_mib * 2**20

    def check_machine(self) -> None:
        """The largest point's tasks and buffers within this machine's limits (kit.budget; machine_fit.check_machine:
        `validate` and this study's run, before any work). fio forks one process per job (psync: one per request in
        flight; the GPU path, when a GPU is visible: one slot per request), each with iodepth buffers of the largest
        block; a busy point adds its load's workers (a CPU and a memory worker per CPU and their parent)."""
        import os

        from ...kit import budget
        from .fio import split_queue_depth
        qd, bs = max(self.queue_depths), max(self.block_sizes)
        iodepth, jobs = split_queue_depth(qd, self.numjobs, self.engine)
        if self.gpu == "auto" and os.path.exists("/dev/nvidiactl"):
            iodepth, jobs = (1, qd) if qd > jobs else (iodepth, jobs)
        cpus = os.cpu_count() or 1
        load = 2 * cpus + 1 if "busy" in self.loads else 0
        what = (f"transfer_sweep: queue depth {qd:,} ({self.engine}, numjobs {self.numjobs}): {jobs:,} fio "
                f"job{'s' if jobs != 1 else ''}")
        lower = ("lower transfer_sweep.queue_depths (a synchronous engine runs one process per request in flight), "
                 "use engine io_uring or libaio, or raise the limit")
        budget.check(f"{what},", tasks=1 + jobs + load, lower=lower,
                     how=f"fio 1 + {jobs:,} jobs" + (f" + the busy load's {load} workers ({cpus} CPUs)" if load else ""))
        budget.check(what, memory=jobs * (iodepth * bs + budget.PROCESS_OWN_BYTES),
                     lower="lower transfer_sweep.queue_depths or block_sizes, or raise the limit",
                     how=f"{jobs:,} × ({iodepth:,} × {bs / 2**20:g} MiB buffers + "
                         f"{budget.PROCESS_OWN_BYTES // budget.MIB} MiB per process)")


Params = TransferSweepParams
