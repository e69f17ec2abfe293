"""The training study budgets its TensorFlow jobs before any work (issue 57: every study budgets memory and tasks
through the one budget module, kit.budget, with the numbers in the refusal): the most jobs it trains at once, each
at floors measured here (params.JOB_BYTES, JOB_TASKS). Before: parallel_models: [256] started 256 TensorFlow jobs."""
from __future__ import annotations

import pytest

from storagebrief.kit import budget
from storagebrief.studies.train_resnet50.params import TrainParams
from child_cgroup import validate_in


def test_jobs_beyond_the_memory_or_the_pids_limit_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "memory_left", lambda: (3 * budget.GIB, "the memory cgroup /x (limit 3.00 GiB)"))
    monkeypatch.setattr(budget, "pids_left", lambda: None)
    with pytest.raises(ValueError) as err:
        TrainParams(parallel_models=[1, 4]).check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1 and text == (
        "train_resnet50.parallel_models = [1, 4]: 4 TensorFlow jobs at once need 3.93 GiB (4 × 1,007 MiB each), "
        "more than 80% of the 3.00 GiB this run may use (the memory cgroup /x (limit 3.00 GiB)): lower "
        "train_resnet50.parallel_models, or raise the limit")
    TrainParams(parallel_models=[1, 2]).check_machine()
    monkeypatch.setattr(budget, "pids_left", lambda: (30, "pids.max 40 in /x (10 in use)"))
    with pytest.raises(ValueError, match=r"4 TensorFlow jobs at once, 36 tasks \(4 × 9 threads\), more than the 30"):
        TrainParams(parallel_models=[4]).check_machine()
    TrainParams(parallel_models=[]).check_machine()          # the memory runs: one job


def test_validate_in_a_small_memory_cgroup_refuses_the_jobs_before_any_work(tmp_path):
    res, d = validate_in("memory", {"memory.limit_in_bytes": 1500 * 2**20}, tmp_path,
                         "train_resnet50: {parallel_models: [1, 2], dataset: generated}")
    assert "train_resnet50.parallel_models = [1, 2]: 2 TensorFlow jobs at once need 1.97 GiB" in res.stderr
    assert f"the memory cgroup {d}" in res.stderr
