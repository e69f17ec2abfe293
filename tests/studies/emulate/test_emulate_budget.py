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


def test_on_s3_each_accelerators_compiled_client_is_counted(monkeypatch):
    """Issue 58: on an S3 target each accelerator's GETs are its compiled client's (core.s3mover), a process of its
    own (kit.budget: 12 MiB + 1 MiB per read thread, measured), and the accelerator holds no read buffer: 8
    accelerators × 4 read threads need 8 × (4 MiB buffers + 8 MiB) = 96 MiB on a directory, 8 × (16 + 8) = 192 MiB
    on S3. The run's S3 targets reach the check through machine_fit (a section hook that takes `s3`)."""
    from storagebrief.core import config, machine_fit
    monkeypatch.setattr(budget, "pids_left", lambda: None)
    room = int(191 * budget.MIB / budget.MEMORY_SHARE)          # holds the directory's accelerators, not S3's
    monkeypatch.setattr(budget, "memory_left", lambda: (room, "MemAvailable"))
    p = EmulateParams(accelerators=[1, 8], dataset_sizing="fixed", read_threads=4)
    p.check_machine()
    with pytest.raises(ValueError, match=r"need 0\.19 GiB \(8 × \(16 MiB for its compiled S3 client \+ 8 MiB per "
                                         r"process\)\)"):
        p.check_machine(s3=True)
    params = config.validate({"targets": [{"name": "dir", "path": "/nonexistent/d"},
                                          {"name": "obj", "path": "/nonexistent/o", "kind": "s3", "s3": {}}],
                              "emulate": {"accelerators": [1, 8], "dataset_sizing": "fixed", "read_threads": 4}},
                             check_targets=False)
    with pytest.raises(config.ParamsError, match="compiled S3 client"):
        machine_fit.check_machine(params, ["emulate"])
    monkeypatch.setattr(budget, "memory_left", lambda: (room * 2, "MemAvailable"))
    machine_fit.check_machine(params, ["emulate"])


def test_an_s3_accelerator_holds_no_python_read_buffer(monkeypatch):
    """Issue 58: on S3 the compiled client reads every body into its own buffer, so the accelerator's loader makes
    none (objects.ObjectLoader.read_buffers); a directory's loader makes one per read thread."""
    from types import SimpleNamespace

    from storagebrief.core import store as core_store
    from storagebrief.studies.emulate import loader as loader_mod
    from storagebrief.studies.emulate.objects import ObjectLoader
    made = []
    monkeypatch.setattr(loader_mod, "read_buffer", lambda n: made.append(n) or (None, memoryview(bytearray(n))))
    monkeypatch.setattr(core_store, "open_store", lambda handle, pool: SimpleNamespace(connect=lambda key, n: None))
    cfg = {"store": {"folder": None, "s3": {}}, "sizes": {0: 10}, "backing": None}
    obj = ObjectLoader(["k0"], [[(0, 0, 10)]] * 4, 4, 2, 1 << 20, cfg)
    assert obj.buffers == [] and made == []
    files = loader_mod.Loader(["f0"], [[(0, 0, 10)]] * 4, 4, 2, 1 << 20)
    assert len(files.buffers) == 4 and made == [1 << 20] * 4
