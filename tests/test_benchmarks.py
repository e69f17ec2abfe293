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
def test_checkpoint_benchmark_prints_every_round_of_both_sides(tmp_path):
    out = _run(REPO / "benchmarks" / "checkpoint.py", "--dir", tmp_path, "--ranks", "2", "--size-mib", "8",
               "--write-block-mib", "4", "--read-block-mib", "4", "--repeats", "2", timeout=300)
    assert out.returncode == 0, out.stderr[-1500:]
    rounds = [line.split() for line in out.stdout.splitlines() if line[:1].isdigit()]
    # in run order: the side that goes first alternates (the disk's rate swings from one run to the next)
    assert [(r[0], r[1]) for r in rounds] == [("1", "ranks"), ("1", "fio"), ("2", "fio"), ("2", "ranks")], out.stdout
    # the device's own counters, where the folder is on a block device: a save's bytes reached it
    for r in rounds:
        assert r[7] == "n/a" or float(r[7].replace(",", "")) >= 2 * 8 * 2**20 / 1e6 * 0.99, out.stdout   # device MB in run
    assert all(any(line.startswith(p) for line in out.stdout.splitlines()) for p in ("save", "restore", "generator"))
