"""The KV-cache workload as data: model shapes, the bytes a token's KV cache holds, the prefill FLOP model,
and MLPerf Storage v3.0's three closed options.

KV bytes per token (fp16, grouped-query attention): 2 (K and V) × layers × kv_heads × head_dim × 2 bytes.
llama3.1-8b: 2 × 32 × 8 × 128 × 2 = 131,072 B = 128 KiB; llama3.1-70b: 2 × 80 × 8 × 128 × 2 = 327,680 B = 320 KiB.

Prefill FLOPs of a context of L tokens (one sequence, batch 1), counting a multiply-add as 2 FLOPs:
  dense      2 × P × L, P = the decoder layers' weight count (attention projections + gated MLP; the
             embedding lookup does no arithmetic and a prefill needs the LM head for the last token only)
  attention  2 × layers × heads × head_dim × L²: QKᵀ and A·V are 2·L²·d each for the full square; a causal
             mask keeps half of it (what FlashAttention-style kernels compute).
"""
from __future__ import annotations

from dataclasses import dataclass

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
BYTES_PER_ELEMENT = 2            # fp16 / bf16


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    context_window: int          # tokens (the longest context the model accepts)

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "context_window"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{key}={v!r} is not allowed: a whole number of at least 1")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads={self.kv_heads} is not allowed with heads={self.heads}: heads must be a "
                             "multiple of kv_heads (grouped-query attention)")

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) × layers × kv_heads × head_dim × 2 bytes (fp16)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_ELEMENT

    @property
    def formula(self) -> str:
        return (f"2 × {self.layers} layers × {self.kv_heads} kv_heads × {self.head_dim} head_dim × 2 B = "
                f"{self.kv_bytes_per_token:,} B ({self.kv_bytes_per_token / KIB:g} KiB)")

    @property
    def dense_parameters(self) -> int:
        """Weights of the decoder layers: Q and O (hidden × heads·head_dim each), K and V (hidden ×
        kv_heads·head_dim each), the gated MLP (3 × hidden × ffn). Norms are negligible and left out."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.layers * (2 * self.hidden * q + 2 * self.hidden * kv + 3 * self.hidden * self.ffn)

    def prefill_flops(self, tokens: float) -> float:
        """2 × P × L + 2 × layers × heads × head_dim × L² (causal attention)."""
        L = float(tokens)
        return 2.0 * self.dense_parameters * L + 2.0 * self.layers * self.heads * self.head_dim * L * L

    def kv_bytes(self, tokens: int) -> int:
        return int(tokens) * self.kv_bytes_per_token


# Meta's published llama3.1 configurations (config.json on the model cards): 8B hidden 4096, 32 layers,
# 32 heads, 8 KV heads, ffn 14336; 70B hidden 8192, 80 layers, 64 heads, 8 KV heads, ffn 28672; 128K context.
MODELS: dict[str, ModelShape] = {
    "llama3.1-8b": ModelShape("llama3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                              ffn=14336, context_window=131072),
    "llama3.1-70b": ModelShape("llama3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                               ffn=28672, context_window=131072),
}

SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "context_window")
# What a user-defined shape may hold: room above every real decoder (llama3.1-405b: 126 layers, hidden 16,384,
# 128 heads, 8 KV heads, head_dim 128, ffn 53,248, a 128K window; head_dim 256 in gemma; 10M-token windows exist),
# far below where the break-even's arithmetic leaves floats (a 10^200-layer shape raised OverflowError there).
# At these maxima a token's KV cache is 8 GiB and a 16M-token prefill 1e27 FLOPs: floats hold both.
SHAPE_BOUNDS = {"layers": 1024, "hidden": 1 << 18, "heads": 1024, "kv_heads": 1024, "head_dim": 2048,
                "ffn": 1 << 20, "context_window": 1 << 24}


def shape_from_dict(name: str, raw: dict) -> ModelShape:
    if name in MODELS:
        raise ValueError(f"shapes: {name!r} is not allowed: it is a model of the catalogue; give the shape "
                         "another name")
    if not isinstance(raw, dict):
        raise ValueError(f"shapes.{name} = {raw!r} is not allowed: a mapping of {', '.join(SHAPE_KEYS)}")
    missing = [k for k in SHAPE_KEYS if k not in raw]
    extra = [k for k in raw if k not in SHAPE_KEYS]
    if missing or extra:
        raise ValueError(f"shapes.{name}: " + (f"missing {', '.join(missing)}" if missing else
                                               f"unknown key(s) {', '.join(extra)}")
                         + f" (keys: {', '.join(SHAPE_KEYS)})")
    for k, most in SHAPE_BOUNDS.items():
        v = raw[k]
        if isinstance(v, int) and not isinstance(v, bool) and v > most:
            raise ValueError(f"shapes.{name}.{k} = {v!r} is not allowed: a whole number from 1 to {most:,}")
    try:
        return ModelShape(name=name, **{k: raw[k] for k in SHAPE_KEYS})
    except ValueError as exc:
        raise ValueError(f"shapes.{name}: {exc}") from None


# The workload families: MLPerf's user model (mlperf_users.py: open-loop users, one worker per user, writes bounded
# by max_concurrent_allocs) and this study's closed loop (client.py: `concurrency` threads, each taking an idle user).
MLPERF, CLOSED_LOOP = "mlperf", "closed-loop"
FAMILIES = (MLPERF, CLOSED_LOOP)

# MLPerf's user templates (kv_cache/workload.py:239-249 at 284ce72): context and generation tokens, think seconds.
MLPERF_TEMPLATES: list[dict] = [
    {"name": "chatbot", "context_tokens": [512, 4096], "generate_tokens": [50, 200], "think_s": [0.1, 0.5]},
    {"name": "coding", "context_tokens": [4096, 25000], "generate_tokens": [100, 500], "think_s": [0.2, 1.0]},
    {"name": "document", "context_tokens": [4096, 16384], "generate_tokens": [200, 800], "think_s": [0.3, 1.5]},
]

# MLPerf Storage v3.0's KV-cache closed options, as the tool's README runs them (kv_cache_benchmark/README.md:
# 1699-1776 at 284ce72): 300 s, seed 42, --gpu-mem-gb 0, --generation-mode none. users are per client (MPI rank);
# one worker per user; max_concurrent_allocs bounds the writes only (0: unbounded).
PRESETS: dict[str, dict] = {
    "mlperf-closed-1": {"family": MLPERF, "model": "llama3.1-8b", "users_per_client": 200, "cpu_tier_gib": None,
                        "max_concurrent_allocs": 16},
    "mlperf-closed-2": {"family": MLPERF, "model": "llama3.1-8b", "users_per_client": 100, "cpu_tier_gib": 4.0,
                        "max_concurrent_allocs": 0},
    "mlperf-closed-3": {"family": MLPERF, "model": "llama3.1-70b", "users_per_client": 70, "cpu_tier_gib": None,
                        "max_concurrent_allocs": 4},
}
