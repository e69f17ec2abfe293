"""Issue 61 (repeatable inputs): the vector search's data sets and DiskANN indexes are the same bytes from the same
seed. DiskANN's build takes no seed for its product quantizer and is multi-threaded; one build thread keeps its
graph, and the seeded quantizer (pq.py) its PQ files, the same."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from storagebrief import studies
from storagebrief.studies.vector_search import dataset, pq
from storagebrief.studies.vector_search.params import VectorSearchParams

TINY = {k: v for k, v in studies.get("vector_search").tiny.items() if k != "targets"}


def _made(p: VectorSearchParams, kind: str, folder: Path) -> dict:
    """One data set made as dataset.ready makes it (the build in its worker), every file's sha256."""
    folder.mkdir()
    vectors, queries = dataset.generate(p, kind)
    np.save(folder / "vectors.npy", vectors)
    np.save(folder / "queries.npy", queries)
    np.save(folder / "truth.npy", dataset.ground_truth(vectors, queries, p.k))
    dataset._build(p, kind, folder)
    files = [folder / n for n in ("vectors.npy", "queries.npy", "truth.npy")] + dataset.index_files(folder)
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.slow
@pytest.mark.parametrize("kind", dataset.SETS)
def test_two_builds_from_one_seed_are_the_same_bytes(tmp_path, kind):
    p = VectorSearchParams(**TINY)
    assert p.build_threads == 1                         # the default: a repeatable build
    first, second = _made(p, kind, tmp_path / "a"), _made(p, kind, tmp_path / "b")
    assert {pq.PIVOTS, pq.CODES, "ann_disk.index", "queries.npy", "truth.npy"} <= set(first)
    assert first == second
    other = _made(VectorSearchParams(**{**TINY, "seed": 1}), kind, tmp_path / "c")
    assert other[pq.PIVOTS] != first[pq.PIVOTS] and other["vectors.npy"] != first["vectors.npy"]


@pytest.mark.slow
def test_the_seeded_quantizer_is_the_index_s_layout_and_codes(tmp_path):
    """The rewritten PQ files read back in the disk index's layout, and every code is the nearest pivot."""
    p = VectorSearchParams(**TINY)
    _made(p, "clustered", tmp_path / "s")
    offsets, pivots, centroid, chunks = pq.read_pivots(tmp_path / "s" / dataset.INDEX / pq.PIVOTS)
    assert pivots.shape == (pq.CENTERS, p.dimension) and len(chunks) == p.pq_chunks + 1 and chunks[-1] == p.dimension
    assert not centroid.any() and offsets[0] == 4096
    raw = (tmp_path / "s" / dataset.INDEX / pq.CODES).read_bytes()
    n, m = np.frombuffer(raw, np.int32, 2)
    codes = np.frombuffer(raw, np.uint8, offset=8).reshape(n, m)
    vectors, _ = dataset.generate(p, "clustered")
    assert (n, m) == (p.num_vectors, p.pq_chunks)
    assert np.array_equal(codes, pq.encode(vectors, pivots, chunks))


def test_the_shape_of_a_kept_set_names_the_engine_the_build_threads_and_the_seeded_quantizer():
    """A set kept from another engine version, another thread count or the engine's own quantizer is built
    again, never reused as if it were this one."""
    p = VectorSearchParams(**TINY)
    s = dataset.shape(p, "clustered")
    assert s["engine"].startswith("diskannpy-rust ") and s["pq"] == "seeded" and s["build_threads"] == 1
    assert dataset.shape(VectorSearchParams(**{**TINY, "build_threads": 0}), "clustered") != s
    assert dataset.pq_seed(p, "clustered") != dataset.pq_seed(p, "uniform")


@pytest.mark.slow
def test_diskanns_build_messages_go_to_the_runs_log_not_the_cell(tmp_path, capfd):
    """Issue 62: DiskANN's Rust build prints its progress on stdout ("Starting index build …"), which landed in
    notebook 09's cell; the run's logs/ folder keeps it."""
    p = VectorSearchParams(**TINY)
    folder = tmp_path / "set"
    folder.mkdir()
    vectors, queries = dataset.generate(p, "clustered")
    np.save(folder / "vectors.npy", vectors)
    log = tmp_path / "logs" / dataset.BUILD_LOG.format(target="local", kind="clustered")
    print("before the build")
    dataset._build(p, "clustered", folder, log)
    print("after the build")
    out, err = capfd.readouterr()
    assert "before the build" in out and "after the build" in out            # stdout is back after it
    assert "Index build" not in out + err and "Starting index build" in log.read_text()
