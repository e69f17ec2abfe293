"""The transfer sweep budgets its largest point before any work (issue 57: every study budgets memory and tasks
through kit.budget, with the numbers in the refusal): fio's processes (psync: one per request in flight), the busy
load's workers and fio's buffers, by `validate` and the run (machine_fit.check_machine). Before: none of it was
checked; fio forked its jobs, and a busy point its load, unchecked."""
from __future__ import annotations

import os

import pytest

from storagebrief.kit import budget
from storagebrief.studies.transfer_sweep.params import TransferSweepParams
from child_cgroup import validate_in


def test_fio_jobs_and_buffers_beyond_the_limits_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "pids_left", lambda: (100, "pids.max 130 in /x (30 in use)"))
    monkeypatch.setattr(budget, "memory_left", lambda: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.raises(ValueError) as err:
        TransferSweepParams(engine="psync", queue_depths=[1, 256], gpu="off").check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert text.startswith("transfer_sweep: queue depth 256 (psync, numjobs 1): 256 fio jobs, 262 tasks (fio 1 + "
                           "256 jobs + the busy load's 5 workers (2 CPUs)), more than the 100 this run may start "
                           "(pids.max 130 in /x (30 in use))"), text
    TransferSweepParams(engine="io_uring", queue_depths=[1, 256], gpu="off").check_machine()   # one job: fits
    monkeypatch.setattr(budget, "memory_left", lambda: (budget.GIB, "the memory cgroup /x (limit 1.00 GiB)"))
    with pytest.raises(ValueError, match=r"1 fio job need 1\.01 GiB \(1 × \(1,024 × 1 MiB buffers \+ 8 MiB per "
                                         r"process\)\), more than 80% of the 1\.00 GiB"):
        TransferSweepParams(engine="libaio", queue_depths=[1024], block_sizes=["1m"], gpu="off").check_machine()


def test_validate_under_a_pids_limit_refuses_a_psync_queue_depth_before_any_work(tmp_path):
    res, d = validate_in("pids", {"pids.max": 40}, tmp_path,
                         "transfer_sweep: {engine: psync, queue_depths: [1, 64], gpu: 'off', loads: [idle]}")
    assert "queue depth 64 (psync, numjobs 1): 64 fio jobs, 65 tasks (fio 1 + 64 jobs)" in res.stderr
    assert f"pids.max 40 in {d}" in res.stderr
