"""The vector search budgets before any work (issue 57 defects 4-6): the space check counts a build's peak (the
vectors, the index and DiskANN's temporaries) and only a kept set of this shape; a target that fills during a
build is one line naming the folder and the bytes; the memory of the largest phase and the tasks of the largest
phase are checked against this machine's limits (kit.budget) by validate and the run, in one line with the
numbers; a search process whose query fails fails its row, and its QPS and recall are never reported."""
from __future__ import annotations

import json
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from storagebrief.core.causes import EnvironmentFailure
from storagebrief.core.targets import Target
from storagebrief.kit import budget
from storagebrief.studies.vector_search import dataset, fit, search
from storagebrief.studies.vector_search import run as run_mod
from storagebrief.studies.vector_search.params import VectorSearchParams
from child_cgroup import child_cgroup, run_in
from conftest import run_study


def _p(**kw) -> VectorSearchParams:
    base = {"num_vectors": 2000, "dimension": 16, "clusters": 8, "queries": 20, "min_queries": 5, "pq_chunks": 8,
            "search_list": [10, 20], "graph_degree": 16, "build_complexity": 32}
    return VectorSearchParams(**{**base, **kw})


# --------------------------------------------------------------------------- defect 4: space
def test_the_space_check_counts_the_builds_peak_and_only_a_kept_set_of_this_shape(tmp_path):
    p, t = _p(num_vectors=100_000, dimension=64, uniform_control=False), Target("t", tmp_path / "t")
    vectors = p.num_vectors * p.dimension * 4
    peak = run_mod._needed(p, t, True)
    assert peak >= vectors + p.index_bytes() * (1 + fit.TEMP_SHARE) and peak > p.dataset_bytes() + vectors
    assert run_mod._needed(p, t, False) == p.dataset_bytes()          # a copy from the first target: no build
    d = dataset.folder(t, "clustered")
    (d / dataset.INDEX).mkdir(parents=True)
    dataset.disk_index(d).write_bytes(b"x")
    for name in ("queries.npy", "truth.npy"):
        (d / name).write_bytes(b"q")
    files = dataset.kept_files(d)                                      # a whole set, as its manifest lists it
    (d / dataset.MANIFEST).write_text(json.dumps({"shape": dataset.shape(_p(), "clustered"), "files": files}))
    assert run_mod._needed(p, t, True) == peak                        # another shape: rebuilt, not present
    (d / dataset.MANIFEST).write_text(json.dumps({"shape": dataset.shape(p, "clustered"), "files": files}))
    assert run_mod._needed(p, t, True) == 0


def test_a_set_whose_index_fits_but_whose_build_does_not_is_refused_before_any_work(tmp_path, small_fs):
    """12,000 x 128 on a 16 MiB filesystem: the finished index (14.4 MB) fits beside the 10 % reserve, the build's
    peak (vectors.npy beside the index and its temporaries) does not. Before: accepted, then ENOSPC mid-build."""
    section = {**_p(num_vectors=12_000, dimension=128, uniform_control=False).model_dump(exclude={"targets"})}
    data = {"targets": [{"name": "small", "path": str(small_fs / "t")}], "vector_search": section}
    out = run_study("vector-search", tmp_path, data, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr[-3000:]
    assert "target 'small'" in out.stderr and "a build's peak" in out.stderr
    assert not [f for f in (small_fs / "t").rglob("*") if f.is_file() and f.name != ".storagebrief.lock"]


def test_a_target_that_fills_during_the_build_is_one_line_naming_the_folder_and_the_bytes(small_fs):
    """12,000 x 128: the vectors (6 MB) fit the 16 MiB filesystem, the index beside them (13 MB) does not."""
    p = _p(num_vectors=12_000, dimension=128, uniform_control=False)
    t = Target("small", small_fs / "t")
    with pytest.raises(EnvironmentFailure) as err:
        dataset.ready(t, p, "clustered", status=lambda *_: None)
    text = str(err.value)
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "target 'small' filled while building the clustered set in " + str(small_fs / "t") in text
    need = fit.build_peak_bytes(p)[0]
    assert f"{need:,} bytes" in text and "No space left on device" in text
    assert not [f for f in (small_fs / "t").rglob("*") if f.is_file()]        # the staging folder went


# --------------------------------------------------------------------------- defect 5: memory
def test_a_set_beyond_the_memory_the_run_may_use_is_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "memory_left", lambda: (24 * budget.GIB, "MemAvailable"))
    big = _p(num_vectors=5_000_000, dimension=1024, clusters=64)
    with pytest.raises(ValueError) as err:
        big.check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert text.startswith("vector_search.num_vectors = 5,000,000 x dimension 1,024: need ")
    assert "the build: the vectors 19.07 GiB + DiskANN's build RAM 76.29 GiB" in text
    assert "more than 80% of the 24.00 GiB this run may use (MemAvailable)" in text
    monkeypatch.setattr(budget, "memory_left", lambda: (700 * budget.MIB, "the memory cgroup /x (limit 0.68 GiB)"))
    with pytest.raises(ValueError, match=r"1,000,000 x dimension 128: need .* GiB .*the memory cgroup /x"):
        _p(num_vectors=1_000_000, dimension=128).check_machine()
    _p().check_machine()                                  # the tiny set fits in 700 MB


_VALIDATE = textwrap.dedent("""
    import sys
    from storagebrief.studies.vector_search.params import VectorSearchParams
    try:
        VectorSearchParams(num_vectors=VECTORS, dimension=128, threads=[THREADS], build_threads=1).check_machine()
    except ValueError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
""")


def test_in_a_700_mb_memory_cgroup_a_million_vectors_are_refused_before_any_work():
    with child_cgroup("memory", {"memory.limit_in_bytes": 700 * 10**6}) as d:
        res = run_in(d, [sys.executable, "-c", _VALIDATE.replace("THREADS", "1").replace("VECTORS", "1_000_000")], timeout=120)
    assert res.returncode == 2, res.stderr
    assert "1,000,000 x dimension 128: need" in res.stderr and f"the memory cgroup {d}" in res.stderr


# --------------------------------------------------------------------------- defect 6: tasks and threads
def test_more_search_tasks_than_the_pids_limit_leaves_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "pids_left", lambda: (6, "pids.max 40 in /x (34 in use)"))
    monkeypatch.setattr(budget, "memory_left", lambda: None)
    with pytest.raises(ValueError) as err:
        _p(threads=[1, 4]).check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1 and "20 tasks (4 search process(es) x (2 + 3 DiskANN threads))" \
        in text and "more than the 6 this run may start (pids.max 40 in /x (34 in use))" in text
    monkeypatch.setattr(budget, "pids_left", lambda: (6, "pids.max"))
    _p(threads=[1], build_threads=1).check_machine()      # one process: 2 + 3 fits


def test_under_a_pids_limit_validate_refuses_the_search_threads():
    with child_cgroup("pids", {"pids.max": 8}) as d:
        res = run_in(d, [sys.executable, "-c", _VALIDATE.replace("THREADS", "4")
                         .replace("VECTORS", "2000")], timeout=120)
    assert res.returncode == 2, res.stderr
    assert "search process(es) x" in res.stderr and f"pids.max 8 in {d}" in res.stderr


class _Index:
    """A search index whose query 3 raises (an engine's error inside one search process)."""
    def batch_search(self, q, k, L, n):
        if int(q[0, 0]) == 3:
            raise RuntimeError("engine failed\nsecond line of its message")
        return SimpleNamespace(identifiers=np.arange(k)[None, :], search_stats={
            "mean_latency": 100.0, "mean_io_time": 50.0, "mean_cpus": 10.0, "mean_ios": 3.0})


def _state():
    queries = np.arange(40, dtype=np.float32)[:, None].repeat(4, axis=1)
    cfg = {"k": 2, "search_list": 10, "beam_width": 1, "max_point_s": 5.0, "min_queries": 40}
    return {"cfg": cfg, "index": _Index(), "queries": queries}


def _line(items):
    return SimpleNamespace(tasks=lambda: iter(items))


def test_an_exception_in_one_search_process_fails_the_row_and_reports_no_qps_or_recall(tmp_path, monkeypatch):
    result = search.merge([search._work(_state(), 0, None, _line([0, 2, 4])),
                           search._work(_state(), 1, None, _line([1, 3, 5]))], 0.0)
    assert result["error"].startswith("search process 1 failed on query 3: RuntimeError: engine failed") \
        and "\n" not in result["error"]
    assert "found" not in result and "wall_s" not in result

    class Launch:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def put_tasks(self, items):
            pass

        def operate(self, on_start=None, timeout_s=None):
            on_start()
            return 0.0, [SimpleNamespace(result=r) for r in ({"error": result["error"]},)]

    monkeypatch.setattr(run_mod, "open_launch", lambda *a, **k: Launch())
    monkeypatch.setattr(run_mod, "cgroup_read_stats", lambda *a: None)
    run = SimpleNamespace(p=_p(), target=Target("t", tmp_path / "t"), throttle=lambda *a: None, emulated=None,
                          evict=lambda *a: None, start_clock=lambda: None, stop_clock=lambda: None)
    m = run_mod.run_one(run, run_mod.Config("clustered", 10, 1, 2))
    assert not m.ok and m.failure_reason == result["error"]
    assert not {"qps", "recall_at_k", "latency_ms_p99", "queries"} & set(m.row)


def test_the_processes_results_merge_in_query_order_with_the_wall_from_the_start_line():
    state = _state()
    state["index"] = SimpleNamespace(batch_search=lambda q, k, L, n: SimpleNamespace(
        identifiers=np.full((1, k), int(q[0, 0])), search_stats={"mean_latency": 100.0, "mean_io_time": 50.0,
                                                                 "mean_cpus": 10.0, "mean_ios": 3.0}))
    a, b = search._work(state, 0, None, _line([0, 3, 4])), search._work(state, 1, None, _line([1, 2]))
    got = search.merge([a, b], release=float(min(a["stats"][0, 0], b["stats"][0, 0])))
    assert got["queries"] == 5 and got["processes"] == 2 and list(got["index"]) == [0, 1, 2, 3, 4]
    assert [int(f[0]) for f in got["found"]] == [0, 1, 2, 3, 4]          # each answer stays with its query
    assert got["wall_s"] == pytest.approx(got["stats"][:, 1].max() - min(a["stats"][0, 0], b["stats"][0, 0]))
    # past the deadline a process takes no new query once min_queries were taken (query i is the i-th taken)
    state["cfg"] = {**state["cfg"], "max_point_s": 0.0, "min_queries": 2}
    late = search._work(state, 0, None, _line([0, 1, 2, 3]))
    assert list(late["index"]) == [0, 1]
