"""The llama3 checkpoint workloads of MLPerf Storage v3.0 (DLIO's checkpointing), as pure data:
the four model shapes, DLIO's size formula, and the files one checkpoint writes, rank by rank.

Facts carried over (not code) from DLIO's `checkpointing/base_checkpointing.py`, its
`configs/workload/llama_*.yaml`, and the MLPerf Storage rules (Table 2, "subset" mode):

* Parameters  N = 2·V·h + L·(2h + h·(h + 2·d_kv) + h² + 3·h·f) + h,  d_kv = (h / heads)·kv_heads
  (embedding and lm_head, per layer two norms, QKV, the output projection, a gated MLP of three
  h×f matrices; one final norm); h / heads is floored, as DLIO does. Model state is N in fp16; every rank also keeps three fp32
  optimizer groups of N/ranks + 5h elements each.
* DLIO numbers the model's pieces 0 .. L+2: 0 the embedding, 1..L the transformer layers, L+1 the
  lm_head, L+2 the final norm. Pipeline stages split 1..L evenly (the first stages take the
  remainder); stage 0 also holds piece 0, the last stage pieces L+1 and L+2.
* Ranks: tp_rank = r mod tp, pp_rank = (r div tp) mod pp, dp_rank = r div (tp·pp),
  mp_rank = r mod (tp·pp).
* ZeRO-3 (pp must be 1): every rank writes its 1/ranks share of the model and its optimizer shard.
  ZeRO-1: data-parallel rank 0 of each (pp, tp) pair writes one model file per piece of its stage,
  holding that piece's 1/tp share; every rank writes its optimizer shard.
* Subset mode (rules v3.0): one host of 8 processes writes the files of ranks 0..7 of the full
  layout (DLIO keeps the full TP/PP/DP and only runs fewer ranks). Only 8 is allowed, and llama3-8b
  has no subset mode: its full run already is 8 processes.

Choices of ours, where DLIO differs in ways that do not change bytes on disk:

* File names follow DeepSpeed's spelling, which the issue uses: `layer_{i:02d}-model_{mp:02d}-
  model_states.pt`, `zero_pp_rank_{dp}_mp_rank_{mp:02d}_{model,optim}_states.pt`, and for ZeRO-1
  without pipeline `mp_rank_{mp:02d}_model_states.pt`. DLIO writes the numbers unpadded and
  `layer_{i}-model_{mp}_model_states.pt` / `model_{mp}_model_states.pt`.
* DLIO gives every tensor shard a full copy of the norm vectors, adding (2L+1)·h·(tp-1)·2 bytes
  (< 0.01 % for every model here); we shard them like the rest, so the files sum to the formula.
* File sizes are rounded to whole 4 KiB pages, at least one page, after dividing by `scale`.

Sizes are GiB (2^30 B), which MLPerf calls "GB". Published figures are the rules' Table 2; the
1t figure (18 TB) is not what the formula gives (≈15,427 GiB): mlpstorage's config lists 1t as
2,571 GB model + 15,426 GB optimizer, and 15,426 is the formula's whole checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from .config import check_name

MODEL_DTYPE_BYTES = 2        # fp16 weights
OPTIMIZER_DTYPE_BYTES = 4    # fp32 optimizer groups
OPTIMIZER_GROUPS = 3         # DLIO writes three groups per rank (master weights, two moments)
OPTIMIZER_EXTRA_PER_GROUP = 5  # DLIO adds 5·h elements to each group
ZERO_STAGES = (1, 3)
PAGE_BYTES = 4096
GIB = 1 << 30
SUBSET_PROCESSES = 8
CHECKPOINT_EPOCH = 1


class CheckpointWorkloadError(ValueError):
    """A workload, shape, mode or scale that DLIO's checkpointing cannot run; names the key."""


def _refuse(key: str, value: Any, allowed: str) -> CheckpointWorkloadError:
    return CheckpointWorkloadError(f"{key}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class CheckpointWorkload:
    """One transformer and the parallelism it is checkpointed under. Checks itself on creation."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tp: int
    pp: int
    dp: int
    ranks: int
    zero_stage: int
    model_dtype_bytes: int = MODEL_DTYPE_BYTES
    optimizer_dtype_bytes: int = OPTIMIZER_DTYPE_BYTES

    def __post_init__(self) -> None:
        _check_shape(self)
        _check_parallelism(self)

    @property
    def kv_width(self) -> int:
        """d_kv: the width of K (and of V) when several query heads share one KV head.
        Floored head width, as DLIO computes it (llama3-1t's 25872 / 192 is not whole)."""
        return (self.hidden // self.heads) * self.kv_heads

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp


def _check_shape(w: CheckpointWorkload) -> None:
    try:
        check_name(w.name, "name")          # names a folder of the study and stands in the brief
    except ValueError as exc:
        raise CheckpointWorkloadError(str(exc)) from None
    for f in fields(w):
        if f.name == "name":
            continue
        value = getattr(w, f.name)
        # bool is an int in Python; `tp: true` in a config is a mistake, not 1
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _refuse(f.name, value, "a whole number >= 1")
    # no "heads divides hidden" check: llama3-1t has 25872 / 192 = 134.75 and DLIO floors it
    if w.heads > w.hidden:
        raise _refuse("heads", w.heads, f"at most hidden={w.hidden} (a head is >= 1 wide)")
    if w.kv_heads > w.heads:
        raise _refuse("kv_heads", w.kv_heads, f"at most heads={w.heads}")


def _check_parallelism(w: CheckpointWorkload) -> None:
    if w.tp * w.pp * w.dp != w.ranks:
        raise _refuse("ranks", w.ranks, f"must equal tp·pp·dp = {w.tp}·{w.pp}·{w.dp} = "
                                        f"{w.tp * w.pp * w.dp}")
    if w.zero_stage not in ZERO_STAGES:
        raise _refuse("zero_stage", w.zero_stage, "1 (with pipeline) or 3 (without), as DLIO's "
                                                  "llama3 workloads use")
    if w.zero_stage == 3 and w.pp > 1:
        # ZeRO-3 shards the whole model over every rank; DLIO asserts pp == 1 for it
        raise _refuse("pp", w.pp, "must be 1 with zero_stage=3 (ZeRO-3 has no pipeline stages)")
    if w.pp > w.layers:
        raise _refuse("pp", w.pp, f"at most layers={w.layers}: every pipeline stage needs a layer")


WORKLOADS: dict[str, CheckpointWorkload] = {
    w.name: w for w in (
        CheckpointWorkload("llama3-8b", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8,
                           vocab=128256, tp=1, pp=1, dp=8, ranks=8, zero_stage=3),
        # 128 heads, as in DLIO's and MLPerf's llama3_70b.yaml and the rules' Table 2 (the real
        # Llama 3 70B has 64): it gives 911.2 GiB against the published 912; 64 would give 919.9.
        CheckpointWorkload("llama3-70b", layers=80, hidden=8192, ffn=28672, heads=128, kv_heads=8,
                           vocab=128256, tp=8, pp=1, dp=8, ranks=64, zero_stage=3),
        CheckpointWorkload("llama3-405b", layers=126, hidden=16384, ffn=53248, heads=128,
                           kv_heads=8, vocab=128256, tp=8, pp=32, dp=2, ranks=512, zero_stage=1),
        CheckpointWorkload("llama3-1t", layers=128, hidden=25872, ffn=98304, heads=192,
                           kv_heads=32, vocab=128256, tp=8, pp=64, dp=2, ranks=1024, zero_stage=1),
    )
}

# MLPerf Storage rules, Table 2, "Checkpoint size", read as GiB ("GB"); 5.29 TB and 18 TB as 1000s.
PUBLISHED_GIB: dict[str, float] = {
    "llama3-8b": 105, "llama3-70b": 912, "llama3-405b": 5290, "llama3-1t": 18000,
}
# The same table's "Subset: 8-Process Size" (llama3-8b has none).
PUBLISHED_SUBSET_GIB: dict[str, float] = {"llama3-70b": 114, "llama3-405b": 94, "llama3-1t": 161}


def workload(name: str) -> CheckpointWorkload:
    if name not in WORKLOADS:
        raise _refuse("model", name, f"one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def workload_from_dict(raw: Mapping[str, Any]) -> CheckpointWorkload:
    """A user-defined shape: the dataclass's keys exactly (the dtype sizes may be left out)."""
    known = {f.name for f in fields(CheckpointWorkload)}
    optional = {"model_dtype_bytes", "optimizer_dtype_bytes"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _refuse(unknown[0], raw[unknown[0]], f"not a key; keys are {', '.join(sorted(known))}")
    missing = sorted(known - optional - set(raw))
    if missing:
        raise _refuse(missing[0], None, "required; give every one of "
                                        f"{', '.join(sorted(known - optional))}")
    return CheckpointWorkload(**raw)


# ---- sizes -------------------------------------------------------------------------------------

def layer_parameters(w: CheckpointWorkload) -> list[int]:
    """Parameters of DLIO's pieces 0 .. L+2 (embedding, L layers, lm_head, final norm)."""
    h = w.hidden
    one_layer = 2 * h + h * (h + 2 * w.kv_width) + h * h + 3 * h * w.ffn
    embedding = w.vocab * h
    return [embedding] + [one_layer] * w.layers + [embedding, h]


def parameters(w: CheckpointWorkload) -> int:
    return sum(layer_parameters(w))


def model_bytes(w: CheckpointWorkload) -> int:
    return parameters(w) * w.model_dtype_bytes


def optimizer_bytes_per_rank(w: CheckpointWorkload) -> int:
    # DLIO floors N / ranks before adding the 5h extra
    elements = parameters(w) // w.ranks + OPTIMIZER_EXTRA_PER_GROUP * w.hidden
    return OPTIMIZER_GROUPS * elements * w.optimizer_dtype_bytes


def optimizer_bytes(w: CheckpointWorkload) -> int:
    return w.ranks * optimizer_bytes_per_rank(w)


def checkpoint_bytes(w: CheckpointWorkload) -> int:
    return model_bytes(w) + optimizer_bytes(w)


@dataclass(frozen=True)
class SizeRow:
    model: str
    parameters: int
    model_gib: float
    optimizer_gib: float
    computed_gib: float
    published_gib: float

    @property
    def ratio(self) -> float:
        return self.computed_gib / self.published_gib


def size_table() -> list[SizeRow]:
    """Per catalogue model: the formula's GiB beside the rules' published figure."""
    return [SizeRow(name, parameters(w), model_bytes(w) / GIB, optimizer_bytes(w) / GIB,
                    checkpoint_bytes(w) / GIB, PUBLISHED_GIB[name])
            for name, w in WORKLOADS.items()]


# ---- file layout -------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointFile:
    rank: int
    name: str      # inside the checkpoint folder, see checkpoint_folder()
    bytes: int


@dataclass(frozen=True)
class RankCoordinates:
    tp: int
    pp: int
    dp: int
    mp: int


def checkpoint_folder(step: int) -> str:
    return f"global_epoch{CHECKPOINT_EPOCH}_step{step}"


def coordinates(w: CheckpointWorkload, rank: int) -> RankCoordinates:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < w.ranks:
        raise _refuse("rank", rank, f"a whole number from 0 to {w.ranks - 1} for {w.name}")
    return RankCoordinates(tp=rank % w.tp, pp=(rank // w.tp) % w.pp,
                           dp=rank // w.model_parallel, mp=rank % w.model_parallel)


def stage_pieces(w: CheckpointWorkload, stage: int) -> range:
    """DLIO's pieces (0 .. L+2) held by one pipeline stage."""
    per_stage, extra = divmod(w.layers, w.pp)
    first = stage * per_stage + min(stage, extra) + 1     # the first `extra` stages take one more
    last = first + per_stage + (1 if stage < extra else 0) - 1
    if stage == 0:
        first = 0                      # the embedding
    if stage == w.pp - 1:
        last = w.layers + 2            # the lm_head and the final norm
    return range(first, last + 1)


def _share(total: int, parts: int, index: int) -> int:
    """Part `index` of `total` split into `parts` whole shares that sum to `total`."""
    base, extra = divmod(total, parts)
    return base + (1 if index < extra else 0)


def _raw_files_of_rank(w: CheckpointWorkload, rank: int) -> list[tuple[str, int]]:
    at = coordinates(w, rank)
    optimizer = (f"zero_pp_rank_{at.dp}_mp_rank_{at.mp:02d}_optim_states.pt",
                 optimizer_bytes_per_rank(w))
    if w.zero_stage == 3:
        model = (f"zero_pp_rank_{at.dp}_mp_rank_{at.mp:02d}_model_states.pt",
                 _share(model_bytes(w), w.ranks, rank))
        return [model, optimizer]
    if at.dp != 0:
        return [optimizer]             # ZeRO-1: the model is written once, by data-parallel rank 0
    pieces = layer_parameters(w)
    shard = [(i, _share(pieces[i] * w.model_dtype_bytes, w.tp, at.tp))
             for i in stage_pieces(w, at.pp)]
    if w.pp == 1:
        return [(f"mp_rank_{at.mp:02d}_model_states.pt", sum(b for _, b in shard)), optimizer]
    return [(f"layer_{i:02d}-model_{at.mp:02d}-model_states.pt", b) for i, b in shard] + [optimizer]


def scaled_bytes(raw: int, scale: float) -> int:
    """`raw` divided by `scale`, rounded to whole pages, never below one page."""
    pages = round(raw / scale / PAGE_BYTES)
    return max(1, pages) * PAGE_BYTES


def _check_scale(scale: float) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale >= 1 \
            or scale == float("inf"):
        raise _refuse("scale", scale, "a finite number >= 1 (it divides every file's size)")


def files_of_rank(w: CheckpointWorkload, rank: int, scale: float = 1.0) -> list[CheckpointFile]:
    _check_scale(scale)
    return [CheckpointFile(rank, name, scaled_bytes(raw, scale))
            for name, raw in _raw_files_of_rank(w, rank)]


def writing_ranks(w: CheckpointWorkload, mode: str = "default") -> range:
    """The ranks a run writes for: all of them, or in subset mode ranks 0..7 of the full layout."""
    if mode == "default":
        return range(w.ranks)
    if mode != "subset":
        raise _refuse("mode", mode, "'default' or 'subset'")
    if w.ranks <= SUBSET_PROCESSES:
        raise _refuse("mode", mode, f"{w.name} already runs on {w.ranks} ranks; subset mode is for "
                                    f"models with more than {SUBSET_PROCESSES} ranks")
    return range(SUBSET_PROCESSES)


def layout(w: CheckpointWorkload, scale: float = 1.0, mode: str = "default") -> list[CheckpointFile]:
    """Every file of one checkpoint folder, rank by rank."""
    _check_scale(scale)
    return [f for rank in writing_ranks(w, mode) for f in files_of_rank(w, rank, scale)]


def layout_bytes(files: list[CheckpointFile]) -> int:
    return sum(f.bytes for f in files)
