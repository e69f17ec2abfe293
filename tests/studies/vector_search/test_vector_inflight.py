"""The reads a search keeps in flight (inflight.py): the index file's sectors found with FIEMAP (as filefrag reads
them), the block trace's reads inside them counted with their latency, the depth's source named, and the device's
IOPS at that depth from fio's reads in the same pattern; a real two-process search on a tiny index takes every query
once."""
from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from storagebrief.core import blocktrace, targets
from storagebrief.kit.ranks import Forked
from storagebrief.studies.vector_search import inflight, search
from conftest import privileged_if


_OK, _WHY = blocktrace.availability()


def _device(path: Path) -> targets.BlockDevice:
    dev = targets.resolve_device(path)
    if dev.major is None:
        pytest.skip(f"{path} is not on a block device: {dev.reason}")
    return dev


def _filefrag(path: Path, dev) -> list[tuple[int, int]]:
    """The file's extents in 512-byte sectors of the disk, as filefrag -v prints them (4 KiB blocks)."""
    out = subprocess.run(["filefrag", "-v", "-b4096", str(path)], capture_output=True, text=True, check=True).stdout
    start = int(Path(f"/sys/class/block/{dev.partition}/start").read_text()) if dev.partition else 0
    spans = []
    for line in out.splitlines():
        parts = line.replace(":", " ").replace("..", " ").split()
        if len(parts) >= 6 and parts[0].isdigit():
            spans.append((start + int(parts[3]) * 8, start + (int(parts[4]) + 1) * 8))
    return sorted(spans)


def test_the_index_files_extents_are_the_sectors_filefrag_names(tmp_path):
    dev = _device(tmp_path)
    data = tmp_path / "index.bin"
    data.write_bytes(os.urandom(1 << 20))
    os.sync()
    try:
        got = inflight.extents(data, dev.partition)
    except OSError as exc:
        pytest.skip(f"FIEMAP unsupported here: {exc}")
    assert sum(b - a for a, b in got) * 512 == 1 << 20
    assert got == _filefrag(data, dev)


@privileged_if(_OK, f"block tracing unavailable: {_WHY}")
@pytest.mark.serial("traces every request to the disk: another test's reads of the file's sectors would count")
def test_the_traced_reads_inside_the_file_are_counted_with_their_latency(tmp_path):
    dev = _device(tmp_path)
    data = tmp_path / "index.bin"
    subprocess.run(["dd", "if=/dev/urandom", f"of={data}", "bs=1M", "count=4", "oflag=direct", "status=none"],
                   check=True)
    trace = blocktrace.BlockTrace((dev.major, dev.minor), tmp_path / "t.tracefs-raw.gz", buffer_kib=1024).start()
    try:
        subprocess.run(["fio", "--name=r", f"--filename={data}", "--readonly", "--rw=randread", "--bs=4k",
                        "--direct=1", "--ioengine=libaio", "--iodepth=2", "--number_ios=300", "--norandommap",
                        f"--size={4 << 20}", "--output=/dev/null"], check=True, timeout=60)
    finally:
        result = trace.stop()
    got = inflight.traced_reads(result.path, inflight.extents(data, dev.partition))
    assert got["reads"] == 300 and got["latency_s"] > 0 and 0 < got["depth"] <= 2 + 1e-9
    assert got["latency_us"] == pytest.approx(got["latency_s"] / 300 * 1e6)
    assert inflight.traced_reads(result.path, [(0, 1)])["reads"] == 0          # none of them outside the file


def test_the_depth_is_the_block_layers_unthrottled_else_the_queries_waiting_on_io():
    stats = np.array([[0.0, 0.01, 1e4, 8e3, 100.0, 30.0]] * 10)        # 10 queries, 8 ms of I/O each
    timing = inflight.measured_depth({"stats": stats}, 0.1, None, None, False)
    assert timing["reads_in_flight"] == pytest.approx(0.8) and timing["inflight_source"] == \
        "per-query timing (no block trace)" and math.isnan(timing["read_latency_us_block"])
    throttled = inflight.measured_depth({"stats": stats}, 0.1, Path("/nonexistent"), [(0, 8)], True)
    assert throttled["inflight_source"].startswith("per-query timing (throttled")
    # the device's IOPS: Little's law at the block layer, else fio's IOPS x the share of its jobs kept waiting
    block = {"reads_in_flight": 0.5, "inflight_source": "block layer (trace)", "queries_waiting_on_io": 0.9}
    one = {"iops": 9e3, "block_depth": 0.6, "block_latency_us": 50.0}
    assert inflight.device_iops(block, [one], 1) == pytest.approx(1e4)
    assert inflight.device_iops(timing, [{"iops": 150.0}], 2) == pytest.approx(60.0)
    assert inflight.device_iops({**timing, "queries_waiting_on_io": 3.0}, [{"iops": 150.0}], 2) == 150.0
    # a throttle's cap is reached whenever one query waits: 3 queries waiting 2.7 of the time keep it at its cap
    capped = {**throttled, "queries_waiting_on_io": 2.7}
    assert inflight.device_iops(capped, [{"iops": 150.0}], 3) == 150.0
    assert inflight.device_iops({**capped, "queries_waiting_on_io": 0.9}, [{"iops": 150.0}], 1) == pytest.approx(135)
    # two probes around the search's depth: the latency between theirs
    deep = {**block, "reads_in_flight": 6.0}
    two = [{"iops": 1e5, "block_depth": 4.0, "block_latency_us": 100.0},
           {"iops": 1e5, "block_depth": 8.0, "block_latency_us": 200.0}]
    assert inflight.device_iops(deep, two, 4) == pytest.approx(6.0 / 150e-6)


def test_a_second_probe_brings_fios_depth_near_the_searches():
    assert inflight.second_jobs(7.7, {"block_depth": 15.4}, 4) == 2          # fio kept twice the depth: half the jobs
    assert inflight.second_jobs(7.7, {"block_depth": 8.5}, 4) is None         # near enough
    assert inflight.second_jobs(2.0, {"block_depth": 4.0}, 1) is None         # one job is the fewest: no second
    assert inflight.second_jobs(3.0, {}, 2) is None                          # fio's reads were not traced


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    diskannpy = pytest.importorskip("diskannpy")
    folder = tmp_path_factory.mktemp("vec")
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 16), dtype=np.float32)
    np.save(folder / "queries.npy", vectors[:24] + 0.01)
    (folder / "index").mkdir()
    diskannpy.build_disk_index(vectors, "l2", str(folder / "index"), complexity=32, graph_degree=16,
                               build_memory_maximum=0.25, num_threads=1, num_of_pq_chunks=8)
    return folder


def test_two_search_processes_take_every_query_once(tiny_index):
    cfg = {"folder": str(tiny_index), "k": 5, "search_list": 10, "beam_width": 2, "max_point_s": 60.0,
           "min_queries": 1}
    with Forked(search.WORKER, range(2), cfg, tasks=True) as launch:
        launch.put_tasks(range(24))
        release, done = launch.operate(timeout_s=120)
    ranks = {d.rank for d in done}
    got = search.merge([d.result for d in done], release)
    assert ranks == {0, 1} and got["processes"] == 2 and got["queries"] == 24
    assert list(got["index"]) == list(range(24)) and got["wall_s"] > 0
    assert (got["found"][:, 0] == np.arange(24)).mean() > 0.9           # each planted query finds its vector
    assert (got["stats"][:, 1] >= got["stats"][:, 0]).all() and (got["stats"][:, 5] > 0).all()
