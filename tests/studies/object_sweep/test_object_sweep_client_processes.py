"""object_sweep.client_processes: a point's requests shared among several worker processes (one Python process
tops out near one core), measured as one batch: every key moved once, the concurrency summed, each process judged
on its own for limited_by."""
from __future__ import annotations

import os

from pathlib import Path

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config
from storagebrief.kit import s3ops
from storagebrief.studies.object_sweep.run import shares
from conftest import REPO, needs_gateway, run_study


def test_shares_move_every_key_once_and_sum_to_the_concurrency():
    keys = [f"k{i}" for i in range(10)]
    got = shares(keys, 5, 2)
    assert sorted(k for part, _ in got for k in part) == keys and [c for _, c in got] == [3, 2]
    assert shares(keys, 1, 4) == [(keys, 1)]                 # never more processes than requests in flight
    assert len(shares(keys[:2], 8, 4)) == 2                  # nor than keys


def test_merged_parts_pool_latencies_and_keep_each_process():
    def part(lat, cpu, wall, label):
        proc = s3ops.ProcessCPU(cpu, wall, 1.0, label=label)
        return s3ops.Batch("get", len(lat), 1 << 20, 2, wall, cpu, lat, processes=[proc]).part()
    row = s3ops.merged([part([0.1, 0.2], 0.5, 1.0, "a"), part([0.3, 0.4, 0.5], 0.9, 1.2, "b")]).row()
    assert row["objects"] == 5 and row["wall_seconds"] == 1.2 and row["client_cpu_seconds"] == pytest.approx(1.4)
    assert row["latency_ms_max"] == pytest.approx(500) and row["latency_ms_p50"] == pytest.approx(300)
    assert [p["label"] for p in row["client_processes"]] == ["a", "b"]


def test_client_processes_is_validated():
    with pytest.raises(ValueError, match="object_sweep.client_processes = 0: .*greater than or equal to 1"):
        config.validate({"targets": [{"name": "d", "path": "/tmp"}], "object_sweep": {"client_processes": 0}},
                        root=REPO)


@pytest.mark.slow
@needs_gateway
def test_two_worker_processes_share_a_point_on_the_local_gateway(tmp_path: Path):
    tiny = {**studies.get("object_sweep").tiny, "loads": ["idle"], "object_sizes": ["64k"], "concurrency": [1, 4],
            "client_processes": 2}
    data = {"targets": [{"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "object_sweep": tiny}
    out = run_study("object-sweep", tmp_path, data)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index(["op", "concurrency"])
    assert set(runs.status) == {"ok"} and (runs.errors == 0).all()
    assert runs.client_processes.to_dict() == {("get", 1): 1, ("put", 1): 1, ("get", 4): 2, ("put", 4): 2}
    assert (runs.objects == 16).all()                        # every key once, across both processes
    assert runs.loc[("get", 4), "limited_by_reason"].count("worker pid") == 2
    # each compiled worker can use its own requests in flight (2 each at concurrency 4), capped by the CPUs
    cpus = len(os.sched_getaffinity(0))
    assert runs.client_usable_cores.to_dict() == {("get", 1): 1, ("put", 1): 1, ("get", 4): 2 * min(2, cpus),
                                                  ("put", 4): 2 * min(2, cpus)}
