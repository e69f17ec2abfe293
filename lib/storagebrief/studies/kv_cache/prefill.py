"""The prefill rate of this machine: a small decoder of llama shape in Keras (random weights, batch 1) timed at
several context lengths, beside what the FLOP model (workload.ModelShape.prefill_flops) predicts.

The decoder: per layer RMSNorm, Q/K/V projections without bias (grouped-query: kv_heads < heads, K and V
repeated per group), causal softmax attention, the output projection, RMSNorm and llama's gated MLP
(silu(x·Wg) ⊙ x·Wu)·Wd. This plain implementation computes the whole L × L score matrix and masks it, so
its attention does 4·L²·d FLOPs per layer (attention="full"), twice what a causal kernel that skips the
masked half does (the catalogue's H200 measurement; attention="causal"). One effective rate (the geometric
mean of FLOPs ÷ time over the contexts) turns the FLOP model into a time per context; the agreement is the
largest |predicted ÷ measured − 1|.

Runs in a subprocess of its own (`python -m storagebrief.studies.kv_cache.prefill IN.json OUT.json`), so the
study process never imports TensorFlow and its threads never share a core with a storage run.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from .workload import ModelShape
from ...kit.tf_import import tensorflow

TFLOP = 1e12


def shape_of(p) -> ModelShape:
    """The measured decoder as a ModelShape (head_dim = hidden ÷ heads; window: the longest context)."""
    return ModelShape("keras-decoder", layers=p["layers"], hidden=p["hidden"], heads=p["heads"],
                      kv_heads=p["kv_heads"], head_dim=p["hidden"] // p["heads"], ffn=p["ffn"],
                      context_window=max(p["contexts"]))


def executed_flops(shape: ModelShape, tokens: int) -> float:
    """What the Keras decoder executes: the dense part plus the full (masked) square of attention."""
    L = float(tokens)
    return 2.0 * shape.dense_parameters * L + 4.0 * shape.layers * shape.heads * shape.head_dim * L * L


def _build(p):
    import keras
    from keras import layers, ops

    h, heads, kvh, ffn = p["hidden"], p["heads"], p["kv_heads"], p["ffn"]
    hd = h // heads

    class RMSNorm(layers.Layer):
        def build(self, shape):
            self.scale = self.add_weight(shape=(shape[-1],), initializer="ones")

        def call(self, x):
            return x * ops.rsqrt(ops.mean(x * x, axis=-1, keepdims=True) + 1e-5) * self.scale

    class Attention(layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.q = layers.Dense(heads * hd, use_bias=False)
            self.k = layers.Dense(kvh * hd, use_bias=False)
            self.v = layers.Dense(kvh * hd, use_bias=False)
            self.o = layers.Dense(h, use_bias=False)

        def call(self, x):
            L = ops.shape(x)[1]
            q = ops.transpose(ops.reshape(self.q(x), (1, L, heads, hd)), (0, 2, 1, 3))
            k = ops.transpose(ops.reshape(self.k(x), (1, L, kvh, hd)), (0, 2, 1, 3))
            v = ops.transpose(ops.reshape(self.v(x), (1, L, kvh, hd)), (0, 2, 1, 3))
            k, v = ops.repeat(k, heads // kvh, axis=1), ops.repeat(v, heads // kvh, axis=1)
            s = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / math.sqrt(hd)
            mask = ops.tril(ops.ones((L, L), dtype="bool"))
            s = ops.where(mask, s, ops.full_like(s, -1e9))
            a = ops.matmul(ops.softmax(s, axis=-1), v)
            return self.o(ops.reshape(ops.transpose(a, (0, 2, 1, 3)), (1, L, heads * hd)))

    x = inp = keras.Input(shape=(None, h), batch_size=1)
    for _ in range(p["layers"]):
        x = x + Attention()(RMSNorm()(x))
        y = RMSNorm()(x)
        g = layers.Dense(ffn, use_bias=False)(y)
        u = layers.Dense(ffn, use_bias=False)(y)
        x = x + layers.Dense(h, use_bias=False)(ops.silu(g) * u)
    return keras.Model(inp, x)


def measure(p: dict) -> dict:
    """Times of one prefill per context (every repeat), the model's parameter count."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    tf = tensorflow()

    if p.get("threads"):
        tf.config.threading.set_intra_op_parallelism_threads(p["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(p["threads"])
    model = _build(p)
    call = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    rows = []
    rng = np.random.default_rng(0)
    for L in p["contexts"]:
        x = tf.constant(rng.standard_normal((1, L, p["hidden"]), dtype=np.float32))
        call(x).numpy()                                       # trace and warm up
        for r in range(p["repeats"]):
            t, c = time.perf_counter(), time.process_time()
            call(x).numpy()
            rows.append({"context_tokens": L, "repeat": r, "seconds": time.perf_counter() - t,
                         "cpu_seconds": time.process_time() - c})
    return {"rows": rows, "parameters": int(model.count_params()), "tensorflow": tf.__version__}


def analyse(p: dict, measured: dict, clock: str = "seconds") -> tuple[list[dict], dict]:
    """prefill.csv's rows (every timed pass with the model's prediction) and the summary. clock: "seconds"
    (wall: what a request waits, the study's rate) or "cpu_seconds" (the process's CPU time: the work done,
    which other load on the machine hardly moves; with threads = 1 the two agree on an idle machine)."""
    shape = shape_of(p)
    best: dict[int, float] = {}
    for r in measured["rows"]:
        best[r["context_tokens"]] = min(best.get(r["context_tokens"], math.inf), r[clock])
    rates = [executed_flops(shape, L) / t for L, t in best.items()]
    rate = math.exp(sum(math.log(x) for x in rates) / len(rates))
    rows = []
    for r in measured["rows"]:
        L = r["context_tokens"]
        pred = executed_flops(shape, L) / rate
        rows.append({**r, "best_seconds": best[L], "flops": executed_flops(shape, L), "predicted_seconds": pred,
                     "relative_error": pred / best[L] - 1, "effective_tflops": executed_flops(shape, L) / best[L] / TFLOP})
    norms = p["layers"] * 2 * p["hidden"]
    summary = {"tflops": rate / TFLOP, "agreement": max(abs(x["relative_error"]) for x in rows),
               "parameters_keras": measured["parameters"], "parameters_formula": shape.dense_parameters + norms,
               "tensorflow": measured.get("tensorflow"), "shape": {k: p[k] for k in ("layers", "hidden", "heads",
                                                                                      "kv_heads", "ffn")},
               "contexts": p["contexts"], "repeats": p["repeats"], "clock": clock}
    return rows, summary


def run_subprocess(p: dict, work_dir: Path, timeout_s: float) -> dict:
    """measure() in a child Python (dies with us); RuntimeError with its last lines when it fails, or saying
    it ran past timeout_s (the child is killed): the sweep then notes that prefill was not measured."""
    from ...core.procs import die_with_parent

    work_dir.mkdir(parents=True, exist_ok=True)
    src, dst = work_dir / "prefill-in.json", work_dir / "prefill-out.json"
    src.write_text(json.dumps(p))
    dst.unlink(missing_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        try:
            res = subprocess.run([sys.executable, "-m", __name__, str(src), str(dst)], capture_output=True,
                                 text=True, timeout=timeout_s, env=env, preexec_fn=die_with_parent)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"it ran past kv_cache.prefill.timeout_s = {timeout_s:g} s and was stopped (raise "
                               "the timeout, or measure fewer or shorter prefill.contexts)") from None
        if res.returncode != 0 or not dst.exists():
            tail = " ".join((res.stderr or "").strip().splitlines()[-3:])
            raise RuntimeError(f"the prefill measurement failed (exit {res.returncode}): {tail}")
        return json.loads(dst.read_text())
    finally:
        src.unlink(missing_ok=True)
        dst.unlink(missing_ok=True)


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(measure(json.loads(Path(sys.argv[1]).read_text()))))
