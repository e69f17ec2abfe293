"""The benchmarks keep running as the code moves (they report figures; tests do not time anything)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))


def _run(*args, timeout=120, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda p: p.stem)
def test_every_benchmark_starts(bench):
    out = _run(bench, "--help")
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-1500:]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_transfer_sweep_benchmark_parses_what_fio_prints(tmp_path):
    out = _run(REPO / "benchmarks" / "transfer_sweep.py", "--dir", tmp_path, "--reports", tmp_path / "none")
    assert out.returncode == 0, out.stderr[-1500:]
    ratios = [line.split()[4] for line in out.stdout.splitlines() if " QD" in line and "K" in line.split()[0]]
    assert len(ratios) == 4 and all(0.99 <= float(r) <= 1.01 for r in ratios), out.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_checkpoint_benchmark_prints_every_save_of_both_sides_alternating(tmp_path):
    out = _run(REPO / "benchmarks" / "checkpoint.py", "--dir", tmp_path, "--ranks", "2", "--save-mib", "16",
               "--write-block-mib", "4", "--read-block-mib", "4", "--rounds", "2", "--saves", "1",
               "--memory-prep", "none", timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "--draw-seed" in out.stdout and "pinned: ranks 2, save_mib 16" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line[:1].isdigit() and line.split()[2] in ("ranks", "fio")]
    kept = [r for r in rows if "." not in r[1]]         # a save run again (a reporting pass inside it) is printed too
    # in run order: the side that goes first alternates from round to round (the saves within a round too: below)
    assert [r[0] for r in kept] == ["1", "1", "2", "2"] and kept[0][2] == kept[3][2] != kept[1][2] == kept[2][2]
    # the device's own counters, where the folder is on a block device: a save's bytes reached it
    for r in rows:
        assert r[8] == "n/a" or float(r[8].replace(",", "")) >= 16 * 2**20 / 1e6 * 0.99, out.stdout   # MB in save
    described = [line for line in out.stdout.splitlines() if line.startswith("round ") and "seeds ranks" in line]
    assert len(described) == 2 and all("2 ranks × 8 MiB" in line for line in described)
    means = [line for line in out.stdout.splitlines() if line.startswith("round ") and " means: " in line]
    assert len(means) == 2 and all("save ranks" in line and "restore" in line for line in means)
    assert all(any(line.startswith(p) for line in out.stdout.splitlines())
               for p in ("save ranks÷fio", "restore r÷f", "generator÷save"))
    assert not list(tmp_path.iterdir())                                          # its folders removed


def _checkpoint_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("checkpoint_bench", REPO / "benchmarks" / "checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checkpoint_bench_draws_every_round_within_its_ranges_alternating_with_a_seed_per_side(tmp_path):
    import random

    ck = _checkpoint_bench()
    plan = ck.draw_rounds(random.Random(5), [tmp_path / "a", tmp_path / "b"], 60)
    firsts = [r["order"][0] for r in plan]
    assert all(a != b for a, b in zip(firsts, firsts[1:])) and all(sorted(r["order"]) == ["fio", "ranks"]
                                                                   for r in plan)
    assert all(r["seeds"]["ranks"] != r["seeds"]["fio"] for r in plan) and len({r["seeds"]["fio"] for r in plan}) == 60
    for r in plan:
        assert ck.RANKS[0] <= r["ranks"] <= ck.RANKS[1]
        assert max(r["write_mib"], r["read_mib"]) <= r["size_mib"] <= ck.SAVE_MIB[1] // r["ranks"]
        assert {r["write_mib"], r["read_mib"]} <= set(ck.BLOCKS_MIB)
        assert r["size_mib"] % r["write_mib"] == r["size_mib"] % r["read_mib"] == 0    # fio does whole blocks only
    for key in ("ranks", "size_mib", "write_mib", "read_mib", "dir"):
        assert len({r[key] for r in plan}) > 1, key
    assert ck.save_order(["fio", "ranks"], 4) == ["fio", "ranks", "ranks", "fio", "fio", "ranks", "ranks", "fio"]
    pinned = ck.draw_rounds(random.Random(5), [tmp_path], 5, {"ranks": 3, "save_mib": 300, "write_mib": 2,
                                                              "read_mib": 4})
    assert all((r["ranks"], r["size_mib"], r["write_mib"]) == (3, 100, 2) for r in pinned)
    assert ck.draw_round(random.Random(1), [tmp_path], {"ranks": 6, "save_mib": 354, "write_mib": 32,
                                                        "read_mib": 4})["size_mib"] == 32


def test_checkpoint_bench_dry_run_draws_afresh_each_invocation_and_refuses_bad_input_in_one_line(tmp_path):
    bench = REPO / "benchmarks" / "checkpoint.py"
    outs = [_run(bench, "--dry-run", "--rounds", "3", "--dir", tmp_path) for _ in range(2)]
    for o in outs:
        rounds = [ln for ln in o.stdout.splitlines() if ln.startswith("round ")]
        assert o.returncode == 0 and len(rounds) == 3, o.stderr
        assert all("seeds ranks" in ln and "first:" in ln for ln in rounds)
    assert outs[0].stdout.split("load average")[0] != outs[1].stdout.split("load average")[0]
    seed = outs[0].stdout.split("--draw-seed ")[1].split(";")[0]
    again = _run(bench, "--dry-run", "--rounds", "3", "--dir", tmp_path, "--draw-seed", seed)
    strip = lambda o: [ln for ln in o.splitlines() if ln.startswith("round ")]          # noqa: E731
    assert strip(again.stdout) == strip(outs[0].stdout)                           # the printed seed repeats it
    bad = _run(bench, "--dry-run", "--saves", "0")
    assert bad.returncode != 0 and bad.stderr.strip() == "--saves 0: not allowed: at least 1"


# --------------------------------------------------------------------------- kv_cache_vs_mlperf: drawn, alternating
def _kv_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kv_cache_vs_mlperf", REPO / "benchmarks" / "kv_cache_vs_mlperf.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kv_bench_draws_every_round_within_its_ranges_alternating_with_a_seed_per_side():
    import random

    kv = _kv_bench()
    templates = kv.tool_templates(None)
    plan = kv.draw_rounds(random.Random(3), templates, 40, 8192)
    firsts = [r["order"][0] for r in plan]
    assert all(a != b for a, b in zip(firsts, firsts[1:])) and all(sorted(r["order"]) == ["mlperf", "study"]
                                                                   for r in plan)
    assert all(r["seeds"]["mlperf"] != r["seeds"]["study"] for r in plan)
    assert len({r["seeds"]["study"] for r in plan}) == 40
    for r in plan:
        assert kv.USERS[0] <= r["users"] <= kv.USERS[1] and kv.DURATION_S[0] <= r["duration_s"] <= kv.DURATION_S[1]
        assert r["cpu_gib"] == 0 or kv.CPU_GIB[0] <= r["cpu_gib"] <= kv.CPU_GIB[1]
        assert set(r["contexts"]) == {"chatbot", "coding", "document"}
        assert all(kv.LOW[0] <= lo <= hi <= min(4 * lo, 8192) for lo, hi in r["contexts"].values())
    assert {bool(r["cpu_gib"]) for r in plan} == {True, False}                     # with and without a CPU tier
    assert len({r["users"] for r in plan}) > 5 and len({r["duration_s"] for r in plan}) > 5
    assert any(len({tuple(c) for c in r["contexts"].values()}) == 3 for r in plan)  # a range per template
    t = kv.round_templates(templates, plan[0])
    assert [x["context_tokens"] for x in t] == [plan[0]["contexts"][x["name"]] for x in t]
    assert [x["generate_tokens"] for x in t] == [[50, 200], [100, 500], [200, 800]]  # the tool's own


def test_kv_bench_dry_run_prints_each_round_drawn_afresh_per_invocation(tmp_path):
    bench = REPO / "benchmarks" / "kv_cache_vs_mlperf.py"
    missing = _run(bench, "--dry-run", "--rounds", "3", "--mlperf-dir", tmp_path / "none-here")
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1
    assert "--mlperf-dir" in missing.stderr and "kv-cache.py" in missing.stderr
    outs = [_run(bench, "--dry-run", "--rounds", "3") for _ in range(2)]
    for o in outs:
        rounds = [ln for ln in o.stdout.splitlines() if ln.startswith("round ")]
        assert o.returncode == 0 and len(rounds) == 3, o.stderr
        assert all("users" in ln and "seeds mlperf" in ln and "first:" in ln for ln in rounds)
    assert outs[0].stdout != outs[1].stdout                                      # a fresh draw each invocation
    again = _run(bench, "--dry-run", "--rounds", "3", "--draw-seed", outs[0].stdout.split("--draw-seed ")[1].split()[0])
    assert again.stdout == outs[0].stdout                                        # printed seed repeats it
    bad = _run(bench, "--dry-run", "--max-context", "20000")
    assert bad.returncode != 0 and "--max-context 20000: not allowed" in bad.stderr
    control = _run(bench, "--dry-run", "--rounds", "1", "--tool-vs-tool")        # the tool beside itself
    assert control.returncode == 0 and "--tool-vs-tool" in _run(bench, "--help").stdout


def test_kv_bench_reads_the_tools_file_as_the_tool_writes_it():
    kv = _kv_bench()
    results = {"summary": {"total_requests": 10, "elapsed_time": 20.0, "multi_turn_stats": {"cache_hits": 6,
                                                                                            "cache_misses": 4},
                           "cache_stats": {"tier_storage_read_bandwidth_gbps": 0.5, "tier_storage_write_bandwidth_gbps": 0.0,
                                           "tier_storage_kv_bytes_read_gb": 10.0, "tier_storage_kv_bytes_written_gb": 0.0,
                                           "read_iops": 40, "offloads_storage": 7}}}
    f = kv.tool_figures(results, tier=False)
    assert f["turn_miss_percent"] == 40.0 and f["read_mib_each"] == 256.0 and f["write_gib_per_s"] == 0.0
    assert kv.tool_figures(results, tier=True)["read_mib_each"] is None          # CPU-tier reads in read_iops
    q = kv.ratios({**f, "write_gib_per_s": 0.0}, {**f, "read_gib_per_s": 0.6, "turn_miss_percent": 10.0})
    assert q["read"] == pytest.approx(1.2) and q["miss_points"] == -30.0 and q["write"] != q["write"]


def test_kv_bench_study_side_runs_once_and_gives_every_figure_compared(tmp_path):
    """The study's side as a round runs it (--ours-once on a spec like run_ours writes), tiny and short."""
    import json

    kv = _kv_bench()
    templates = [{"name": "chatbot", "context_tokens": [8, 32], "generate_tokens": [10, 40], "think_s": [0.01, 0.02]}]
    spec = {"folder": str(tmp_path / "c"), "family": "mlperf", "seed": 5, "users": 3, "concurrency": 3,
            "cpu_tier_bytes": 0, "bytes_per_token": 4096, "contexts": [(32, 1)], "turns": [(1, 1)], "turn_tokens": 1,
            "decode_reads": 0, "prefill_only_tokens": 10000, "duration_s": 0.5, "write_block": 1 << 20,
            "largest_entry_bytes": 32 * 4096, "max_concurrent_allocs": 2, "templates": templates,
            "decode_batch_tokens": 32, "end_conversation_probability": 0.2, "max_turns": 50,
            "storage_capacity_bytes": 0}
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(spec))
    out = _run(REPO / "benchmarks" / "kv_cache_vs_mlperf.py", "--ours-once", f)
    assert out.returncode == 0, out.stderr[-1500:]
    got = kv.study_figures(json.loads(out.stdout.strip().splitlines()[-1]), tier=False)
    assert got["requests"] > 0 and got["write_mib_each"] > 0 and 0 <= got["turn_miss_percent"] <= 100
    assert got["with_demotions_gib_per_s"] == pytest.approx(got["write_gib_per_s"])      # no CPU tier: equal
