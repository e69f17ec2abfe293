"""The preprocess study budgets its worker processes before any work (issue 57: every study budgets memory and
tasks through the one budget module, kit.budget, with the numbers in the refusal): the largest process count's
tasks, pipes and memory (three copies of a decoded image per worker beside its own 8 MiB), by `validate` and by
the run (machine_fit.check_machine). Before: preprocess forked its workers unchecked."""
from __future__ import annotations

import pytest

from storagebrief.kit import budget
from storagebrief.studies.preprocess.params import PreprocessParams
from child_cgroup import validate_in


def test_workers_beyond_the_memory_or_the_pids_limit_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "memory_left", lambda: (2 * budget.GIB, "the memory cgroup /x (limit 2.00 GiB)"))
    monkeypatch.setattr(budget, "pids_left", lambda: None)
    with pytest.raises(ValueError) as err:
        PreprocessParams(processes=[1, 16], image_width=8000, image_height=8000).check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1 and text.startswith("preprocess.processes = [1, 16]: 16 worker processes need ")
    assert "16 × (3 × 183.1 MiB per 8000x8000 image at 3 × 8 bits + 8 MiB per process)" in text
    assert "more than 80% of the 2.00 GiB this run may use (the memory cgroup /x (limit 2.00 GiB))" in text
    monkeypatch.setattr(budget, "pids_left", lambda: (10, "pids.max 40 in /x (30 in use)"))
    with pytest.raises(ValueError, match=r"8 worker processes, 16 tasks \(8 × 2\), more than the 10 this run may "
                                         r"start \(pids.max 40 in /x \(30 in use\)\): lower preprocess.processes"):
        PreprocessParams(processes=[2, 8]).check_machine()
    PreprocessParams(processes=[1, 4]).check_machine()            # the defaults' size fits both


def test_validate_in_a_small_memory_cgroup_refuses_the_workers_before_any_work(tmp_path):
    res, d = validate_in("memory", {"memory.limit_in_bytes": 700 * 10**6}, tmp_path,
                         "preprocess: {processes: [1, 8], image_width: 8000, image_height: 8000}")
    assert "preprocess.processes = [1, 8]: 8 worker processes need" in res.stderr
    assert f"the memory cgroup {d}" in res.stderr
