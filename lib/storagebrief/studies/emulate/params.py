"""emulate: section of params.yaml (validated before any work); the workload catalogue lives in core.workloads."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...core.config import ParamsError, check_names, sorted_counts
from ...core.workloads import MLPERF_DATASET_FACTOR, WORKLOADS, WorkloadSpec, merged_spec, missing_compute_note
from ...kit.launch import LaunchParams
from . import memory
from .mlperf import RUNS  # the shared `mpi:` section (checkpoint has one too)

__all__ = ["MLPERF_DATASET_FACTOR", "WORKLOADS", "WorkloadSpec", "merged_spec", "EmulateParams", "Params"]


class EmulateParams(LaunchParams):
    workloads: list[str] = Field(default_factory=lambda: ["unet3d"], min_length=1)
    accelerator_type: str = "v100"                  # key of each workload's compute_s
    workload_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    accelerators: Literal["auto"] | list[int] = "auto"   # auto: search N (search.py); a list: sweep these
    search_budget_s: float = Field(60.0, gt=0, le=7 * 86400)   # auto: seconds of runs per workload and target
    s3_search_budget_s: float | None = Field(45.0, gt=0, le=7 * 86400)   # auto on S3 targets; None: search_budget_s
    search_max: int = Field(64, ge=1, le=1024)      # auto: the largest N the search probes
    stop_below_threshold: bool = False              # a list: stop a target's sweep once AU < threshold
    repeats: int = Field(3, ge=1, le=100)
    epochs: int = Field(3, ge=1, le=10_000)
    num_files: int | None = Field(336, ge=1, le=100_000_000)
    # the data set grows with N so each accelerator has this many steps per epoch (au_window: the fewest whose AU
    # window is a measurement, window.py); None: num_files (or the sizing's count) at every N
    min_steps_per_epoch: int | Literal["au_window"] | None = None
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
    client_check: bool = True                       # re-run the answer's point on half the CPUs (kit/client_check.py)
    mlperf_rules: bool = False                      # MLPerf Storage v3.0 run rules (mlperf.py)
    mlperf_hosts: int = Field(1, ge=1, le=10_000)   # mlperf_rules: client hosts in the dataset-size formula

    @field_validator("accelerators", mode="before")
    @classmethod
    def _accelerators(cls, v):
        if isinstance(v, str) and v == "auto":
            return v
        if not isinstance(v, list) or not v:
            raise ValueError("must be auto (search the largest N: emulate.search_budget_s, emulate.search_max) "
                             "or a non-empty list of accelerator counts, e.g. [1, 2, 4]")
        return sorted_counts(v, "accelerator counts", 1, 1024)

    @property
    def search(self) -> bool:
        """accelerators: auto: search N per workload and target (search.py) instead of a fixed list."""
        return self.accelerators == "auto"

    def budget_s(self, target) -> float:
        """The search budget of one target (or target name): S3 targets' own, to keep their extra time small."""
        return self.s3_search_budget_s if on_s3(target) and self.s3_search_budget_s else self.search_budget_s

    @property
    def max_accelerators(self) -> int:
        """The largest N a run may have: search_max under auto, else the list's largest."""
        return self.search_max if self.search else max(self.accelerators)

    def check_machine(self, s3: bool = False) -> None:
        """The largest accelerator count's processes and their read threads and buffers within this machine's limits
        (kit.budget; machine_fit.check_machine: `validate` and this study's run, before any work): each forked
        accelerator is a process with its queue's feeder thread and `read_threads` loader threads, each thread one
        read buffer of read_block_kib on a directory; `s3` (an S3 target measured): there the accelerator holds no
        read buffer but runs its compiled S3 client, a process of its own with one connection per read thread
        (kit.budget.s3_client_bytes, measured), and the larger of the two is counted. With launcher: mpi the ranks
        live on their hosts (mpirun's preflight)."""
        if self.launcher == "mpi":
            return
        from ...kit import budget
        n, block = self.max_accelerators, self.read_block_kib * 1024
        name, threads = max(((w, self.read_threads or self.spec(w).read_threads) for w in self.workloads),
                            key=lambda wt: wt[1])
        what = f"emulate: {n:,} accelerators of {name} with {threads} read threads each"
        lower = "lower emulate.accelerators (search_max under auto) or read_threads, use launcher: mpi, or raise the limit"
        budget.check(f"{what},", tasks=n * (budget.TASKS_PER_WORKER + threads), lower=lower,
                     how=f"{n:,} × ({budget.TASKS_PER_WORKER} + {threads} read threads)")
        client = budget.s3_client_bytes(threads) if s3 else 0
        how = (f"{client / budget.MIB:,.0f} MiB for its compiled S3 client" if client > threads * block else
               f"{threads} × {self.read_block_kib:,} KiB read buffers")
        budget.check(what, memory=n * (max(threads * block, client) + budget.PROCESS_OWN_BYTES), lower=lower,
                     how=f"{n:,} × ({how} + {budget.PROCESS_OWN_BYTES // budget.MIB} MiB per process)")

    @property
    def page_cache_capped(self) -> bool:
        """The accelerators run under the page-cache cap (a directory target's memory cgroup)."""
        return self.dataset_sizing == "memory_cap" and not self.odirect

    def memory_max_accelerators(self, name: str) -> int | None:
        """The most accelerators of workload `name` whose reads fit the page-cache cap (memory.py); None: no cap."""
        if not self.page_cache_capped:
            return None
        spec = self.spec(name)
        return memory.max_accelerators(self.memory_limit_mib * 2**20, self.read_threads or spec.read_threads,
                                       self.read_block_kib * 1024, spec.record_bytes)

    def search_cap(self, name: str, target) -> tuple[int, str]:
        """The largest N a search of `name` on `target` probes, and what sets it: search_max, or on a directory
        target under the page-cache cap the most accelerators whose reads fit it (`memory`)."""
        mem = None if on_s3(target) else self.memory_max_accelerators(name)
        return (mem, "memory") if mem is not None and mem < self.search_max else (self.search_max, "cap")

    @field_validator("min_steps_per_epoch", mode="before")
    @classmethod
    def _min_steps(cls, v):
        if v is None or v == "au_window" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_000_000):
            return v
        raise ValueError("must be null (num_files at every accelerator count), au_window (the fewest steps per "
                         "epoch whose AU window is a measurement) or a step count from 1 to 1,000,000")

    @field_validator("read_block_kib")
    @classmethod
    def _block(cls, v: int) -> int:
        if v % 4:
            raise ValueError(f"read_block_kib must be a multiple of 4 (O_DIRECT alignment), got {v}")
        return v

    @model_validator(mode="after")
    def _check(self):
        check_names(self.workload_overrides, "workload_overrides: a workload's name")   # it becomes <name>/data
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
                why = missing_compute_note(name, self.accelerator_type)
                raise ValueError(f"workload '{name}' has no compute time for accelerator_type "
                                 f"'{self.accelerator_type}'; it has {sorted(spec.compute_s)}"
                                 + (f" ({why}; give one under emulate.workload_overrides)" if why else ""))
            if self.num_files is not None and self.min_steps_per_epoch is None:   # else the set grows with N
                per_acc = self.num_files // self.max_accelerators * spec.samples_per_file
                batch = spec.batch_for(self.accelerator_type)
                if per_acc < batch:
                    raise ValueError(
                        f"workload '{name}': num_files = {self.num_files} gives each of "
                        f"{self.max_accelerators} accelerators {per_acc} samples per epoch, fewer "
                        f"than one batch of {batch}; raise num_files to at least "
                        f"{math.ceil(batch / spec.samples_per_file) * self.max_accelerators}"
                        + (" or lower emulate.search_max (the largest N the search probes)" if self.search else ""))
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
        self._check_memory_cap()
        if self.mlperf_rules and self.repeats != RUNS:
            raise ValueError(f"mlperf_rules = true needs repeats = {RUNS} (1 warm-up + 5 scored runs, MLPerf Storage "
                             f"rules 6.6), got repeats = {self.repeats}")
        if self.mlperf_rules and self.dataset_sizing != "mlperf":
            raise ValueError(f"mlperf_rules = true needs dataset_sizing = mlperf (the rules size the dataset from "
                             f"steps and host memory), got dataset_sizing = {self.dataset_sizing}")
        if (self.checkpoint_every_steps > 0) != (self.checkpoint_mib > 0):
            raise ValueError("checkpoints need both checkpoint_every_steps > 0 and checkpoint_mib > 0 "
                             "(or both 0 to disable)")
        return self

    def _check_memory_cap(self) -> None:
        """The readers' own memory must fit the page-cache cap (memory.py), or the runs measure its thrash."""
        for name in self.workloads:
            most = self.memory_max_accelerators(name)
            if most is None:
                continue
            spec, cap = self.spec(name), self.memory_limit_mib * 2**20
            args = (cap, self.read_threads or spec.read_threads, self.read_block_kib * 1024, spec.record_bytes)
            n = 1 if most < 1 or self.search else max(self.accelerators)
            if n > most:
                field = "memory_limit_mib" if most < 1 else "accelerators"
                raise ValueError(f"{field}: workload '{name}': {memory.explain(n, *args)}; "
                                 + ("raise memory_limit_mib (num_files with it: the dataset stays >= "
                                    f"{MLPERF_DATASET_FACTOR} x the cap) or lower read_threads / read_block_kib"
                                    if most < 1 else
                                    f"use counts up to {most}, raise memory_limit_mib (num_files with it) or lower "
                                    "read_threads / read_block_kib"))

    def spec(self, name: str) -> WorkloadSpec:
        return merged_spec(name, self.workload_overrides)

    def steps_floor(self, name: str) -> int | None:
        """Steps per epoch every accelerator of workload `name` gets, whatever N (min_steps_per_epoch); None: no
        floor. au_window: the fewest steps per epoch whose AU window spans window.min_window_steps."""
        if self.min_steps_per_epoch != "au_window":
            return self.min_steps_per_epoch
        from .window import min_run_steps
        threads = self.read_threads or self.spec(name).read_threads
        return -(-min_run_steps(threads, self.prefetch) // self.epochs)

    def largest_n(self, name: str, target) -> int:
        """The most accelerators a run of `name` on `target` may have: its search's cap, or the list's largest."""
        return self.search_cap(name, target)[0] if self.search else max(self.accelerators)

    def check_s3_targets(self, s3: list[str]) -> None:
        """What S3 targets (names `s3`) cannot do with these settings: by validate (core.config) and prepare."""
        if s3 and self.launcher == "mpi":
            raise ParamsError(f"emulate.launcher = mpi: S3 targets ({', '.join(s3)}) run with launcher: fork only "
                              "(MPI ranks would carry the store's credentials in their config file); use fork")
        from ...core.s3mover import missing
        if s3 and missing():     # the accelerators' GETs are the compiled client's (objects.py)
            raise ParamsError(f"emulate on S3 targets ({', '.join(s3)}): {missing()}")


def on_s3(target) -> bool:
    """emulate's one "directory or S3?", asked here only: an S3 target searches on its own budget, has no page-cache
    cap, holds its dataset twice while it is PUT, and its accelerators GET the samples (run.py)."""
    return getattr(target, "s3", None) is not None


Params = EmulateParams   # the name core.study looks for
