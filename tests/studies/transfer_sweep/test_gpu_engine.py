"""The GPU path without a GPU: the queue-keeping engine (depth from its own counters, latency per request,
CPU accounting) with host memory standing in for the device, the worker's import path without CUDA,
the path plan, ours ÷ fio, and the brief's GPU section from rows alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from storagebrief.studies.transfer_sweep import cpu_cost, fio, gpu, gpu_brief, gpu_fio
from storagebrief.studies.transfer_sweep import queue_engine as qe
from conftest import REPO


def _lib_first() -> str:
    """PYTHONPATH with lib/ first, keeping the caller's (a GPU machine's wheels live in a --target folder)."""
    return os.pathsep.join(filter(None, [str(REPO / "lib"), os.environ.get("PYTHONPATH")]))


@pytest.fixture
def data_file(tmp_path):
    f = tmp_path / "data.bin"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    return f


def _stand_in(f, bs: int, qd: int):
    try:
        st = qe.HostStaging(str(f), bs, qd, copy=None)
    except OSError:                        # a filesystem without O_DIRECT (tmpfs)
        st = qe.HostStaging(str(f), bs, qd, copy=None, direct=False)
    dev = qe.HostStandIn(st.host_array, bs, qd)
    st.copy = dev.copy
    return st, dev


def test_qd8_keeps_8_requests_in_flight_and_refills_each_slot_as_it_completes(data_file):
    """Slot 0's first request is held until 40 other requests have completed: a batch engine would wait
    for it before issuing any more (and hang); a queue keeps the other 7 slots issuing."""
    st, dev = _stand_in(data_file, 4096, 8)
    others_done, held, lats, when = [0], threading.Event(), [], {}
    lock = threading.Lock()

    def read_one(slot: int, off: int) -> None:
        if slot == 0 and not held.is_set():
            when["held"] = time.perf_counter_ns()
            assert held.wait(timeout=60), "the other slots stopped issuing while slot 0 was held"
            when["released"] = time.perf_counter_ns()
        st.read_one(slot, off)

    def on_complete(slot: int, ns: int) -> None:
        with lock:
            lats.append((slot, ns))
            if slot != 0:
                others_done[0] += 1
                if others_done[0] >= 40:
                    held.set()

    res = qe.run_queue(read_one, 8, 4096, data_file.stat().st_size, ramp_s=0.0, runtime_s=0.3,
                       on_complete=on_complete)
    st.close()
    assert res["max_in_flight"] == 8 and res["queue_depth_requested"] == 8 and res["slots_used"] == 8
    assert res["requests_issued"] == res["requests_completed"] == len(lats)
    assert 0 < res["in_flight_mean"] <= 8
    # latency is per request (not a batch's time shared by QD requests): the held one spans its hold, the
    # others their own reads, and the histogram counts every measured request
    first0 = next(ns for s, ns in lats if s == 0)
    assert first0 >= when["released"] - when["held"]
    assert len({ns for _, ns in lats}) > len(lats) // 2
    assert sum(res["bins_ns"].values()) == res["total_ios"] and res["io_bytes"] == res["total_ios"] * 4096
    assert res["lat_us_min"] <= res["lat_us_mean"] <= res["lat_us_max"]
    # the bytes reached the stand-in device buffer
    off_data = np.fromfile(data_file, dtype=np.uint8)
    assert any(np.array_equal(dev.device[1], off_data[o:o + 4096]) for o in range(0, off_data.size, 4096))


def test_cpu_accounting_is_cpu_time_over_bytes(data_file):
    st, _ = _stand_in(data_file, 65536, 4)
    res = qe.run_queue(st.read_one, 4, 65536, data_file.stat().st_size, 0.0, 0.3)
    st.close()
    assert res["process_cpu_s"] > 0 and res["io_bytes"] > 0
    assert res["cpu_cores_per_gb_per_s"] == pytest.approx(res["process_cpu_s"] / (res["io_bytes"] / 1e9))


def test_histogram_buckets_are_log_linear_within_one_64th():
    """fio's rule: exact below 128 ns, then 64 buckets per power of two (bucket value within 1/64 of the latency)."""
    vals = [0, 1, 63, 64, 127, 128, 129, 1000, 4095, 4096, 123_456, 9_999_999, 10**10]
    idx = [qe.plat_index(v) for v in vals]
    assert idx == sorted(idx) and max(idx) < qe.PLAT_NR
    for v in vals:
        got = qe.plat_value(qe.plat_index(v))
        assert got == v if v < 128 else abs(got - v) <= v / 64


@pytest.mark.skipif(fio.fio_binary() is None, reason="fio is not installed")
def test_bucket_values_match_fio_json_plus(data_file, tmp_path):
    out = tmp_path / "f.json"
    doc = fio.run_job(fio.job_args(fio.FioJob(data_file, "randread", 4096, 4, 1, "io_uring", 0.05, 0.3,
                                              data_file.stat().st_size, out)), 60)
    keys = list(fio.bins(doc, "randread"))
    assert keys and all(qe.plat_value(qe.plat_index(k)) == k for k in keys)
    cpu_s = cpu_cost.fio_process_cpu_s(doc)
    assert cpu_s is not None and cpu_s > 0


def test_worker_import_path_runs_without_cuda(data_file):
    """The worker module imports no CUDA at import time, and its whole measure path runs on the stand-in,
    with KVIKIO_NTHREADS set to the QD by the same env the GPU points get."""
    code = ("import sys, storagebrief.studies.transfer_sweep.gpu_worker as w; "
            "print(sorted(m for m in ('cupy', 'kvikio') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": _lib_first()}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr
    point = gpu.GpuPoint("stand-in", str(data_file), 4096, 8, 0.3, 0.05, 1)
    res = subprocess.run([sys.executable, "-m", gpu.WORKER, json.dumps(point.__dict__)], capture_output=True,
                         text=True, env=gpu.worker_env(point, env), timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["kvikio_nthreads"] == 8 and out["max_in_flight"] == 8 and out["slots_used"] == 8
    assert out["gpu_path_ran"] == "stand-in" and out["clat_us_p99"] >= out["clat_us_p50"] > 0
    assert sum(out["bins_ns"].values()) == out["total_ios"] > 0


def test_gds_env_and_plan_never_substitute():
    p = gpu.GpuPoint("gds", "/x", 4096, 32, 1, 0, 0)
    env = gpu.worker_env(p, {})
    assert env == {"KVIKIO_COMPAT_MODE": "OFF", "KVIKIO_NTHREADS": "32", "KVIKIO_GDS_THRESHOLD": "0"}
    assert gpu.worker_env(gpu.GpuPoint("legacy", "/x", 4096, 8, 1, 0, 0), {})["KVIKIO_COMPAT_MODE"] == "ON"
    assert gpu.planned({"available": False}, True) == []
    compat = {"available": True, "kvikio_gds_available": False}
    assert gpu.planned(compat, False) == ["legacy", "legacy-pread"]
    assert gpu.planned(compat, True) == ["legacy", "legacy-pread", "legacy-fio"]
    assert gpu.planned({**compat, "kvikio_gds_available": True}, True) == [
        "gds", "legacy", "legacy-pread", "gds-fio", "legacy-fio"]
    assert gpu.gpu_packages(13) == ["kvikio-cu13", "cupy-cuda13x"] and gpu.gpu_packages(11) is None
    assert gpu.cuda_major({"driver_cuda_version": "13.0"}) == 13


def _pts(with_fio: bool = True) -> pd.DataFrame:
    rows = []
    for load in ("idle", "busy"):
        for path, mbs, cores in (("cpu", 1000, 2.0), ("legacy", 800, 3.0), ("legacy-pread", 900, 2.5),
                                 ("legacy-fio", 1000, 1.5)):
            if path == "legacy-fio" and not with_fio:
                continue
            rows.append({"target": "a", "load": load, "path": path, "rw": "randread", "block_size_bytes": 131072,
                         "queue_depth": 8, "throughput_mb_per_s_mean": mbs / (2 if load == "busy" else 1),
                         "cpu_cores_per_gb_per_s_mean": cores})
    return pd.DataFrame(rows)


def test_ratios_to_fio_per_point():
    pts = gpu_fio.add_ratios(_pts())
    r = pts.set_index(["load", "path"])
    assert r.loc[("idle", "legacy"), "throughput_ratio_to_fio"] == pytest.approx(0.8)
    assert r.loc[("busy", "legacy-pread"), "throughput_ratio_to_fio"] == pytest.approx(0.9)
    assert r.loc[("idle", "legacy"), "reference_path"] == "legacy-fio"
    assert pd.isna(r.loc[("idle", "cpu"), "throughput_ratio_to_fio"])
    job = gpu_fio.job(REPO / "x", "randread", 131072, 32, 0.1, 1, 1 << 20, REPO / "o.json", "legacy-fio")
    args = fio.job_args(job)
    assert "--ioengine=libcufile" in args and "--numjobs=32" in args and "--iodepth=1" in args
    assert "--cuda_io=posix" in args


def test_brief_gpu_section_from_rows(monkeypatch):
    said, tables = [], []
    monkeypatch.setattr(gpu_brief, "show_md", said.append)
    monkeypatch.setattr(gpu_brief, "show_table", lambda t, c, **k: tables.append((c, t)))
    gpu_brief.section({"gpu": {"available": False, "reason": "no CUDA GPU visible: GPU path not measured"}}, _pts())
    assert said == ["**GPU path.** Not measured: no CUDA GPU visible: GPU path not measured."]
    said.clear()
    info = {"available": True, "gpus": ["GPU 0: H200"], "kvikio_gds_available": False,
            "kvikio_compat_mode_preferred": True}
    gpu_brief.section({"gpu": info}, gpu_fio.add_ratios(_pts()))
    text = "\n".join(said)
    assert "GDS unavailable on this machine: legacy measured" in text
    assert "legacy ÷ legacy-fio: 0.80–0.80×" in text and "legacy-pread ÷ legacy-fio: 0.90–0.90×" in text
    cores = next(t for c, t in tables if c.startswith("CPU cores per GB/s"))
    assert list(cores.columns[3:]) == ["cpu", "legacy", "legacy-pread", "legacy-fio"]
    idle_busy = next(t for c, t in tables if "idle vs busy" in c)
    assert (idle_busy["busy ÷ idle"] == 0.5).all()
    said.clear()
    gpu_brief.section({"gpu": info}, gpu_fio.add_ratios(_pts(with_fio=False)))
    assert "no libcufile engine" in said[-1]


def test_doctor_line_without_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "driver_facts", lambda: {})
    line = gpu.doctor_line()
    assert line.startswith("no CUDA GPU") and "libcufile" in line


def test_make_gpu_skips_with_a_reason_without_a_gpu(monkeypatch, capsys):
    from storagebrief.studies.transfer_sweep import gpu_setup
    monkeypatch.setattr(gpu, "driver_facts", lambda: {})
    assert gpu_setup.main(["extra"]) == gpu_setup.SKIP
    assert "no CUDA GPU visible" in capsys.readouterr().err
    monkeypatch.setattr(gpu, "driver_facts", lambda: {"gpus": ["GPU 0: H200"], "driver_cuda_version": "13.0"})
    assert gpu_setup.main(["extra"]) == 0 and capsys.readouterr().out.strip() == "gpu-cu13"
    monkeypatch.setattr(gpu, "driver_facts", lambda: {"gpus": ["GPU 0: old"], "driver_cuda_version": "11.8"})
    assert gpu_setup.main(["extra"]) == gpu_setup.SKIP and "11.8" in capsys.readouterr().err
    monkeypatch.setenv("CUDA_HOME", "/nonexistent-cuda")
    monkeypatch.setattr(gpu_setup.glob, "glob", lambda pattern: [])
    assert gpu_setup.main(["cuda-root"]) == gpu_setup.SKIP and "cufile.h" in capsys.readouterr().err
    assert gpu_setup.main(["what"]) == 2


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(fio.fio_binary() is None, reason="fio is not installed")
def test_sweep_runs_a_gpu_path_end_to_end_on_the_stand_in(tmp_path, monkeypatch):
    """The study's own glue (plan, worker in the run's scope, row, bins beside fio's JSON, points, brief) with the
    GPU worker on its host stand-in: every column declared, depth and CPU recorded on every path."""
    import yaml
    from storagebrief import studies
    from storagebrief.core import columns, config
    from storagebrief.studies.transfer_sweep import metrics
    monkeypatch.setenv("PYTHONPATH", _lib_first())
    monkeypatch.setattr(gpu, "detect", lambda: {"available": True, "reason": "", "gpus": ["GPU 0: stand-in"],
                                                "kvikio_gds_available": False})
    monkeypatch.setattr(gpu, "planned", lambda info, libcufile: ["stand-in"])
    monkeypatch.setattr(gpu, "OURS", (*gpu.OURS, "stand-in"))
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "a", "path": str(tmp_path / "a")}], "transfer_sweep": {
        "block_sizes": ["4k", "64k"], "queue_depths": [4], "repeats": 2, "file_mib": 8, "runtime_s": 0.3,
        "ramp_time_s": 0.05, "loads": ["idle"], "forecast": {"emulate_dir": "/nonexistent"}}}))
    out = tmp_path / "out"
    studies.get("transfer_sweep").run(config.load(f), out, log=lambda *_: None, progress="off")
    runs = pd.read_csv(out / "runs.csv")
    assert columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS) == []
    g = runs[runs.path == "stand-in"]
    assert len(g) == 4 and (g.max_in_flight == 4).all() and (g.kvikio_nthreads == 4).all()
    assert (g.requests_issued == g.requests_completed).all() and (g.slots_used == 4).all()
    assert runs.cpu_cores_per_gb_per_s.gt(0).all() and runs.tree_cpu_s.gt(0).all()      # every path, fio's too
    if "device_bytes_per_delivered_byte" in runs:       # a monitored device (not tmpfs): O_DIRECT reads its bytes
        assert runs.device_bytes_per_delivered_byte.ge(0.9).all(), runs.device_bytes_per_delivered_byte
        assert "not_the_storage" not in runs or runs.not_the_storage.isna().all()
    pts = pd.read_csv(out / "points.csv")
    sp = pts[pts.path == "stand-in"]
    assert len(sp) == 2 and sp.clat_us_p99_merged.notna().all() and (sp.repeats == 2).all()
    said = []
    monkeypatch.setattr(gpu_brief, "show_md", said.append)
    monkeypatch.setattr(gpu_brief, "show_table", lambda *a, **k: None)
    gpu_brief.section(json.loads((out / "study.json").read_text()), pts)
    assert any("GDS unavailable on this machine: legacy measured" in s for s in said)


@pytest.mark.slow
@pytest.mark.skipif(fio.fio_binary() is None, reason="fio is not installed")
def test_gpu_vs_fio_benchmark_prints_ratios_or_says_what_it_needs(tmp_path):
    env = {**os.environ, "PYTHONPATH": _lib_first()}
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_vs_fio.py"), "--dir", str(tmp_path),
                          "--sizes", "64k", "--qds", "2", "--rounds", "2", "--runtime", "0.3", "--file-mib", "16"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    line = next(ln for ln in res.stdout.splitlines() if "stand-in ÷ psync" in ln)
    assert "64K QD2" in line and len(line.split()[-2:]) == 2          # two rounds' figures, then median (range)
    part2 = res.stdout.split("2. GPU")[1]
    assert gpu.detect()["available"] or "not run: no CUDA GPU visible" in part2


def test_detect_and_doctor_read_the_driver_and_name_the_wheels_it_needs(tmp_path, monkeypatch):
    """A GPU whose driver speaks CUDA 13 but no kvikio/cupy: the reason names the cu13 wheels (nvidia-smi faked)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nif [ \"$1\" = -L ]; then echo 'GPU 0: NVIDIA H200 (UUID: GPU-x)'; else\n"
                   "echo '| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |'; fi\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    facts = gpu.driver_facts()
    assert facts == {"gpus": ["GPU 0: NVIDIA H200 (UUID: GPU-x)"], "driver_cuda_version": "13.0",
                     "driver_version": "580.65.06"}
    try:
        import kvikio  # noqa: F401
        pytest.skip("kvikio is installed here: the missing-wheels reason cannot be shown")
    except ImportError:
        pass
    info = gpu.detect()
    assert info["available"] is False and "kvikio-cu13 + cupy-cuda13x" in info["reason"]
    line = gpu.doctor_line()
    assert line.startswith("1 GPU(s), driver CUDA 13.0;") and "make gpu" in line


# --------------------------------------------------------------------------- the device's bytes vs the path's
def test_a_read_point_the_page_cache_served_says_so():
    """The H200 machine's legacy path at 1M × 8: 8,369 MB/s delivered in 3 s while the device read 781 MB/s."""
    from storagebrief.studies.transfer_sweep import served
    row = {"rw": "randread", "io_bytes": 8369e6 * 3, "ramp_io_bytes": 8369e6 * 0.5}
    out = served.columns(row, {"device_read_bytes": int(781e6 * 3.5)})
    assert out["device_bytes_per_delivered_byte"] == pytest.approx(781 / 8369)
    assert out["not_the_storage"] == ("page cache: the device read 2,734 MB of the 29,292 MB this path delivered "
                                      "(9%); the rest came from memory")
    direct = served.columns(row, {"device_read_bytes": int(8400e6 * 3.5)})     # O_DIRECT: all from the device
    assert "not_the_storage" not in direct and direct["device_bytes_per_delivered_byte"] > 1
    assert served.columns({**row, "rw": "randwrite"}, {"device_read_bytes": 0}) == {}
    assert served.columns(row, {}) == {}                                       # no device monitored: no claim
    assert served.columns({"rw": "read", "io_bytes": float("nan")}, {"device_read_bytes": 5}) == {}


def test_points_and_the_gpu_section_name_a_point_memory_served(monkeypatch):
    from storagebrief.studies.transfer_sweep import metrics
    runs = pd.DataFrame([{"run_id": f"r{i}", "target": "a", "load": "idle", "path": "legacy", "rw": "randread",
                          "block_size_bytes": 1 << 20, "queue_depth": 8, "iodepth": 1, "numjobs": 8, "status": "ok",
                          "throughput_mb_per_s": mbs, "iops": 1.0, "lat_us_mean": 1.0, "clat_us_p99": 1.0,
                          "device_bytes_per_delivered_byte": ratio, "not_the_storage": why}
                         for i, (mbs, ratio, why) in enumerate([(8369, 0.09, "page cache: 9%"),
                                                                (7257, 0.11, "page cache: 11%")])])
    pts = metrics.points(runs, None)
    assert pts.not_the_storage.iloc[0] == "2 of 2 repeats: page cache: 9%"
    assert pts.device_bytes_per_delivered_byte_mean.iloc[0] == pytest.approx(0.10)
    ok = metrics.points(runs.assign(not_the_storage=None, device_bytes_per_delivered_byte=1.0), None)
    assert ok.not_the_storage.isna().all()
    said = []
    monkeypatch.setattr(gpu_brief, "show_md", said.append)
    monkeypatch.setattr(gpu_brief, "show_table", lambda *a, **k: None)
    g = gpu_fio.add_ratios(pd.concat([_pts(), pts.assign(path="legacy", throughput_mb_per_s_mean=7813.0)]))
    info = {"available": True, "gpus": ["GPU 0: H200"]}
    gpu_brief.section({"gpu": info}, g)
    text = "\n".join(said)
    assert ("**Not the storage's figure.** At 1 point the page cache served part of the reads, so their MB/s is "
            "part memory: legacy 1M × 8 (idle): the device read 10% of the bytes delivered") in text
    assert "legacy ÷ legacy-fio: 0.80–0.80×" in text          # the cached point's 7.8× is left out
