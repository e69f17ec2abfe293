"""checkpoint: section of params.yaml (validated before any work); the llama3 shapes, DLIO's size
formula and the file layout live in core.checkpoint_workloads, whose own refusals run here too."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ...core.checkpoint_workloads import (CheckpointWorkload, CheckpointWorkloadError, WORKLOADS, files_of_rank,
                                          layout, layout_bytes, workload, workload_from_dict, writing_ranks)
from ...core.config import ParamsError, Strict, check_name
from ...kit.launch import LaunchParams

from .dataset import RESERVED

MIB = 1 << 20
PART_MIN = 5 * MIB       # S3's smallest part but the last
COST_MODES = ("none", "sync", "async")


def shape_workload(name: str, raw: dict) -> CheckpointWorkload:
    """checkpoint.shapes.<name> as a workload, with the catalogue's refusals (tp·pp·dp ≠ ranks, ZeRO-3 with
    pp > 1, ...); `ranks` may be left out (then tp·pp·dp). A llama3 name is refused: it would hide the model."""
    check_name(name, "shapes: a shape's name")
    if name in WORKLOADS or name in RESERVED:
        why = "a llama3 model of the catalogue" if name in WORKLOADS else "a folder of the study's other sweeps"
        raise ValueError(f"shapes: {name!r} is not allowed: it is {why}; give the shape another name")
    if not isinstance(raw, dict):
        raise ValueError(f"shapes.{name} = {raw!r} is not allowed: a mapping of layers, hidden, ffn, heads, "
                         "kv_heads, vocab, tp, pp, dp, zero_stage")
    full = {"ranks": _product(raw, ("tp", "pp", "dp")), **raw, "name": name}
    try:
        return workload_from_dict(full)
    except (CheckpointWorkloadError, TypeError) as exc:
        raise ValueError(f"shapes.{name}: {exc}") from None


def _product(raw: dict, keys) -> Any:
    values = [raw.get(k) for k in keys]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return values[0] * values[1] * values[2]
    return None                                  # the missing / bad key is refused by name


class CostParams(Strict):
    """checkpoint.cost: what a checkpoint costs training (kit.checkpoint_cost), sync vs async. An empty
    `modes` or `intervals_steps` turns the cost sweep off; "none" (the baseline) always runs first
    when sync or async is asked."""
    modes: list[Literal["none", "sync", "async"]] = Field(default_factory=lambda: list(COST_MODES))
    intervals_steps: list[int] = Field(default_factory=lambda: [4, 16])   # checkpoint every k steps
    steps: int = Field(32, ge=1, le=1_000_000)           # training steps per run
    compute_s: float = Field(0.05, ge=0, le=60)          # emulated accelerator compute per step (a sleep)
    model: str = "llama3-8b"                             # checkpoint size: this model's at checkpoint.scale
    files: int = Field(8, ge=1, le=4096)                 # files per checkpoint
    staging: Literal["reused", "fresh"] = "reused"       # async snapshot memory (kit.checkpoint_cost)
    overhead_limit_percent: float = Field(5, gt=0, le=100)   # the intervals' overhead limit

    @field_validator("intervals_steps")
    @classmethod
    def _intervals(cls, v: list[int]) -> list[int]:
        if any(k < 1 for k in v) or len(set(v)) != len(v):
            raise ValueError(f"intervals_steps: {v} must be distinct whole numbers of at least 1")
        return v

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"modes: listed twice in {v}")
        return v

    @property
    def on(self) -> bool:
        return bool(self.modes) and bool(self.intervals_steps)

    @property
    def checkpointing_modes(self) -> list[str]:
        return [m for m in self.modes if m != "none"]


class FrameworkParams(Strict):
    """checkpoint.framework: a Keras transformer of BERT's shape trained with tf.train.CheckpointManager
    (framework.py). Scenarios: default (a save every `default_every_steps`), every (every `every_steps`),
    limited (default interval under a memory limit), ingest (default interval, an ingest writer alongside).
    An empty `scenarios` turns the sweep off; off unless params.yaml lists them (it lists all four), so a
    checkpoint section written without `framework` (tests, other profiles) starts no TensorFlow."""
    scenarios: list[Literal["default", "every", "limited", "ingest"]] = Field(default_factory=list)
    steps: int = Field(24, ge=1, le=10_000_000)          # training steps per scenario (paper: 2000)
    every_steps: int = Field(3, ge=1, le=10_000_000)     # the frequent interval (paper: 250)
    default_every_steps: int = Field(12, ge=1, le=10_000_000)   # BERT run_pretraining's default (paper: 1000)
    max_to_keep: int = Field(5, ge=1, le=1000)           # CheckpointManager's (Estimator's default: 5)
    layers: int = Field(2, ge=1, le=128)                 # BERT-base: 12
    hidden: int = Field(128, ge=8, le=16384)             # BERT-base: 768
    heads: int = Field(2, ge=1, le=256)                  # BERT-base: 12
    ffn: int = Field(512, ge=8, le=65536)                # BERT-base: 3072
    seq_len: int = Field(64, ge=2, le=8192)              # BERT-base pre-training: 128
    vocab: int = Field(8192, ge=16, le=1_000_000)        # BERT's WordPiece: 30522
    predictions: int = Field(10, ge=1, le=8192)          # masked positions per sequence (BERT: 20)
    batch_size: int = Field(8, ge=1, le=4096)
    learning_rate: float = Field(1e-4, gt=0, le=1)       # AdamW, weight decay 0.01
    threads: int | None = Field(None, ge=1, le=1024)     # TensorFlow's threads; None: every core
    memory_headroom_mib: int = Field(48, ge=0, le=1 << 20)   # limited: the job's need + this
    ingest_mb_per_s: float = Field(20, gt=0, le=100_000)     # ingest: the writer's rate
    timeout_s: float = Field(1800, gt=0, le=7 * 86400)   # start-up, and each scenario, at most this long

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"scenarios: listed twice in {v}")
        return v

    @model_validator(mode="after")
    def _shape(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not allowed with heads={self.heads}: hidden must be a "
                             "multiple of heads")
        if self.predictions > self.seq_len:
            raise ValueError(f"predictions={self.predictions} is not allowed: at most seq_len={self.seq_len}")
        for key in ("every_steps", "default_every_steps"):
            if getattr(self, key) > self.steps:
                raise ValueError(f"{key}={getattr(self, key)} is not allowed: at most steps={self.steps} (no "
                                 "checkpoint would be saved)")
        return self

    @property
    def on(self) -> bool:
        return bool(self.scenarios)

    @property
    def parameters(self) -> int:
        """Trainable parameters of the model framework_worker builds (checked against TensorFlow's count)."""
        h, f, v, s = self.hidden, self.ffn, self.vocab, self.seq_len
        embeddings = (v + s + 2) * h + 2 * h
        block = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h     # attention, norms, FFN
        heads = (h * h + h) + 2 * h + v + (h * h + h) + (2 * h + 2)
        return embeddings + self.layers * block + heads

    def interval(self, scenario: str) -> int:
        return self.every_steps if scenario == "every" else self.default_every_steps


class CheckpointParams(LaunchParams):
    models: list[str] = Field(default_factory=lambda: ["llama3-8b"], min_length=1)
    scale: float = Field(2048, ge=1, le=1 << 30)         # divides every file (1 = MLPerf's sizes)
    mode: Literal["default", "subset"] = "default"       # subset: ranks 0..7 of the full layout
    saves: int = Field(3, ge=1, le=1000)                 # checkpoint writes per run (MLPerf: 10)
    restores: int = Field(3, ge=0, le=1000)              # checkpoint reads per run (MLPerf: 10)
    pause_s: float = Field(0.5, ge=0, le=600)            # before every save / restore, off the clock
    rank_shift: int = Field(0, ge=0, le=1 << 20)         # restore: rank r reads rank (r+shift) mod n's files
    retain: int = Field(2, ge=1, le=1000)                # complete checkpoints kept; older ones deleted
    write_block_mib: int = Field(32, ge=1, le=1024)      # one write() (MLPerf v3.0: 32 MiB)
    read_block_mib: int = Field(128, ge=1, le=1024)      # one read (MLPerf v3.0: 128 MiB)
    readers_per_rank: int = Field(4, ge=1, le=64)        # reader threads per rank on restore
    # how a directory target's saves write: buffered (MLPerf's and DLIO's way: write() into the page cache, then
    # fsync; each save starts from pre-faulted memory, core.memory_state) or direct (O_DIRECT: the page cache and
    # the VM's memory state left out, so the figure is the disk's). S3 targets upload parts either way.
    save_io: Literal["buffered", "direct"] = "buffered"
    repeats: int = Field(1, ge=1, le=100)
    protocol_runs: int = Field(1, ge=1, le=100)   # runs of the headline model's protocol (page 1), repeats included
    ranks: int | None = Field(None, ge=1, le=1 << 16)    # None: the model's own (8 in subset mode)
    cost: CostParams = Field(default_factory=CostParams)  # the "cost" sweep (sync vs async training)
    # user-defined transformer shapes, usable in `models` and `cost.model` beside the llama3 catalogue:
    # name -> {layers, hidden, ffn, heads, kv_heads, vocab, tp, pp, dp, zero_stage[, ranks]}
    shapes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # launcher, mpi, client_check_repeats and client_check (kit.ranks.LaunchParams): the check re-runs the headline
    # point (the largest model's protocol) per directory target with the ranks on half the CPUs

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, v: dict) -> dict:
        for name, raw in v.items():
            shape_workload(name, raw)
        return v
    framework: FrameworkParams = Field(default_factory=FrameworkParams)  # the "framework" sweep (BERT, TF)

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"models: listed twice in {v}")
        return v

    @model_validator(mode="after")
    def _check(self):
        known = [*WORKLOADS, *self.shapes]
        for key, names in (("models", self.models), ("cost.model", [self.cost.model])):
            for name in names:
                if name not in known:
                    raise ValueError(f"checkpoint.{key}: {name!r} is not allowed: one of {', '.join(known)} "
                                     "(llama3 models, or a name of checkpoint.shapes)")
        for name in self.models:
            w = self.workload(name)
            try:
                n = len(writing_ranks(w, self.mode))
                layout(w, self.scale, self.mode)
            except CheckpointWorkloadError as exc:
                raise ValueError(f"{name}: {exc}") from None
            if self.ranks is not None and self.ranks != n:
                raise ValueError(f"ranks={self.ranks} is not allowed for {name} in mode={self.mode!r}: it "
                                 f"writes with {n} ranks (null takes that; fewer ranks only through "
                                 "mode: subset, which is 8 processes)")
        if self.cost.on:
            try:
                layout(self.workload(self.cost.model), self.scale, self.mode)
            except CheckpointWorkloadError as exc:
                raise ValueError(f"cost.model {self.cost.model}: {exc}") from None
            if self.cost.files > self.cost_bytes:
                raise ValueError(f"cost.files={self.cost.files} is more than the checkpoint's bytes")
        return self

    def check_machine(self, s3: bool = False) -> None:
        """Forked ranks within the pids/nproc/open-file limits and their buffers within the memory the run may
        use (machine_fit.check_machine: `validate` and this study's run, not a load of another study's params);
        `s3`: an S3 target is measured (each rank's compiled client counted)."""
        from .ranks import check_budget
        check_budget(self, s3=s3)

    @model_validator(mode="after")
    def _hostfile_exists(self, info: ValidationInfo):
        """Not for readers of results (the brief validates with check_targets off)."""
        if (info.context or {}).get("check_targets", True):
            if self.launcher == "mpi" and self.mpi.hostfile:
                from ...kit.mpi import check_hostfile
                try:
                    check_hostfile(self.mpi.hostfile, "checkpoint")     # a missing file: refused by validate too
                except Exception as exc:
                    raise ValueError(str(exc)) from None
        return self

    @property
    def headline_model(self) -> str:
        """The model the client check re-runs: the largest checkpoint of `models` (page 1's intervals)."""
        return max(self.models, key=self.checkpoint_bytes)

    @property
    def cost_bytes(self) -> int:
        """One cost-sweep checkpoint: cost.model's checkpoint at this scale and mode."""
        return self.checkpoint_bytes(self.cost.model)

    def workload(self, name: str) -> CheckpointWorkload:
        """A llama3 model of the catalogue or a shape of checkpoint.shapes."""
        return shape_workload(name, self.shapes[name]) if name in self.shapes else workload(name)

    def writers(self, name: str) -> list[int]:
        return list(writing_ranks(self.workload(name), self.mode))

    def checkpoint_bytes(self, name: str) -> int:
        """Bytes of one checkpoint folder at this scale and mode (the files as written)."""
        return layout_bytes(layout(self.workload(name), self.scale, self.mode))

    @property
    def write_block(self) -> int:
        return self.write_block_mib * MIB

    def check_s3_targets(self, s3: list[str]) -> None:
        """What S3 targets (names `s3`) cannot do with these settings, one line each: by validate
        (core.config) and again by the run's prepare (objects.check)."""
        if not s3:
            return
        if self.launcher != "fork":
            raise ParamsError(f"checkpoint.launcher = {self.launcher}: S3 targets ({', '.join(s3)}) run with forked "
                              "ranks only (launcher: fork); drop them from targets or use launcher: fork")
        if self.write_block < PART_MIN:
            big = max(f.bytes for m in self.models for r in self.writers(m)
                      for f in files_of_rank(self.workload(m), r, self.scale))
            if big > self.write_block:
                raise ParamsError(f"checkpoint.write_block_mib = {self.write_block_mib:g}: S3 targets "
                                  f"({', '.join(s3)}) upload every file in parts of write_block_mib, and S3 needs "
                                  f"parts of at least 5 MiB (the largest file is {big / MIB:.1f} MiB); use "
                                  "write_block_mib >= 5")

    @property
    def read_block(self) -> int:
        return self.read_block_mib * MIB


Params = CheckpointParams
