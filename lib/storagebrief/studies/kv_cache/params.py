"""kv_cache: section of params.yaml (validated before any work): the workload as data.

A run is one named workload (`run`: names of MLPerf's closed options, `mlperf-closed-1..3`, or of
`workloads`) on one target: `clients` processes × `users_per_client` simulated users for `duration_s`
(requests in flight at the end finish, as MLPerf's do). Two families:
  mlperf       MLPerf's user model (mlperf_users.py): open-loop users drawn from `mlperf.templates`, one worker
               per user, writes bounded by `max_concurrent_allocs`, per-turn files reloaded at every later turn;
  closed-loop  this study's own: at most `concurrency` requests in flight per client, a conversation's first
               context drawn from `contexts` and its turns from `turns`; every later turn adds `turn_tokens`
               tokens and reloads the previous turn's cache.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from ...core.config import Strict, check_name, check_names
from ...kit.launch import LaunchParams
from .workload import CLOSED_LOOP, FAMILIES, GIB, MLPERF, MLPERF_TEMPLATES, MODELS, PRESETS, ModelShape, \
    shape_from_dict


class Weighted(Strict):
    tokens: int = Field(ge=1, le=1 << 24)        # contexts: tokens; turns: the number of turns
    weight: float = Field(gt=0, le=1e9)


class Workload(Strict):
    family: str = CLOSED_LOOP                                    # mlperf | closed-loop
    model: str = "llama3.1-8b"
    users_per_client: int = Field(4, ge=1, le=100_000)
    cpu_tier_gib: float | None = Field(None, gt=0, le=1 << 20)   # per client; null: no CPU tier
    concurrency: int = Field(2, ge=1, le=1024)                   # closed-loop: requests in flight per client
    max_concurrent_allocs: int = Field(0, ge=0, le=100_000)      # mlperf: writes in flight per client (0: unbounded)

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"family {v!r} is not allowed: one of {', '.join(FAMILIES)}")
        return v

    @property
    def threads(self) -> int:
        """Threads doing I/O per client: one worker per user (at most 500) in the mlperf family, else concurrency."""
        return min(self.users_per_client, 500) if self.family == MLPERF else self.concurrency


class Template(Strict):
    """One of MLPerf's user templates: a user draws L, G and its think time uniformly from these ranges."""
    name: str = "user"
    context_tokens: list[int] = Field(min_length=2, max_length=2)
    generate_tokens: list[int] = Field(min_length=2, max_length=2)
    think_s: list[float] = Field(min_length=2, max_length=2)

    @model_validator(mode="after")
    def _ranges(self):
        for key, lo in (("context_tokens", 1), ("generate_tokens", 1), ("think_s", 0)):
            a, b = getattr(self, key)
            if not lo <= a <= b or b > (1 << 24):
                raise ValueError(f"mlperf.templates.{self.name}.{key} = [{a}, {b}] is not allowed: [low, high] with "
                                 f"{lo} ≤ low ≤ high ≤ {1 << 24:,}")
        return self


class MlperfUsers(Strict):
    """The mlperf family's user model (MLPerf's defaults at 284ce72; mlperf_users.py cites the lines)."""
    templates: list[Template] = Field(default_factory=lambda: [Template(**t) for t in MLPERF_TEMPLATES],
                                      min_length=1)
    decode_batch_tokens: int = Field(32, ge=1, le=1 << 20)            # config.yaml:190
    end_conversation_probability: float = Field(0.2, ge=0, le=1)      # benchmark.py:440
    max_turns: int = Field(50, ge=1, le=100_000)                      # config.yaml:171
    storage_capacity_gib: float | None = Field(None, gt=0, le=1 << 30)   # per client; null: 95 % of the free space


class PrefillParams(Strict):
    """The prefill measurement on this machine: a small llama-shaped decoder in Keras, random weights."""
    measure: bool = True
    layers: int = Field(2, ge=1, le=64)
    hidden: int = Field(256, ge=16, le=8192)
    heads: int = Field(4, ge=1, le=128)
    kv_heads: int = Field(2, ge=1, le=128)
    ffn: int = Field(688, ge=16, le=65536)
    contexts: list[int] = Field(default_factory=lambda: [512, 1024, 2048, 4096], min_length=2)
    repeats: int = Field(3, ge=1, le=100)         # timed passes per context (best and spread kept)
    threads: int | None = Field(None, ge=1, le=1024)   # TensorFlow's threads; null: every core
    timeout_s: float = Field(600, gt=0, le=86400)

    @model_validator(mode="after")
    def _shape(self):
        if self.hidden % self.heads:
            raise ValueError(f"prefill.hidden={self.hidden} is not allowed with prefill.heads={self.heads}: hidden "
                             "must be a multiple of heads")
        if self.heads % self.kv_heads:
            raise ValueError(f"prefill.kv_heads={self.kv_heads} is not allowed: heads={self.heads} must be a "
                             "multiple of it")
        if len(set(self.contexts)) != len(self.contexts) or min(self.contexts) < 1:
            raise ValueError(f"prefill.contexts={self.contexts} is not allowed: distinct token counts ≥ 1")
        return self


class BreakEvenParams(Strict):
    accelerators: list[str] = Field(default_factory=lambda: ["this-cpu", "h200", "h100-sxm"])
    answer_within_tokens: int = Field(131072, ge=1, le=1 << 24)   # "not within N tokens"
    need_at_tokens: int = Field(8192, ge=1, le=1 << 24)           # the read GiB/s needed to win at this L


class KvCacheParams(LaunchParams):
    run: list[str] = Field(default_factory=lambda: ["quick-8b"], min_length=1)   # workloads, in order
    workloads: dict[str, Workload] = Field(default_factory=lambda: {"quick-8b": Workload()})
    shapes: dict[str, dict[str, Any]] = Field(default_factory=dict)   # user-defined models by name
    clients: int = Field(2, ge=1, le=4096)        # processes (fork) or MPI ranks
    contexts: list[Weighted] = Field(default_factory=lambda: [Weighted(tokens=64, weight=1),
                                                              Weighted(tokens=128, weight=1)], min_length=1)
    turns: list[Weighted] = Field(default_factory=lambda: [Weighted(tokens=3, weight=1)], min_length=1)
    turn_tokens: int = Field(32, ge=1, le=1 << 20)   # tokens a later turn adds (question + answer)
    decode_reads: int = Field(1, ge=0, le=1000)       # reads of a request's new cache below prefill_only_tokens
    prefill_only_tokens: int = Field(10000, ge=1, le=1 << 24)   # MLPerf: PREFILL only from 10K tokens
    duration_s: float = Field(3.0, gt=0, le=7 * 86400)   # nominal (MLPerf: 300)
    seed: int = Field(42, ge=0)
    repeats: int = Field(1, ge=1, le=100)
    write_block_mib: int = Field(16, ge=1, le=1024)   # one write() call
    # launcher, mpi, client_check_repeats and client_check (kit.ranks.LaunchParams): the check re-runs the first
    # workload on the first target with the clients on half the CPUs, beside an unconfined re-run when repeats is 1
    mlperf: MlperfUsers = Field(default_factory=MlperfUsers)
    prefill: PrefillParams = Field(default_factory=PrefillParams)
    breakeven: BreakEvenParams = Field(default_factory=BreakEvenParams)

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, v: dict) -> dict:
        for name, raw in v.items():
            check_name(name, "shapes: a shape's name")     # shown in the brief, named in files
            shape_from_dict(name, raw)
        return v

    @field_validator("workloads")
    @classmethod
    def _workload_names(cls, v: dict) -> dict:
        return check_names(v, "workloads: a workload's name")    # it becomes part of every run id (file names)

    @model_validator(mode="after")
    def _check(self):
        names = {**PRESETS, **self.workloads}
        if len(set(self.run)) != len(self.run):
            raise ValueError(f"run: listed twice in {self.run}")
        for name in self.run:
            if name not in names:
                raise ValueError(f"run: {name!r} is not allowed: one of {', '.join(names)} (MLPerf's closed "
                                 "options or a name of kv_cache.workloads)")
        known = [*MODELS, *self.shapes]
        for name in self.run:
            w = self.workload(name)
            if w.model not in known:
                raise ValueError(f"workloads.{name}.model: {w.model!r} is not allowed: one of {', '.join(known)}")
            longest = self.longest_tokens(name)
            shape = self.shape(w.model)
            if longest > shape.context_window:
                raise ValueError((f"mlperf.templates: a context of {longest:,} tokens is" if w.family == MLPERF else
                                  f"contexts / turns / turn_tokens: the longest conversation reaches {longest:,}")
                                 + f" tokens, beyond {w.model}'s window of {shape.context_window:,}; shorten "
                                 + ("kv_cache.mlperf.templates" if w.family == MLPERF else
                                    "kv_cache.contexts, kv_cache.turns or kv_cache.turn_tokens"))
            tier = self.cpu_tier_bytes(name) * self.clients
            ram = _ram_bytes()
            if tier and ram and tier > ram:
                knob = (f"workloads.{name}.cpu_tier_gib" if name in self.workloads else
                        f"{name}'s cpu_tier_gib (MLPerf's; lower kv_cache.clients)")
                raise ValueError(f"{knob} = {w.cpu_tier_gib:g} is not allowed: × {self.clients} "
                                 f"clients = {tier / GIB:,.1f} GiB, more than this host's {ram / GIB:,.1f} GiB of RAM")
        from . import breakeven
        for a in self.breakeven.accelerators:
            if a not in breakeven.CATALOGUE:
                raise ValueError(f"breakeven.accelerators: {a!r} is not allowed: one of "
                                 f"{', '.join(breakeven.CATALOGUE)}")
        return self

    def check_machine(self) -> None:
        """Forked clients within the machine's process, file and memory limits (machine_fit.check_machine: `validate`
        and this study's run, not a load of another study's params)."""
        from .clients import check_budget
        check_budget(self)

    def workload(self, name: str) -> Workload:
        return self.workloads[name] if name in self.workloads else Workload(**PRESETS[name])

    def shape(self, model: str) -> ModelShape:
        return shape_from_dict(model, self.shapes[model]) if model in self.shapes else MODELS[model]

    @property
    def longest_context(self) -> int:
        """The most tokens one conversation's cache reaches: the largest first context + the later turns."""
        return max(c.tokens for c in self.contexts) + (max(t.tokens for t in self.turns) - 1) * self.turn_tokens

    def longest_tokens(self, name: str) -> int:
        """The most tokens one file holds: a turn's context (mlperf) or a whole conversation's (closed-loop)."""
        if self.workload(name).family == MLPERF:
            return max(t.context_tokens[1] for t in self.mlperf.templates)
        return self.longest_context

    def largest_entry_bytes(self, name: str) -> int:
        return self.shape(self.workload(name).model).kv_bytes(self.longest_tokens(name))

    def cpu_tier_bytes(self, name: str) -> int:
        gib = self.workload(name).cpu_tier_gib
        return int(gib * GIB) if gib else 0

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(self.workload(n).model for n in self.run))


def _ram_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


Params = KvCacheParams
