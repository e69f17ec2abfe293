"""Issue 45: a Python client process keeps at most one core busy, so the studies whose clients are Python judge
each process against its one core (kit/client_bound), not the whole machine against all of its cores: one
checkpoint rank or KV-cache client at >= 85 % of its core limited the run though the host's other cores idled."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from storagebrief.studies.checkpoint import metrics as ckpt
from storagebrief.studies.kv_cache import metrics as kv


def _ops(cpu_by_rank: dict[int, float], seconds: float = 10.0) -> list:
    got = [SimpleNamespace(rank=r, cpu_s=c, bytes=10**9, end=seconds) for r, c in cpu_by_rank.items()]
    return [("save", 0, None, 0.0, got)]


def test_one_checkpoint_rank_at_its_core_limits_the_save_on_a_machine_with_more():
    busy = ckpt.cpu_columns(_ops({0: 9.2, 1: 2.0, 2: 2.0, 3: 2.0}), {}, machine_busy_percent=60.0)
    assert busy["save_limited_by"] == "client CPU"          # 15.2 CPU-s of 10 s on 16 cores: 10 %, yet rank 0 at 0.92
    calm = ckpt.cpu_columns(_ops({0: 3.0, 1: 2.0, 2: 2.0, 3: 2.0}), {}, machine_busy_percent=60.0)
    assert calm["save_limited_by"] == ""
    procs = ckpt.rank_processes(_ops({0: 9.2, 3: 2.0})[0:1], 10.0)
    assert [(p["label"], p["cpu_seconds"], p["usable_cores"]) for p in procs] == [("rank 0", 9.2, 1.0),
                                                                                   ("rank 3", 2.0, 1.0)]


def test_one_kv_client_at_its_core_is_client_cpu():
    assert kv.limited_by(30.0, 95.0, (2, 0.92)) == "client CPU (client 2 at 0.92 of its one core)"
    assert kv.limited_by(30.0, 95.0, (2, 0.40)).startswith("storage")
    assert kv.limited_by(30.0, 20.0, None).startswith("workload")
    assert kv._busiest({"ranks": [{"rank": 0, "cpu_s": 1.0}, {"rank": 1, "cpu_s": 4.6}]}, 5.0) == (1, pytest.approx(0.92))


def test_an_s3_rank_is_judged_against_its_compiled_clients_cores(monkeypatch):
    """On S3 a rank's bytes move in its compiled client (core.s3mover), its CPU in the rank's cpu_s: a restore with
    4 GETs in flight may use 4 cores (within the CPUs), a save's parts one after another one core."""
    from storagebrief.kit import client_bound
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(client_bound, "cgroup_cpu_quota", lambda pid="self": None)
    load = [("load", 0, None, 0.0, _ops({0: 9.2})[0][4])]
    assert ckpt.cpu_columns(load, {}, 60.0)["load_limited_by"] == "client CPU"            # a directory's rank: 0.92 of 1
    assert ckpt.cpu_columns(load, {}, 60.0, s3_readers=4)["load_limited_by"] == ""        # 0.92 of 4
    assert ckpt.cpu_columns(_ops({0: 9.2}), {}, 60.0, s3_readers=4)["save_limited_by"] == "client CPU"
