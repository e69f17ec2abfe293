"""vector_search without a device: knobs refused before work naming the key, the data (seeded, planted queries,
exact ground truth), the row arithmetic (reads three ways, regime, limited_by, the prediction), fio's JSON read,
and each run as mlpstorage writes it: vdbbench's keys with vdbbench's meaning, this study's figures by
its own names."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from storagebrief.core import config
from storagebrief.core.config import ParamsError
from storagebrief.kit import mlpstorage_tree as tree
from storagebrief.studies.vector_search import dataset, metrics, mlperf_tree, probe
from storagebrief.studies.vector_search.params import VectorSearchParams


def _p(**kw) -> VectorSearchParams:
    base = {"num_vectors": 2000, "dimension": 16, "clusters": 8, "queries": 20, "min_queries": 5, "pq_chunks": 8,
            "search_list": [10, 20]}
    return VectorSearchParams(**{**base, **kw})


@pytest.mark.parametrize("knob, value, words", [
    ("search_list", [5, 20], "every L must be >= k"),
    ("beam_width", [0], "vector_search.beam_width"),
    ("threads", [0], "vector_search.threads"),
    ("pq_chunks", 64, "pq_chunks = 64 is above dimension = 16"),
    ("min_queries", 50, "min_queries = 50 is above queries = 20"),
])
def test_bad_knobs_are_refused_naming_the_key(tmp_path, knob, value, words):
    with pytest.raises(ParamsError) as err:
        config.validate({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                         "vector_search": {"num_vectors": 2000, "dimension": 16, "clusters": 8, "queries": 20,
                                           "min_queries": 5, "pq_chunks": 8, "search_list": [10, 20], knob: value}})
    assert words in str(err.value)


def test_more_threads_than_four_per_cpu_is_refused_naming_the_key():
    too_many = (os.cpu_count() or 1) * 4 + 1
    with pytest.raises(ParamsError, match=r"vector_search.threads = .*at most"):
        _p(threads=[1, too_many]).check_machine()
    _p(threads=[(os.cpu_count() or 1) * 4]).check_machine()


def test_sets_are_seeded_and_queries_planted_near_their_vector():
    p = _p()
    v1, q1 = dataset.generate(p, "clustered")
    v2, q2 = dataset.generate(p, "clustered")
    assert np.array_equal(v1, v2) and np.array_equal(q1, q2) and v1.dtype == np.float32
    nearest = ((q1[:, None, :] - v1[None]) ** 2).sum(-1).min(1)
    assert nearest.max() < (p.query_noise * 6) ** 2 * p.dimension      # each query sits on a database vector
    vu, qu = dataset.generate(p, "uniform")
    assert vu.min() >= 0 and vu.max() < 1 and not np.array_equal(vu[:20], v1[:20])


def test_ground_truth_is_the_exact_k_nearest_in_order():
    rng = np.random.default_rng(3)
    v = rng.standard_normal((500, 8)).astype(np.float32)
    q = rng.standard_normal((30, 8)).astype(np.float32)
    truth = dataset.ground_truth(v, q, 5, block=7)
    naive = np.argsort(((q[:, None, :] - v[None]) ** 2).sum(-1), axis=1)[:, :5]
    assert np.array_equal(truth, naive)
    assert dataset.recall_at_k(naive, truth) == 1.0
    half = truth.copy()
    half[:, 2:] = -1
    assert dataset.recall_at_k(half, truth) == pytest.approx(0.4)


def _result(ios=30.0, io_us=900.0, lat_us=1000.0, n=10, read_bytes=None, cpu_s=0.01, wall=1.0, processes=1,
            slow=True):
    start = np.arange(n) * wall / n                              # per query: start, end (s), the engine's figures
    stats = np.column_stack([start, start + lat_us / 1e6 * 1.05, [lat_us] * n, [io_us] * n, [50.0] * n, [ios] * n])
    if slow:
        stats[-1, 1] = stats[-1, 0] + 0.05                       # one slow query: the tail is a query's
    return {"queries": n, "wall_s": wall, "read_bytes": int(read_bytes if read_bytes is not None else ios * 4096 * n),
            "cpu_s": cpu_s, "found": np.tile(np.arange(10), (n, 1)), "stats": stats, "processes": processes}


def test_row_reads_three_ways_prediction_regime_and_per_query_tail():
    p = _p()
    truth = np.tile(np.arange(10), (10, 1))
    block = {"source": "cgroup", "bytes": 30 * 4096 * 10, "requests": 290}
    row = metrics.point_row(_result(), truth, block, {"iops": 300.0}, 0, p, 2)
    assert row["reads_per_query_engine"] == row["reads_per_query_process"] == row["reads_per_query_block"] == 30
    assert row["reads_agree"] and row["page_cache_bypassed"] and row["recall_at_k"] == 1.0
    assert row["qps"] == 10 and row["qps_predicted"] == 10 and row["prediction_error"] == 0
    assert row["regime"] == "I/O-bound" and row["limited_by"] == ""
    assert row["latency_ms_p999"] > 40 > row["latency_ms_p50"]       # one slow query shows in the tail
    assert row["call_overhead_ms"] == pytest.approx((0.05 * 9 + 49.0) / 10)   # wall - the engine's own
    off = metrics.point_row(_result(), truth, {**block, "bytes": 40 * 4096 * 10}, {"iops": 300.0}, 3, p, 2)
    assert not off["reads_agree"] and not off["page_cache_bypassed"]
    cpu = metrics.point_row(_result(io_us=100.0, cpu_s=1.8), truth, block, {"iops": 300.0}, 0, p, 2)
    assert cpu["regime"] == "CPU-bound" and cpu["limited_by"] == "client CPU" and "10%" in cpu["limited_by_reason"]
    eng = metrics.point_row(_result(io_us=100.0), truth, block, {"iops": 300.0}, 0, p, 2)
    assert eng["limited_by"] == "the engine (CPU in the search)"
    # a machine whose every CPU other work kept busy: not the device's figure, though its latency was mostly I/O
    busy = metrics.point_row(_result(), truth, block, {"iops": 300.0}, 0, p, 2, machine_busy_percent=97.0)
    assert busy["regime"] == "I/O-bound" and busy["limited_by"] == "machine CPU (97 % busy)"
    assert metrics.point_row(_result(), truth, block, {"iops": 300.0}, 0, p, 2, 60.0)["limited_by"] == ""


def test_a_point_off_its_prediction_by_more_than_ten_percent_always_names_its_limit():
    p, truth = _p(), np.tile(np.arange(10), (40, 1))
    block = {"source": "cgroup", "bytes": 30 * 4096 * 40, "requests": 1200}
    depth = {"reads_in_flight": 0.5, "inflight_source": "block layer (trace)", "read_latency_us_block": 80.0}
    dev = {"iops": 1560.0, "fio_iops": 2000.0, "pattern_iops": 2000.0, "block_latency_us": 60.0}
    row = metrics.point_row(_result(n=40, slow=False), truth, block, dev, 0, p, 2, None, depth)     # 40 q/s against 52
    assert row["prediction_error"] == pytest.approx(40 / 52 - 1) and not row["too_short"]
    assert row["limited_by"] == "the device (not as fio in the search's pattern)"
    assert "80 us at the block layer, fio's in their pattern 60 us" in row["limited_by_reason"]
    assert row["queue_depth"] == 0.5 and row["qps_device_bound"] == pytest.approx(2000 / 30)
    short = metrics.point_row(_result(n=3), truth[:3], {**block, "bytes": 30 * 4096 * 3}, dev, 0, p, 2,
                              None, depth)
    assert short["too_short"] and short["limited_by"].startswith("too few queries (3: QPS ± ")
    # two search processes on two CPUs, each a whole core busy: the client, judged against the cores it can use
    two = metrics.point_row(_result(n=40, cpu_s=1.7, processes=2, slow=False), truth, block, dev, 0, p, 2, None, depth)
    assert two["limited_by"] == "client CPU" and "85 % of 2 CPU(s)" in two["limited_by_reason"]
    for r in (row, short, two):
        assert abs(r["prediction_error"]) > metrics.BAND and r["limited_by"]


def test_the_qps_error_bar_shrinks_with_the_square_root_of_the_queries():
    lat = np.array([1.0, 3.0] * 50)
    assert metrics.qps_ci95(lat) == pytest.approx(100 * 1.96 * lat.std(ddof=1) / 2.0 / 10)
    assert metrics.qps_ci95(np.tile(lat, 4)) == pytest.approx(metrics.qps_ci95(lat) / 2, rel=0.01)
    assert metrics.qps_ci95(np.array([1.0])) == float("inf")


def test_without_a_cgroup_the_block_count_is_the_device_wide_one_and_said_so():
    assert metrics.block_reads(None, None, {"device_read_bytes": 8192})["source"] == "diskstats"
    assert metrics.block_reads((10, 1), (4106, 2), {})["bytes"] == 4096
    assert metrics.block_reads(None, None, {})["bytes"] is None


def test_fio_json_is_read_for_iops():
    doc = {"jobs": [{"error": 0, "read": {"iops": 1234.5, "lat_ns": {"mean": 8000.0}, "clat_ns": {"mean": 6000.0},
                                          "total_ios": 99, "runtime": 1500}}]}
    assert probe.parse(doc) == {"iops": 1234.5, "lat_us_mean": 8.0, "clat_us_mean": 6.0, "ios": 99,
                                "runtime_ms": 1500}
    with pytest.raises(probe.ProbeFailed):
        probe.parse({"jobs": [{"error": 5, "read": {}}]})
    args = probe.fio_args("/x/ann_disk.index", 4, 1.5, "/o.json", jobs=3)
    assert "--direct=1" in args and "--iodepth=4" in args and "--bs=4096" in args and "--readonly" in args
    # a search hop's pattern: a beam submitted at once and waited for whole, one job per search process
    assert {"--iodepth_batch_submit=4", "--iodepth_batch_complete_min=4", "--numjobs=3", "--group_reporting=1"} \
        <= set(args)
    assert "--ramp_time=200ms" in args          # the throttle's debt from the searches is not counted


def test_best_qps_is_taken_only_among_points_at_the_recall_floor():
    pts = pd.DataFrame({"target": ["a", "a", "a"], "data": ["clustered"] * 3, "recall_at_k": [0.9, 0.96, 0.99],
                        "qps": [500.0, 300.0, 200.0]})
    best = metrics.best_at_floor(pts, 0.95)
    assert list(best.qps) == [300.0]
    assert metrics.best_at_floor(pts, 0.999).empty


def test_mlperf_tree_holds_vdbbenchs_keys_and_ours_by_our_names(tmp_path):
    p = _p()
    row = {"target": "t", "data": "clustered", "search_list": 20, "beam_width": 2, "threads": 1, "repeat": 1,
           "status": "ok", "queries": 20, "qps": 40.0, "latency_ms_mean": 25.0, "latency_ms_p50": 24.0,
           "latency_ms_p95": 30.0, "latency_ms_p99": 35.0, "latency_ms_p999": 36.0, "recall_at_k": 0.97,
           "bytes_per_query": 4096 * 30.0, "reads_per_query_block": 30.2, "block_source": "cgroup",
           "reads_per_query_engine": 30.0, "device_iops_at_qd": 1260.0, "qps_predicted": 42.0,
           "prediction_error": -0.05, "regime": "I/O-bound", "run_id": "r1", "started_at": "2026-12-07T06:00:00Z"}
    frame = pd.DataFrame([row, {**row, "repeat": 2, "qps": 41.0, "run_id": "r2", "started_at": "2026-12-07T06:00:05Z"}])
    made = mlperf_tree.export(tmp_path, frame, p, {"engine": "diskannpy-rust 0.49.1"})
    assert len(made) == 2 and not (tmp_path / "mlperf" / "t").exists()          # no per-point layout beside it
    stats = json.loads((made[1] / "statistics.json").read_text())
    assert stats["throughput_qps"] == 41.0 and stats["recall"]["recall_at_k"] == 0.97 and "disk_io" not in stats
    ours = json.loads((made[1] / tree.OURS).read_text())
    assert ours["run_id"] == "r2" and "Milvus" in ours["not"]
    pt = ours["point"]
    assert pt["point"] == "clustered-L20-w2-t1" and pt["reads_per_query_engine"] == 30.0
    assert pt["process_read_bytes"] == 4096 * 30 * 20 and pt["qps_predicted"] == 42.0
    assert (pt["runs_of_point"], pt["runs_required"], pt["complete"]) == (2, 5, False)   # never padded
    assert not {"throughput_qps", "disk_io", "recall", "database"} & set(pt)            # no vdbbench key of ours


def test_on_an_emulated_target_the_probe_gets_a_fresh_throttle_not_the_searches_indebted_one():
    from storagebrief.studies.vector_search.run import probe_group

    class Run:
        def __init__(self, emulated):
            self.emulated, self.made = emulated, []

        def throttle(self, suffix=""):
            self.made.append(suffix)
            return f"fresh-{suffix}"

    searches = "searches' group"
    hdd = Run(emulated=True)
    assert probe_group(hdd, searches) == "fresh-probe" and hdd.made == ["probe"]
    local = Run(emulated=False)              # unthrottled: the counting group owes nothing
    assert probe_group(local, searches) == searches and local.made == []
    assert probe_group(Run(emulated=True), None) is None      # no cgroups here: none for the probe either


def test_the_probe_on_an_emulated_target_counts_no_more_than_the_profile_lets_through():
    from storagebrief.core.cgroups import IoLimits

    got = {"iops": 177.0, "queue_depth": 2}
    hdd = probe.within_profile(got, IoLimits(device=(8, 0), read_iops=150, read_bps=150 << 20))
    assert hdd["iops"] == 150 and hdd["fio_iops"] == 177.0 and hdd["profile_read_iops_cap"] == 150
    by_bytes = probe.within_profile(got, IoLimits(device=(8, 0), read_bps=100 * 4096))     # 100 x 4 KiB per second
    assert by_bytes["iops"] == 100
    below = probe.within_profile({"iops": 120.0}, IoLimits(device=(8, 0), read_iops=150))
    assert below["iops"] == 120.0                                      # a probe under the cap is fio's figure
    assert probe.within_profile(got, None)["iops"] == 177.0            # unthrottled: fio's figure as is
