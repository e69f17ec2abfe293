"""kit/s3worker: the object sweep's compiled client, started as the study starts it, its counts turned into the
batch the sweep judges (a compiled client: its usable cores are its requests in flight, capped by its CPUs)."""
from __future__ import annotations

import os

import pytest

from storagebrief.kit import s3worker
from storagebrief.kit.client_bound import thread_sched


def test_missing_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv(s3worker.BINARY_ENV, str(tmp_path / "none"))
    assert "run `make s3worker`" in s3worker.missing()


@pytest.mark.skipif(s3worker.missing() is not None, reason=str(s3worker.missing()))
def test_a_batch_on_a_folder_is_counted_and_judged_as_a_compiled_client(tmp_path):
    for k in ("a", "b", "c"):
        (tmp_path / k).write_bytes(b"z" * 8192)
    w = s3worker.start({"op": "get", "size": 8192, "concurrency": 2, "seed": 0, "keys": ["a", "b", "c"],
                        "store": {"folder": str(tmp_path)}}, {}, tmp_path / "w.log", "test worker", None)
    try:
        w.expect("ready", 30)
        before = thread_sched(w.pid)
        w.send({"cmd": "go"})
        done = w.expect("done", 30)
        b = s3worker.batch(done, w.pid, before, thread_sched(w.pid))
    finally:
        w.stop()
    row = b.row()
    assert row["objects"] == 3 and row["bytes_moved"] == 3 * 8192 and len(b.latencies_s) == 3
    proc = b.processes[0]
    assert proc.pid == w.pid and "(Go)" in proc.label
    assert proc.usable_cores == min(2, len(os.sched_getaffinity(0)))      # not one core: no interpreter lock


def test_the_object_sweep_refuses_to_start_without_it(tmp_path, monkeypatch):
    """Checked with the other tools before anything is made (core.machine_fit.check_tools): one line naming the make
    target, for a directory-only sweep too (its files go through the same client)."""
    from storagebrief.core import config, machine_fit
    monkeypatch.setenv(s3worker.BINARY_ENV, str(tmp_path / "none"))
    params = config.validate({"targets": [{"name": "d", "path": str(tmp_path / "d")}], "object_sweep": {},
                              "kv_cache": {}}, root=tmp_path)
    with pytest.raises(config.ParamsError, match=r"^object_sweep: .* is not built: run `make s3worker`"):
        machine_fit.check_tools(params, ["object_sweep"])
    machine_fit.check_tools(params, ["kv_cache"])          # another study does not need it
