"""kv_cache arithmetic without any I/O: the bytes-per-token formula, the prefill FLOP model against the
catalogue's H200 measurement, the break-even on hand-worked numbers, the union of in-flight time, and bad
params refused before any work, naming the key; the break-even stays a finite answer at every shape bound."""
from __future__ import annotations

import math

import pytest

from storagebrief.core import config
from storagebrief.studies.kv_cache import breakeven
from storagebrief.studies.kv_cache import breakeven as be
from storagebrief.studies.kv_cache.metrics import reload_fit, union_s
from storagebrief.studies.kv_cache.workload import KIB, MODELS, ModelShape
from conftest import REPO
from test_kv_params import SHAPE_BOUNDS


def test_kv_bytes_per_token_llama31_8b_is_128_kib_and_70b_320_kib():
    assert MODELS["llama3.1-8b"].kv_bytes_per_token == 128 * KIB == 2 * 32 * 8 * 128 * 2
    assert MODELS["llama3.1-70b"].kv_bytes_per_token == 320 * KIB == 2 * 80 * 8 * 128 * 2
    assert "128 KiB" in MODELS["llama3.1-8b"].formula and "320 KiB" in MODELS["llama3.1-70b"].formula
    assert MODELS["llama3.1-8b"].kv_bytes(1024) == 128 * 1024 * KIB


def test_dense_parameters_of_the_llama31_decoders():
    # 8b per layer: Q, O 4096×4096; K, V 4096×1024; gate, up, down 4096×14336
    assert MODELS["llama3.1-8b"].dense_parameters == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert MODELS["llama3.1-70b"].dense_parameters == 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)


def test_flop_model_reproduces_the_h200_table_within_its_tolerance():
    rows = be.h200_reproduction()
    assert len(rows) == 8
    assert max(abs(r["relative_error"]) for r in rows) <= be.H200_TOLERANCE
    # the table's effective TFLOP/s (576–630 for 8b, 610–660 for 70b) follow from the FLOP model
    eff = {m: [round(r["measured_effective_tflops"]) for r in rows if r["model"] == m] for m in be.H200_MEASURED}
    assert (min(eff["llama3.1-8b"]), max(eff["llama3.1-8b"])) == (576, 630)
    assert (min(eff["llama3.1-70b"]), max(eff["llama3.1-70b"])) == (610, 660)
    # the read GiB/s at which reload = recompute: bytes per token × measured tokens/s, as the table states them
    need = {(r["model"], r["context_tokens"]): round(r["measured_breakeven_read_gib_per_s"], 2) for r in rows}
    assert [need["llama3.1-8b", L] for L in (1024, 4096, 16384, 32768)] == [5.41, 5.09, 3.95, 3.12]
    assert [need["llama3.1-70b", L] for L in (1024, 4096, 16384, 32768)] == [1.46, 1.36, 1.18, 1.05]


# A toy decoder small enough to work by hand: P = 2·4·4 + 2·4·4 + 3·4·4 = 112 weights, 16 B per token,
# FLOPs(L) = 2·112·L + 2·1·1·4·L² = 224 L + 8 L². At 1 FLOP/s (1e-12 TFLOP/s), recompute(L) = 224 L + 8 L² s.
TOY = ModelShape("toy", layers=1, hidden=4, heads=1, kv_heads=1, head_dim=4, ffn=4, context_window=1 << 20)
ONE_FLOP = 1e-12


def test_break_even_on_hand_worked_numbers():
    assert TOY.dense_parameters == 112 and TOY.kv_bytes_per_token == 16
    assert TOY.prefill_flops(10) == 224 * 10 + 8 * 100
    # reads at 1/20 B/s: reload(L) = 320 L; 320 L < 224 L + 8 L² from L > 12 (equal at 12)
    assert be.reload_s(TOY, 12, 1 / 20) == pytest.approx(be.recompute_s(TOY, 12, ONE_FLOP))
    assert be.break_even_tokens(TOY, ONE_FLOP, 1 / 20) == 13
    # + 1000 s per reload: 1000 + 96 L < 8 L² from L > (96 + √(96² + 32000)) / 16 = 18.69
    assert be.break_even_tokens(TOY, ONE_FLOP, 1 / 20, 1000) == 19
    assert be.reload_s(TOY, 18, 1 / 20, 1000) > be.recompute_s(TOY, 18, ONE_FLOP)
    assert be.reload_s(TOY, 19, 1 / 20, 1000) < be.recompute_s(TOY, 19, ONE_FLOP)
    # reads at 1 B/s: 16 L < 224 L + 8 L² for every L: from the first token
    assert be.break_even_tokens(TOY, ONE_FLOP, 1.0) == 1
    # the read rate that ties at L = 10: 160 B ÷ (2240 + 800) s; none when the latency alone exceeds it
    assert be.read_needed_bytes_per_s(TOY, 10, ONE_FLOP) == pytest.approx(160 / 3040)
    assert be.read_needed_bytes_per_s(TOY, 10, ONE_FLOP, latency_s=3040) == math.inf
    a = be.answer(TOY, ONE_FLOP, 1 / 20, 1000, within=18, need_at=10)
    assert a["break_even_tokens"] is None and be.sentence(a) == "not within 0K tokens"
    assert be.sentence(be.answer(TOY, ONE_FLOP, 1 / 20, 0, within=1 << 17, need_at=10)) == \
        "reloading beats recomputing beyond 13 tokens"


def test_union_of_in_flight_time_and_the_reload_line():
    assert union_s([(0, 1), (0.5, 2), (3, 4), (3.2, 3.5)]) == pytest.approx(3.0)
    assert union_s([]) == 0
    rate, lat = reload_fit([1e6, 2e6, 4e6], [0.01 + 1e6 / 5e8, 0.01 + 2e6 / 5e8, 0.01 + 4e6 / 5e8])
    assert rate == pytest.approx(5e8) and lat == pytest.approx(0.01)
    assert reload_fit([1e6, 1e6], [0.01, 0.01]) == (pytest.approx(1e8), 0.0)


def _validate(tmp_path, section: dict):
    return config.validate({"targets": [{"name": "t", "path": str(tmp_path / "t")}], "kv_cache": section}, root=REPO)


@pytest.mark.parametrize("section, words", [
    ({"shapes": {"mine": {"layers": 0, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 64,
                          "context_window": 4096}}}, "layers=0"),
    ({"shapes": {"mine": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "head_dim": 16, "ffn": 64,
                          "context_window": 4096}}}, "kv_heads=3"),
    ({"workloads": {"w": {"cpu_tier_gib": 0}}, "run": ["w"]}, "cpu_tier_gib"),
    ({"workloads": {"w": {"cpu_tier_gib": -1}}, "run": ["w"]}, "cpu_tier_gib"),
    ({"workloads": {"w": {"cpu_tier_gib": 1000000}}, "run": ["w"]}, "RAM"),
    ({"contexts": [{"tokens": 131072, "weight": 1}]}, "window"),
    ({"duration_s": 0}, "duration_s"),
    ({"run": ["nope"]}, "nope"),
    ({"breakeven": {"accelerators": ["tpu-v9"]}}, "tpu-v9"),
])
def test_bad_params_are_refused_naming_the_key(tmp_path, section, words):
    with pytest.raises(config.ParamsError) as err:
        _validate(tmp_path, section)
    assert "kv_cache" in str(err.value) and words in str(err.value)


def test_mlperf_presets_validate_and_keep_the_closed_options(tmp_path):
    p = _validate(tmp_path, {"run": ["mlperf-closed-1", "mlperf-closed-2", "mlperf-closed-3"]}).section("kv_cache")
    w = [p.workload(n) for n in p.run]
    # the tool's README (README.md:1699-1776 at 284ce72): one worker per user; 16 / 0 (unbounded) / 4 writes in flight
    assert [(x.model, x.users_per_client, x.cpu_tier_gib, x.max_concurrent_allocs, x.threads) for x in w] == [
        ("llama3.1-8b", 200, None, 16, 200), ("llama3.1-8b", 100, 4.0, 0, 100), ("llama3.1-70b", 70, None, 4, 70)]


def test_the_reload_rate_never_exceeds_what_the_target_delivered_to_its_reads():
    """The issue's hdd-emulated case: a free line through a few reads gave 0.42-0.50 GiB/s on a device capped at
    0.14. Reads of a line at 5e8 B/s + 10 ms, bounded at 1e8 B/s: the rate is held there, the latency refitted."""
    sizes = [1e6, 2e6, 4e6]
    secs = [0.01 + s / 5e8 for s in sizes]
    assert reload_fit(sizes, secs)[0] == pytest.approx(5e8)
    rate, lat = reload_fit(sizes, secs, 1e8)
    assert rate == 1e8 and lat == pytest.approx(max(0.0, sum(t - s / 1e8 for s, t in zip(sizes, secs)) / 3))
    assert reload_fit(sizes, secs, 1e9) == (pytest.approx(5e8), pytest.approx(0.01))   # a bound above: unchanged


def test_an_unstable_break_even_is_flagged_not_answered():
    runs = be.spread([1000, 5000], within=131072)
    assert runs == {"runs": 2, "break_even_low": 1000, "break_even_high": 5000, "stable": False}
    a = {"break_even_tokens": 3000, "within_tokens": 131072}
    assert be.sentence(a, runs) == "fit unstable: the break-even ran from 1,000 to 5,000 tokens over 2 runs"
    mixed = be.spread([1000, None], within=131072)
    assert mixed["stable"] is False and "beyond 128K tokens over 2 runs" in be.sentence(a, mixed)
    steady = be.spread([1000, 1500], within=131072)
    assert steady["stable"] and be.sentence(a, steady) == "reloading beats recomputing beyond 3,000 tokens (runs: " \
                                                          "1,000–1,500)"
    assert be.sentence(a, be.spread([1000], 131072)).endswith("(one run: no range)")


# --------------------------------------------------------------------------- the break-even at the bounds (issue 44)
def test_the_break_even_at_every_bound_is_a_finite_answer():
    """The largest shape the bounds allow, the slowest rate: the arithmetic stays in floats (an unbounded layers
    count raised OverflowError here and ended a finished sweep as 'a bug')."""
    big = ModelShape("big", **{k: v for k, v in SHAPE_BOUNDS.items()})
    for tflops, rate, lat in ((1e-6, 1.0, 100.0), (1e6, 1e12, 0.0), (0.001, 1e-9, 1e9)):
        a = breakeven.answer(big, tflops, rate, lat, 1 << 24, 1 << 24)
        assert a["break_even_tokens"] is None or a["break_even_tokens"] >= 1
        assert breakeven.sentence(a)
