"""transfer_sweep: fio parsed (never re-implemented), merged-bin percentiles, the busy load measured and
always reaped, the GPU path skipped with its reason, the forecast arithmetic, bad input before work."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.core import columns, config, leftovers
from storagebrief.studies.transfer_sweep import fio, forecast, gpu, load, metrics
from storagebrief.studies.transfer_sweep import run as ts_run
from conftest import REPO, process_alive

pytestmark = pytest.mark.skipif(fio.fio_binary() is None, reason="fio is not installed")
STUDY = studies.get("transfer_sweep")


def _file(tmp_path: Path, mib: int = 8) -> Path:
    f = tmp_path / "data.bin"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, mib << 20, dtype=np.uint8).tobytes())
    return f


def _job(f: Path, out: Path, bs: int = 4096, qd: int = 4, runtime: float = 0.3) -> dict:
    args = fio.job_args(fio.FioJob(f, "randread", bs, qd, 1, "psync" if qd == 1 else "io_uring", 0.05, runtime,
                                   f.stat().st_size, out))
    return fio.run_job(args, 60)


# --------------------------------------------------------------------------- fio parsing
def test_parser_on_real_fio_json_plus(tmp_path):
    f = _file(tmp_path)
    doc = _job(f, tmp_path / "a.json")
    row = fio.parse(doc, "randread")
    r = doc["jobs"][0]["read"]
    assert row["fio_bw_bytes"] == r["bw_bytes"] and row["throughput_mb_per_s"] == r["bw_bytes"] / 1e6
    assert row["iops"] == r["iops"] and row["total_ios"] > 0
    assert row["lat_us_mean"] == pytest.approx(r["lat_ns"]["mean"] / 1e3)
    assert row["iodepth_reached"] == "4" and row["iodepth_level_4_percent"] > 50
    # fio's own percentiles equal the rule applied to its own bins, exactly
    b = fio.bins(doc, "randread")
    assert sum(b.values()) == r["clat_ns"]["N"]
    ours = fio.percentiles_from_bins(b)
    theirs = {f"{float(k):g}": v for k, v in r["clat_ns"]["percentile"].items()}
    assert ours == {p: theirs[p] for p in fio.PERCENTILES}
    assert row["clat_us_p99"] == ours["99"] / 1e3
    # our bandwidth is fio's: bytes over fio's runtime
    assert row["io_bytes"] / (row["fio_runtime_ms"] / 1e3) == pytest.approx(r["bw_bytes"], rel=0.01)


def test_merged_bins_percentiles_equal_direct_computation(tmp_path):
    f = _file(tmp_path)
    many = [fio.bins(_job(f, tmp_path / f"{i}.json", qd=qd), "randread") for i, qd in enumerate((1, 8))]
    merged = fio.merge_bins(many)
    assert sum(merged.values()) == sum(sum(b.values()) for b in many)
    values = np.repeat(np.array(sorted(merged), dtype=np.int64), [merged[k] for k in sorted(merged)])
    for p, v in fio.percentiles_from_bins(merged).items():
        assert v == int(np.percentile(values, float(p), method="inverted_cdf")), p
    # not an average of percentiles: the merged p99 differs from the mean of the two runs' p99s
    per_run = [fio.percentiles_from_bins(b)["99"] for b in many]
    assert fio.percentiles_from_bins(merged)["99"] in set(merged)
    assert min(per_run) <= fio.percentiles_from_bins(merged)["99"] <= max(per_run)


def test_queue_depth_split():
    assert fio.split_queue_depth(32, 4, "io_uring") == (8, 4)
    assert fio.split_queue_depth(8, 1, "psync") == (1, 8)
    with pytest.raises(ValueError, match="multiple"):
        fio.split_queue_depth(6, 4, "libaio")


# --------------------------------------------------------------------------- busy load
def _group_alive(pgid: int) -> list[int]:
    return load._group_members(pgid)


@pytest.mark.skipif(load.tool_binary("stress-ng") is None, reason="stress-ng is not installed")
@pytest.mark.serial("compares the whole machine's CPU busy with and without its load")
def test_busy_load_raises_measured_cpu_and_is_gone_after_stop(tmp_path):
    a = load.cpu_times()
    time.sleep(0.8)
    idle = load.busy_percent(a, load.cpu_times())
    settings = {"mem_workers": 1, "rate_mb_per_s_per_worker": 500, "cpu_workers": load.ncpu(), "cpu_load": 90}
    ld = load.start("stress-ng", settings, 30, tmp_path)
    try:
        time.sleep(0.3)
        a = load.cpu_times()
        time.sleep(1.0)
        busy = load.busy_percent(a, load.cpu_times())
        assert ld.pids
    finally:
        ld.stop()
    got = load.measured(ld, 10_000)
    ld.cleanup_files()
    assert busy > idle + 30 and busy > 60, (idle, busy)
    assert got["load_memory_mb_per_s"] == pytest.approx(500, rel=0.3)
    assert got["load_cpu_percent"] > 40
    assert not _group_alive(ld.pgid) and ld.proc.returncode is not None


@pytest.mark.skipif(load.tool_binary("stress-ng") is None, reason="stress-ng is not installed")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_load_dies_with_its_parent(tmp_path, sig):
    """A process holding a load is ended by SIGTERM (the engine's handlers) or kill -9 (PDEATHSIG)."""
    script = ("import sys, time\nfrom storagebrief.core import cgroups\nfrom storagebrief.studies.transfer_sweep import load\n"
              "cgroups.install_handlers()\n"
              "ld = load.start('stress-ng', {'mem_workers': 1, 'rate_mb_per_s_per_worker': 200, 'cpu_workers': 1,"
              " 'cpu_load': 50}, 120, sys.argv[1])\n"
              "try:\n    time.sleep(0.5); print(ld.pgid, flush=True); time.sleep(120)\nfinally:\n    ld.stop()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    pgid = int(proc.stdout.readline())
    assert _group_alive(pgid)
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(pgid), "stressors outlived their parent"


# --------------------------------------------------------------------------- GPU path
def test_gpu_path_skipped_with_a_stated_reason(monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    monkeypatch.setattr(gpu.os.path, "exists", lambda p: False)
    info = gpu.detect()
    assert info["available"] is False and info["reason"].startswith("no CUDA GPU visible: GPU path not measured")


def test_gpu_path_ran_comes_from_kvikio_not_from_the_request(monkeypatch):
    """kvikio_report labels a read GDS only when kvikio says so (compat off, GDS available, above threshold)."""
    import types
    defaults = types.SimpleNamespace(is_compat_mode_preferred=lambda: False, gds_threshold=lambda: 1 << 20)
    driver = types.SimpleNamespace(properties=types.SimpleNamespace(is_gds_available=True))
    kv = types.ModuleType("kvikio")
    kv.defaults, kv.cufile_driver = defaults, driver
    monkeypatch.setitem(sys.modules, "kvikio", kv)
    monkeypatch.setitem(sys.modules, "kvikio.defaults", defaults)
    monkeypatch.setitem(sys.modules, "kvikio.cufile_driver", driver)
    assert gpu.kvikio_report(4 << 20)["gpu_path_ran"] == "gds"
    assert gpu.kvikio_report(4096)["gpu_path_ran"] == "legacy"     # below gds_threshold
    defaults.is_compat_mode_preferred = lambda: True
    assert gpu.kvikio_report(4 << 20)["gpu_path_ran"] == "legacy"
    defaults.is_compat_mode_preferred = lambda: False
    driver.properties.is_gds_available = False
    rep = gpu.kvikio_report(4 << 20)
    assert rep["gpu_path_ran"] == "legacy" and rep["kvikio_gds_available"] is False


# --------------------------------------------------------------------------- forecast
def test_forecast_arithmetic_on_synthetic_curves():
    # demand 100 MB/s, AU 90 %: each accelerator needs 90 MB/s; read_threads 2 -> QD 2N
    curve = {1: 100.0, 2: 190.0, 4: 350.0, 8: 400.0}
    r = forecast.accelerators_supported(curve, 100.0, 90.0, 2)
    # N=1: QD<=2 -> 190 >= 90; N=2: QD<=4 -> 350 >= 180; N=3: QD<=6 -> 350 >= 270; N=4: QD<=8 -> 400 >= 360;
    # N=5: 400 < 450
    assert r["accelerators_forecast"] == 4 and r["queue_depth_used"] == 8 and r["throughput_used_mb_per_s"] == 400
    assert forecast.accelerators_supported({1: 50.0}, 100.0, 90.0, 4)["accelerators_forecast"] == 0
    flat = forecast.accelerators_supported({1: 1000.0}, 100.0, 90.0, 1)
    assert flat["accelerators_forecast"] == 11 and flat["forecast_limited_by"].startswith("beyond")
    assert forecast.nearest_size([4096, 131072, 1048576], 500_000) == 1048576
    assert forecast.nearest_size([4096, 131072, 1048576], 200_000) == 131072


def test_forecast_uses_the_emulate_spec_and_puts_its_answer_beside(tmp_path):
    spec = {"format": "npz", "record_bytes": 500_000, "batch_size": 7, "batch_size_by_accelerator": {"v100": 4},
            "compute_s": {"v100": 0.04}, "read_threads": 4, "au_threshold_percent": 90.0}
    (tmp_path / "study.json").write_text(json.dumps({"accelerator_type": "v100",
                                                      "workloads": {"unet3d": {"spec": spec}}}))
    (tmp_path / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": [
        {"workload": "unet3d", "target": "a", "accelerators_supported": 3, "accelerators_supported_text": "3",
         "max_accelerators_tested": 4}]}))
    pd.DataFrame({"workload": ["unet3d"], "read_block_bytes": [1 << 20], "read_threads": [4]}).to_csv(
        tmp_path / "runs.csv", index=False)
    pts = pd.DataFrame({"target": "a", "load": "idle", "path": "cpu", "rw": "randread",
                        "block_size_bytes": [4096, 1 << 20, 1 << 20], "queue_depth": [1, 1, 8],
                        "throughput_mb_per_s_mean": [10.0, 120.0, 200.0]})
    fp = config.validate({"targets": [{"name": "a", "path": str(tmp_path / "t")}],
                          "transfer_sweep": {}}).section("transfer_sweep").forecast
    fc = forecast.forecast(pts, fp, forecast.emulate_context(tmp_path))
    row = fc.iloc[0]
    assert row.workload_spec_source == "emulate study.json" and row.request_bytes == 500_000
    assert row.demand_mb_per_s_per_accelerator == pytest.approx(4 * 0.5 / 0.04)     # 50 MB/s
    # 45 MB/s per accelerator at AU 90 %: N=1 QD<=4 -> 120; N=2 QD<=8 -> 200 (>= 90); N=4 -> 180 ok; N=5 225 > 200
    assert row.accelerators_forecast == 4 and row.emulated_accelerators_supported == 3
    assert row.forecast_minus_emulated == 1
    # a floor ("≥ 3": the search's budget ran out) is shown, never subtracted from
    (tmp_path / "mlperf_results.json").write_text(json.dumps({"accelerators_supported": [
        {"workload": "unet3d", "target": "a", "accelerators_supported": 3, "supported_limited_by": "budget",
         "accelerators_supported_text": "≥ 3 (search budget reached after 60 s)", "max_accelerators_tested": 4}]}))
    row = forecast.forecast(pts, fp, forecast.emulate_context(tmp_path)).iloc[0]
    assert row.emulated_supported_text.startswith("≥ 3") and pd.isna(row.forecast_minus_emulated)


def _fp(tmp_path):
    return config.validate({"targets": [{"name": "a", "path": str(tmp_path / "t")}],
                            "transfer_sweep": {}}).section("transfer_sweep").forecast


def _pts(target, load, mins, maxs):
    """1 MiB points at QD 1/8/32 with two repeats: the worse and the better one."""
    return pd.DataFrame({"target": target, "load": load, "path": "cpu", "rw": "randread",
                         "block_size_bytes": 1 << 20, "queue_depth": [1, 8, 32],
                         "throughput_mb_per_s_min": mins, "throughput_mb_per_s_max": maxs,
                         "throughput_mb_per_s_mean": [(a + b) / 2 for a, b in zip(mins, maxs)]})


def test_forecast_never_exceeds_the_profile_nor_takes_a_lucky_repeat(tmp_path):
    fp = _fp(tmp_path)
    spec = forecast.merged_spec("unet3d", {})
    need = spec.demand_bytes_per_s(fp.accelerator_type) / 1e6 * spec.au_threshold_percent / 100
    # hdd-emulated as measured: a short point overshoots its throttle (154 MB/s under a 150 cap); here the
    # overshoot would make 3 accelerators out of a cap that feeds 2
    cap = 2.5 * need
    pts = _pts("hdd", "idle", [1.2 * need, 3.1 * need, 3.1 * need], [1.3 * need, 3.2 * need, 3.2 * need])
    row = forecast.forecast(pts, fp, {}, {"hdd": {"read_mb_per_s": cap}}).iloc[0]
    assert row.profile_cap_mb_per_s == cap and row.throughput_used_mb_per_s == cap and row.capped_by_profile
    assert row.accelerators_forecast == 2
    assert forecast.forecast(pts, fp, {}, {}).iloc[0].accelerators_forecast == 3     # unthrottled: as measured
    # IOPS cap x transfer size binds when it is the smaller
    assert forecast.profile_cap_mb_per_s({"read_mb_per_s": 150.0, "read_iops": 100}, 1 << 20) == pytest.approx(104.8576)
    assert forecast.profile_cap_mb_per_s(None, 4096) is None
    # local 1M QD 1 read 672 and 1,624 MB/s: the mean (1,148) is no figure to forecast from; the worse repeat is
    noisy = _pts("local", "idle", [672.0, 672.0, 672.0], [1624.0, 1624.0, 1624.0])
    row = forecast.forecast(noisy, fp, {}, {}).iloc[0]
    assert row.curve_statistic == "worse repeat" and row.throughput_used_mb_per_s == 672.0
    assert row.repeat_spread_percent == pytest.approx((1624 - 672) / 1148 * 100)


def test_a_busy_system_never_forecasts_more_than_the_idle_one(tmp_path):
    fp = _fp(tmp_path)
    spec = forecast.merged_spec("unet3d", {})
    need = spec.demand_bytes_per_s(fp.accelerator_type) / 1e6 * spec.au_threshold_percent / 100
    # notebook 04 rerun: 2 accelerators when idle, 3 when busy
    pts = pd.concat([_pts("a", "idle", [1.2 * need, 2.1 * need, 2.1 * need], [1.3 * need, 2.2 * need, 2.2 * need]),
                     _pts("a", "busy", [1.2 * need, 3.1 * need, 3.1 * need], [1.3 * need, 3.2 * need, 3.2 * need])])
    fc = forecast.forecast(pts, fp, {}, {}).set_index("load")
    assert fc.loc["idle", "accelerators_forecast"] == 2
    assert fc.loc["busy", "accelerators_forecast"] == fc.loc["idle", "accelerators_forecast"]
    assert fc.loc["busy", "accelerators_forecast_uncapped"] > fc.loc["idle", "accelerators_forecast"]
    assert "capped at the idle forecast" in fc.loc["busy", "forecast_note"] and fc.loc["idle", "forecast_note"] == ""


# --------------------------------------------------------------------------- bad input
def _params(tmp_path: Path, **ts) -> dict:
    return {"targets": [{"name": "a", "path": str(tmp_path / "a")}], "transfer_sweep": ts}


@pytest.mark.parametrize("change, key, words", [
    ({"block_sizes": ["4k", 1000]}, "transfer_sweep.block_sizes", "multiples of 512"),
    ({"queue_depths": [0, 8]}, "transfer_sweep.queue_depths", "1..65536"),
    ({"runtime_s": 0}, "transfer_sweep.runtime_s", "greater than 0"),
    ({"engine": "spdk"}, "transfer_sweep.engine", "io_uring"),
    ({"queue_depths": [6], "numjobs": 4}, "transfer_sweep", "multiples of numjobs"),
    ({"forecast": {"workloads": ["nope"]}}, "transfer_sweep.forecast", "unknown workload"),
])
def test_bad_params_name_the_key(tmp_path, change, key, words):
    with pytest.raises(config.ParamsError) as exc:
        config.validate(_params(tmp_path, **change))
    assert key in str(exc.value) and words in str(exc.value)


def _cli(tmp_path: Path, *extra, ts: dict | None = None, env=None):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(_params(tmp_path, **(ts or {}))))
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "transfer-sweep", "--params", str(f), "--out",
                           str(tmp_path / "out"), "--progress", "off", *extra], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib"), **(env or {})}, timeout=300)


@pytest.mark.e2e
def test_missing_tools_and_no_space_are_refused_before_any_work(tmp_path):
    # PATH without fio / stress tools
    empty = tmp_path / "bin"
    empty.mkdir()
    res = _cli(tmp_path, env={"PATH": str(empty)})
    assert res.returncode == 2 and "transfer_sweep.engine" in res.stderr and "fio is not installed" in res.stderr
    if load.tool_binary("stressapptest") is None:
        res = _cli(tmp_path, "-S", "transfer_sweep.busy.tool=stressapptest")
        assert res.returncode == 2 and "transfer_sweep.busy.tool" in res.stderr
    res = _cli(tmp_path, "-S", "transfer_sweep.file_mib=16000000")
    assert res.returncode == 2 and "file_mib" in res.stderr and "free" in res.stderr
    assert not (tmp_path / "out" / "runs.csv").exists()
    assert not list((tmp_path / "a").rglob("*.bin"))


def test_check_tools_names_the_engine_this_fio_lacks(monkeypatch):
    p = config.validate(_params(Path("/tmp"), engine="libaio")).section("transfer_sweep")
    monkeypatch.setattr(fio, "engines", lambda binary=None: ["psync", "io_uring"])
    with pytest.raises(config.ParamsError, match=r"transfer_sweep.engine = 'libaio'.*fio --enghelp"):
        ts_run._check_tools(p)


# --------------------------------------------------------------------------- end to end
TINY = {"block_sizes": ["4k", "64k"], "queue_depths": [1, 4], "repeats": 2, "file_mib": 8, "runtime_s": 0.3,
        "ramp_time_s": 0.05, "busy": {"peak_seconds": 0.5, "calibrate_seconds": 0.5, "settle_s": 0.1},
        "forecast": {"emulate_dir": "/nonexistent"}}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ts")
    res = _cli(tmp, ts=TINY)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp / "out"


@pytest.mark.slow
@pytest.mark.e2e
def test_tiny_run_outputs(tiny_run):
    runs = pd.read_csv(tiny_run / "runs.csv")
    assert len(runs) == 2 * 2 * 2 * 2 and set(runs.load) == {"idle", "busy"}
    for r in runs.itertuples():
        doc = json.loads((tiny_run / r.fio_json).read_text())
        assert fio.parse(doc, r.rw)["fio_bw_bytes"] == r.fio_bw_bytes      # we only parse
    busy = runs[runs.load == "busy"]
    notes = json.loads((tiny_run / "notes.json").read_text())["warnings"]
    # a load that reported no memory rate (once, in a loaded full run) is named in the notes, never left silent
    unmeasured = busy[busy.load_memory_mb_per_s.isna()]
    assert len(unmeasured) <= 1 and all(any(f"{r}: the busy load reported no memory rate" in n for n in notes)
                                        for r in unmeasured.run_id)
    assert busy.load_memory_mb_per_s.dropna().gt(0).all() and busy.load_cpu_percent.gt(0).all()
    assert busy.cpu_busy_percent.mean() > runs[runs.load == "idle"].cpu_busy_percent.mean()
    pts = pd.read_csv(tiny_run / "points.csv")
    assert len(pts) == 2 * 2 * 2 and (pts.repeats == 2).all() and pts.clat_us_p99_merged.notna().all()
    fc = pd.read_csv(tiny_run / "forecast.csv")
    assert set(fc.load) == {"idle", "busy"} and fc.accelerators_forecast.ge(0).all()
    if not gpu.detect()["available"]:
        assert any(n.startswith("no CUDA GPU visible: GPU path not measured") for n in notes)
    hs = metrics.headlines(runs, ["a"])
    assert {h["id"] for h in hs} == {"throughput_mb_per_s:a|idle_vs_busy", "clat_us_p99:a|idle_vs_busy"}
    assert all(h["spread_percent"] is not None for h in hs)


@pytest.mark.slow
@pytest.mark.e2e
def test_direct_io_points_evict_only_their_file(tiny_run):
    """fio reads with O_DIRECT, so a point needs only its file's pages gone: no whole-system drop_caches
    (which cost every point of the quick study time and evicted every other process's code)."""
    runs = pd.read_csv(tiny_run / "runs.csv")
    cpu = runs[runs.path == "cpu"]
    assert len(cpu) == len(runs) > 0
    assert cpu.cache_method.str.startswith("fadvise_dontneed (the point's file").all(), set(cpu.cache_method)


@pytest.mark.slow
@pytest.mark.e2e
def test_tiny_run_declares_every_column(tiny_run):
    """Every runs.csv column is declared (engine, monitor or the study's COLUMNS), and the brief's
    required columns are among the study's."""
    runs = pd.read_csv(tiny_run / "runs.csv")
    assert columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS) == []
    assert set(metrics.RUNS_COLUMNS) <= {c.name for c in metrics.COLUMNS}
    schema = json.loads((tiny_run / columns.SCHEMA_FILE).read_text())
    assert {c["name"] for c in schema["columns"] if c["source"] == "study"} == {c.name for c in metrics.COLUMNS}


@pytest.mark.privileged      # an emulated target: its throttle cgroup
@pytest.mark.e2e
@pytest.mark.serial("finds its busy point's stressors by name among every process")
@pytest.mark.skipif(load.tool_binary("stress-ng") is None, reason="stress-ng is not installed")
def test_sigterm_during_a_busy_point_leaves_no_row_stressor_or_cgroup(tmp_path):
    f = tmp_path / "params.yaml"
    data = {"targets": [{"name": "a", "path": str(tmp_path / "a")},
                        {"name": "slow", "path": str(tmp_path / "s"), "profile": "hdd_7200"}],
            "transfer_sweep": {**TINY, "loads": ["busy"], "runtime_s": 3, "repeats": 1}}
    f.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "transfer-sweep", "--params", str(f), "--out",
                             str(tmp_path / "out"), "--progress", "off"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    deadline = time.monotonic() + 120
    stressors: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        found = subprocess.run(["pgrep", "-f", f"stress-ng --timeout"], capture_output=True, text=True).stdout.split()
        fios = subprocess.run(["pgrep", "-P", str(proc.pid), "fio"], capture_output=True, text=True).stdout.split()
        if found and fios:
            stressors = [int(p) for p in found]
            break
        time.sleep(0.05)
    assert stressors, "never caught a busy point running"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    time.sleep(0.5)
    assert not [p for p in stressors if process_alive(p)], "stressors outlived the run"
    assert not [d for parent in leftovers._all_controller_dirs() for d in parent.glob(f"storagebrief-*-{proc.pid}-*")]
    out_dir = tmp_path / "out"
    done = set(pd.read_csv(out_dir / "runs.csv").run_id) if (out_dir / "runs.csv").exists() and \
        (out_dir / "runs.csv").stat().st_size > 1 and len((out_dir / "runs.csv").read_text().splitlines()) > 1 else set()
    jsons = {f.stem for f in (out_dir / "fio").glob("*.json")}
    # no row for the interrupted run; its JSON is renamed in only when fio finished (a signal landing between
    # that rename and the engine's row can leave one JSON without a row)
    assert done <= jsons and len(jsons - done) <= 1
    assert not list((out_dir / "fio").glob(".*tmp"))


def test_the_peak_window_doubles_when_stress_ng_finished_no_loop_yet(tmp_path, monkeypatch):
    """memrate reports nothing for a window shorter than its first loop (CI at 0.5 s on a slow machine)."""
    windows = []

    def peak(seconds, n, tool, tmp_dir):
        windows.append(seconds)
        return 1234.0 if len(windows) == 3 else None

    monkeypatch.setattr(load, "_stress_ng_peak", peak)
    got = load.measure_peak("stress-ng", 0.5, tmp_path)
    assert windows == [0.5, 1.0, 2.0] and got["peak_memory_mb_per_s"] == 1234.0
    assert got["peak_method"].endswith(", 2 s")
    monkeypatch.setattr(load, "_stress_ng_peak", lambda *a: None)
    with pytest.raises(load.LoadError, match="no memory bandwidth"):
        load.measure_peak("stress-ng", 0.5, tmp_path)
