"""Reload vs recompute: beyond how many tokens does reading a KV cache back from storage beat recomputing it?

  recompute(L) = prefill FLOPs(L) ÷ the accelerator's effective FLOP/s      (workload.ModelShape.prefill_flops)
  reload(L)    = a + L × bytes_per_token ÷ r                                (a: per-request latency, r: read B/s)

reload − recompute = a + (b/r − d)·L − c·L², with b bytes per token, d = 2P ÷ F and c the attention term's
coefficient ÷ F, is positive up to one root and negative beyond it: reloading wins for every L above
L* = (e + √(e² + 4ca)) ÷ 2c with e = b/r − d (and from the first token when a = 0 and e ≤ 0). The read rate
reload needs to win at L: r = b·L ÷ (recompute(L) − a) (none when recompute(L) ≤ a).

The catalogue: where each accelerator's effective FLOP/s comes from. `this-cpu` is measured by the study
(prefill.py, a Keras decoder of llama shape); `h200` was measured on one NVIDIA H200 (2026-11-26, see
H200_MEASURED); others are a datasheet peak × a stated utilisation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .workload import GIB, MODELS, ModelShape

TFLOP = 1e12


@dataclass(frozen=True)
class Accelerator:
    name: str
    source: str
    tflops_by_model: dict          # model -> effective TFLOP/s; "*" for any other model
    how: str                       # measured here | measured | datasheet × utilisation

    def tflops(self, model: str) -> float | None:
        return self.tflops_by_model.get(model, self.tflops_by_model.get("*"))


# One NVIDIA H200 (PyTorch 2.11, llama3.1-shaped decoder layers with random bf16 weights, batch 1, causal SDPA
# with grouped-query attention; 4 layers timed, scaled to the full depth; 2026-11-26): prefill tokens/s.
H200_MEASURED: dict[str, dict[int, float]] = {
    "llama3.1-8b": {1024: 44_296, 4096: 41_731, 16384: 32_319, 32768: 25_552},
    "llama3.1-70b": {1024: 4_773, 4096: 4_465, 16384: 3_854, 32768: 3_425},
}
H200_TOLERANCE = 0.06     # the FLOP model at one rate per model reproduces every measured point within ±6 %


def fitted_tflops(shape: ModelShape, measured: dict[int, float]) -> float:
    """One effective rate for a model from measured tokens/s: the geometric mean of FLOPs(L)/time(L)."""
    rates = [shape.prefill_flops(L) * tps / L for L, tps in measured.items()]
    return math.exp(sum(math.log(x) for x in rates) / len(rates)) / TFLOP


_H200 = {m: fitted_tflops(MODELS[m], pts) for m, pts in H200_MEASURED.items()}
H100_SXM_PEAK_TFLOPS = 989.4     # dense BF16 without sparsity, NVIDIA H100 SXM5 datasheet
H100_UTILISATION = 0.60          # stated: the H200's measured prefill ran at 58–67 % of the same Hopper peak

CATALOGUE: dict[str, Accelerator] = {
    "this-cpu": Accelerator("this-cpu", "measured by this study on this machine's CPU (Keras, a small llama-shaped "
                                        "decoder with random weights; prefill.csv)", {}, "measured here"),
    "h200": Accelerator("h200", "one NVIDIA H200, PyTorch 2.11, llama3.1-shaped decoder layers, random bf16 "
                                "weights, batch 1, causal SDPA with GQA; 4 layers timed, scaled to full depth "
                                "(2026-11-26); rate fitted per model to the measured tokens/s",
                        {**_H200, "*": sum(_H200.values()) / len(_H200)}, "measured"),
    "h100-sxm": Accelerator("h100-sxm", f"NVIDIA H100 SXM5 datasheet, {H100_SXM_PEAK_TFLOPS} dense BF16 TFLOP/s × "
                                        f"{H100_UTILISATION:.0%} utilisation (stated, not measured)",
                            {"*": H100_SXM_PEAK_TFLOPS * H100_UTILISATION}, "datasheet × utilisation"),
}


def with_measured_cpu(tflops: float | None) -> dict[str, Accelerator]:
    """The catalogue with this machine's measured rate filled in (None: not measured)."""
    out = dict(CATALOGUE)
    if tflops:
        out["this-cpu"] = Accelerator("this-cpu", CATALOGUE["this-cpu"].source, {"*": tflops}, "measured here")
    return out


def recompute_s(shape: ModelShape, tokens: float, tflops: float) -> float:
    return shape.prefill_flops(tokens) / (tflops * TFLOP)


def reload_s(shape: ModelShape, tokens: float, read_bytes_per_s: float, latency_s: float = 0.0) -> float:
    return latency_s + tokens * shape.kv_bytes_per_token / read_bytes_per_s


def prefill_tokens_per_s(shape: ModelShape, tokens: float, tflops: float) -> float:
    return tokens / recompute_s(shape, tokens, tflops)


def break_even_tokens(shape: ModelShape, tflops: float, read_bytes_per_s: float,
                      latency_s: float = 0.0) -> int | None:
    """The smallest whole L from which reloading is faster than recomputing (for every longer context too);
    None when that L is beyond what a float counts (a read rate near zero): no context reaches it."""
    F = tflops * TFLOP
    b = shape.kv_bytes_per_token
    c = 2.0 * shape.layers * shape.heads * shape.head_dim / F
    d = 2.0 * shape.dense_parameters / F
    e = b / read_bytes_per_s - d
    a = max(0.0, latency_s)
    if a == 0 and e < 0:
        return 1
    root = (e + math.sqrt(e * e + 4 * c * a)) / (2 * c)
    if not math.isfinite(root):
        return None
    return max(1, math.floor(root) + 1)


def read_needed_bytes_per_s(shape: ModelShape, tokens: int, tflops: float, latency_s: float = 0.0) -> float:
    """The read rate at which reload(L) = recompute(L); inf when the latency alone exceeds the recompute."""
    spare = recompute_s(shape, tokens, tflops) - latency_s
    return math.inf if spare <= 0 else tokens * shape.kv_bytes_per_token / spare


def answer(shape: ModelShape, tflops: float, read_bytes_per_s: float, latency_s: float, within: int,
           need_at: int) -> dict:
    """One (target, model, accelerator) answer: the break-even L (None beyond `within`) and the read rate
    needed at `need_at` tokens, beside the measured one."""
    n = break_even_tokens(shape, tflops, read_bytes_per_s, latency_s) if read_bytes_per_s > 0 else None
    need = read_needed_bytes_per_s(shape, need_at, tflops, latency_s)
    return {"break_even_tokens": n if n is not None and n <= within else None,
            "within_tokens": within, "need_at_tokens": need_at,
            "read_gib_per_s_needed": need / GIB if math.isfinite(need) else None,
            "read_gib_per_s_measured": read_bytes_per_s / GIB, "latency_s": latency_s, "tflops": tflops}


UNSTABLE_SPREAD = 2.0     # the runs' break-evens this far apart (highest ÷ lowest): the fit is not an answer


def spread(per_run: list, within: int) -> dict:
    """The break-even over the runs one at a time: {runs, break_even_low, break_even_high, stable}; a run beyond
    `within` counts as `within` + 1. Unstable: the runs disagree by more than UNSTABLE_SPREAD×, or some answer
    within `within` and others not."""
    vals = [within + 1 if v is None else int(v) for v in per_run]
    if not vals:
        return {"runs": 0, "break_even_low": None, "break_even_high": None, "stable": None}
    lo, hi = min(vals), max(vals)
    beyond = sum(v > within for v in vals)
    stable = len(vals) < 2 or (0 < beyond == len(vals)) or (not beyond and hi <= UNSTABLE_SPREAD * lo)
    return {"runs": len(vals), "break_even_low": lo if lo <= within else None,
            "break_even_high": hi if hi <= within else None, "stable": stable}


def sentence(a: dict, runs: dict | None = None) -> str:
    """The answer in words; an unstable fit over the runs (spread) is flagged instead of answered."""
    if runs and runs["stable"] is False:
        lo, hi = runs["break_even_low"], runs["break_even_high"]
        return (f"fit unstable: the break-even ran from {lo:,} to "
                + (f"{hi:,} tokens" if hi else f"beyond {a['within_tokens'] // 1024}K tokens")
                + f" over {runs['runs']} runs")
    one = " (one run: no range)" if runs and runs["runs"] == 1 else ""
    rng = (f" (runs: {runs['break_even_low']:,}–{runs['break_even_high']:,})"
           if runs and runs["runs"] > 1 and runs["break_even_high"] and runs["break_even_low"] != runs["break_even_high"]
           else "")
    if a["break_even_tokens"] is None:
        return f"not within {a['within_tokens'] // 1024}K tokens{one}"
    n = a["break_even_tokens"]
    if n <= 1:
        return f"reloading beats recomputing from the first token{rng}{one}"
    return f"reloading beats recomputing beyond {n:,} tokens{rng}{one}"


def h200_reproduction() -> list[dict]:
    """The FLOP model at the fitted H200 rate beside every measured point (tokens/s and the read GiB/s at
    which reload = recompute, latency 0, as the measured table states it)."""
    rows = []
    for m, pts in H200_MEASURED.items():
        shape, rate = MODELS[m], _H200[m]
        for L, tps in pts.items():
            pred = prefill_tokens_per_s(shape, L, rate)
            rows.append({"model": m, "context_tokens": L, "measured_tokens_per_s": tps,
                         "model_tokens_per_s": pred, "relative_error": pred / tps - 1,
                         "measured_breakeven_read_gib_per_s": tps * shape.kv_bytes_per_token / GIB,
                         "model_breakeven_read_gib_per_s": pred * shape.kv_bytes_per_token / GIB,
                         "tflops": rate, "measured_effective_tflops": shape.prefill_flops(L) * tps / L / TFLOP})
    return rows
