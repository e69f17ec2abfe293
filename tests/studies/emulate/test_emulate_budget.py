"""The emulate study budgets its accelerators' threads and buffers before any work (issue 57: every study budgets
memory and tasks through kit.budget, with the numbers in the refusal): with launcher: fork, each accelerator is a
process with its queue's feeder thread and `read_threads` loader threads holding one read buffer each, checked by
`validate` and the run (machine_fit.check_machine). Before: the launcher's share (2 tasks and 8 MiB per
accelerator) was checked at the run's start only, without the read threads and their buffers."""
from __future__ import annotations

import pytest

from storagebrief.kit import budget
from storagebrief.studies.emulate.params import EmulateParams
from child_cgroup import validate_in


def test_accelerators_read_threads_and_buffers_beyond_the_limits_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "pids_left", lambda: (40, "pids.max 70 in /x (30 in use)"))
    monkeypatch.setattr(budget, "memory_left", lambda: None)
    with pytest.raises(ValueError) as err:
        EmulateParams().check_machine()                    # auto: search_max 64 accelerators of unet3d
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert text.startswith("emulate: 64 accelerators of unet3d with 4 read threads each, 384 tasks (64 × (2 + 4 read "
                           "threads)), more than the 40 this run may start (pids.max 70 in /x (30 in use))"), text
    EmulateParams(accelerators=[1, 4], dataset_sizing="fixed").check_machine()          # 4 × 6 = 24 fit
    monkeypatch.setattr(budget, "pids_left", lambda: None)
    monkeypatch.setattr(budget, "memory_left", lambda: (200 * budget.MIB, "the memory cgroup /x (limit 0.20 GiB)"))
    with pytest.raises(ValueError, match=r"64 accelerators of unet3d with 16 read threads each need 1\.50 GiB \(64 × "
                                         r"\(16 × 1,024 KiB read buffers \+ 8 MiB per process\)\)"):
        EmulateParams(read_threads=16).check_machine()
    EmulateParams(launcher="mpi", read_threads=16).check_machine()          # ranks on their hosts: mpirun's preflight


def test_validate_under_a_pids_limit_refuses_the_accelerators_read_threads(tmp_path):
    res, d = validate_in("pids", {"pids.max": 40}, tmp_path, "emulate: {accelerators: [1, 8], dataset_sizing: fixed}")
    assert "emulate: 8 accelerators of unet3d with 4 read threads each, 48 tasks (8 × (2 + 4 read threads))" \
        in res.stderr and f"pids.max 40 in {d}" in res.stderr
