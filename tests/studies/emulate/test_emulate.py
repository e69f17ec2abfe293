"""Emulated-accelerator training study: parameters, arithmetic, loader, fidelity, faults (AU definition and
what limited a run: test_emulate_au.py)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest
import yaml

from storagebrief.core import cgroup_tree, cgroups, columns, config, results, targets as targets_mod, workloads
from storagebrief.formats import tfrecord
from storagebrief.studies.emulate import STUDY, dataset, metrics, params as emulate_params, plan as emulate_plan, run as emulate_run
from storagebrief.studies.emulate.loader import Loader, batch_plan, epoch_files, steps_per_epoch
from conftest import REPO, cli_run as _cli


def _root_blkio_memory() -> str | None:
    """Why privileged tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (cgroup blkio throttle and memory cap)"
    caps = cgroup_tree.capabilities()
    for c in ("memory", "blkio"):
        if caps[c].startswith("unavailable") or "not writable" in caps[c]:
            return f"cgroup {c}: {caps[c]}"
    return None


def params_dict(tmp_path: Path, emulate_section: dict, targets: list[dict] | None = None,
                profiles: dict | None = None, cold_cache: bool = True) -> dict:
    return {
        "targets": targets or [{"name": "fast", "path": str(tmp_path / "fast")}],
        "profiles": profiles or {},
        "run": {"cold_cache": cold_cache, "monitor_interval_s": 0.1},
        "emulate": emulate_section,
    }


SMALL = {  # tiny unet3d-like workload
    "workloads": ["unet3d"], "accelerator_type": "v100",
    "workload_overrides": {"unet3d": {"record_bytes": 131072, "record_bytes_stdev": 30000,
                                      "batch_size_by_accelerator": {"v100": 2}, "compute_s": {"v100": 0.02}}},
    "num_files": 48, "dataset_sizing": "fixed", "epochs": 2, "repeats": 1, "accelerators": [1, 2],
    "read_threads": 2, "prefetch": 1, "read_block_kib": 64,
}


# --------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("change, message", [
    ({"workloads": ["unet4d"]}, "unknown workload"),
    ({"accelerators": [0, 2]}, "accelerator counts must be whole numbers 1..1024"),
    ({"workload_overrides": {"unet3d": {"compute_s": {"v100": 0}}}}, "compute time per batch must be > 0"),
    ({"workload_overrides": {"unet3d": {"compute_s": {"v100": -1.0}}}}, "must be > 0"),
    ({"workloads": ["cosmoflow"]}, "no compute time for accelerator_type 'v100'"),
    ({"num_files": 2, "accelerators": [1, 4]}, "fewer than one batch"),
    ({"dataset_sizing": "memory_cap", "memory_limit_mib": 64}, "smaller than 5 x memory_limit_mib"),
    ({"dataset_sizing": "fixed", "num_files": None}, "needs num_files"),
    ({"workload_overrides": {"unet3d": {"recordbytes": 5}}}, r"recordbytes: unknown key \(did you mean 'record_bytes'\?\)"),
    ({"checkpoint_every_steps": 5}, "checkpoints need both"),
    ({"read_block_kib": 6}, "multiple of 4"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_params_fail_before_work(tmp_path, change, message):
    section = {**SMALL, **change}
    with pytest.raises(config.ParamsError, match=message):
        config.validate(params_dict(tmp_path, section))
    assert not (tmp_path / "fast").exists()   # nothing was written


def test_workload_catalogue_and_custom_workload(tmp_path):
    p = config.validate(params_dict(tmp_path, {
        **SMALL, "workloads": ["unet3d", "mine"],
        "workload_overrides": {**SMALL["workload_overrides"],
                               "mine": {"format": "tfrecord", "samples_per_file": 4, "record_bytes": 1000,
                                        "batch_size": 2, "compute_s": {"v100": 0.5}, "au_threshold_percent": 70}}}))
    s = p.section("emulate")
    assert s.spec("mine").au_threshold_percent == 70
    ref = emulate_params.WorkloadSpec.model_validate(emulate_params.WORKLOADS["unet3d"])
    assert ref.record_bytes == 146_600_628 and ref.batch_for("v100") == 4 and ref.batch_for("a100") == 7
    assert emulate_params.WORKLOADS["cosmoflow"]["au_threshold_percent"] == 70
    assert s.spec("unet3d").compute_s == {"v100": 0.02, "a100": 0.636, "h100": 0.323, "b200": 0.162}   # merged
    # MLPerf Storage v3.0: retinanet (JPEG, one sample per file, 85 % AU) and the b200 times; every
    # accelerator's numbers name their source.
    retina = emulate_params.WorkloadSpec.model_validate(emulate_params.WORKLOADS["retinanet"])
    assert (retina.format, retina.samples_per_file, retina.au_threshold_percent) == ("jpeg", 1, 85.0)
    assert retina.compute_s == {"b200": 0.04755, "mi355": 0.0634} and retina.batch_for("b200") == 24
    assert retina.demand_bytes_per_s("b200") == pytest.approx(24 * 322_957 / 0.04755)
    for name, spec in emulate_params.WORKLOADS.items():
        assert set(workloads.SOURCES[name]) == set(spec["compute_s"]), name
    with pytest.raises(config.ParamsError, match="no compute time for accelerator_type 'v100'.*b200"):
        config.validate(params_dict(tmp_path, {**SMALL, "workloads": ["retinanet"]}))


def test_jpeg_dataset_is_real_images_near_the_record_size(tmp_path):
    spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS["retinanet"], "record_bytes": 20_000,
                                                      "record_bytes_stdev": 4_000})
    data = dataset.generate_dataset(tmp_path / "d", "retinanet", spec, 6, seed=1, log=lambda *_: None)
    sizes = []
    for f, spans in zip(data["files"], data["spans"]):
        raw = Path(f).read_bytes()
        assert spans == [[0, len(raw)]] and raw[:2] == b"\xff\xd8" and raw[-2:] == b"\xff\xd9"
        img = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
        assert img is not None and img.ndim == 3
        sizes.append(len(raw))
    want = dataset.sample_sizes(spec, 6, 1)[:, 0]
    assert np.allclose(sizes, want, rtol=0.06), (sizes, want)


def test_config_override_rejects_zero_accelerators(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params_dict(tmp_path, SMALL)))
    with pytest.raises(config.ParamsError, match="emulate.accelerators"):
        config.load(f, ["emulate.accelerators=[0]"])


def test_dataset_that_does_not_fit_is_refused_before_work(tmp_path):
    p = config.validate(params_dict(tmp_path, {
        **SMALL, "dataset_sizing": "fixed", "num_files": 4000,
        "workload_overrides": {"unet3d": {"record_bytes": 10**11, "compute_s": {"v100": 1.0}}}}))
    with pytest.raises(ValueError, match="GB is free"):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None)
    # The engine makes the target folder itself (and its lock file) before prepare; no dataset was written.
    assert not (tmp_path / "fast" / "storagebrief").exists() and not (tmp_path / "out" / "runs.csv").exists()


# --------------------------------------------------------------------------- arithmetic
def test_latency_stats_histogram_and_throttle_bound():
    lat = np.array([1e-4] * 90 + [1e-3] * 9 + [1e-1])
    st = metrics.latency_stats(lat)
    assert st["read_latency_us_p50"] == pytest.approx(100.0)
    assert st["read_latency_us_max"] == pytest.approx(1e5)
    assert st["read_latency_us_mean"] == pytest.approx((90 * 100 + 9 * 1000 + 1e5) / 100)
    hist = metrics.latency_histogram(lat)
    assert sum(h["count"] for h in hist) == 100
    assert all(h["bin_lo_us"] < h["bin_hi_us"] for h in hist)
    prof = targets_mod.DeviceProfile(read_mb_per_s=150, read_iops=150)
    assert metrics.throttle_cap_mb_per_s(prof, 524288) == pytest.approx(150 * 0.524288)
    assert metrics.throttle_cap_mb_per_s(prof, 4 << 20) == 150
    assert metrics.throttle_au_bound(150, 4, 75) == pytest.approx(50.0)
    assert metrics.throttle_au_bound(150, 1, 75) == 100.0


def test_schedule_shuffles_per_epoch_and_partitions_files():
    parts = [epoch_files(10, 3, r, 0, seed=1) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    again = epoch_files(10, 3, 0, 0, seed=1)
    assert np.array_equal(parts[0], again)
    assert not np.array_equal(epoch_files(10, 1, 0, 0, 1), epoch_files(10, 1, 0, 1, 1))
    assert steps_per_epoch(10, 1, 3, 2) == 1          # 3 files each, batch 2, drop last
    assert steps_per_epoch(10, 1251, 3, 400) == 9      # samples from multi-sample files
    spans = [[(0, 100)] for _ in range(10)]
    plan = batch_plan(spans, 10, 3, 0, epochs=2, seed=1, batch=2, steps=1)
    assert len(plan) == 2 and all(len(b) == 2 for b in plan)


# --------------------------------------------------------------------------- dataset and loader
def test_generated_npz_and_tfrecord_are_real(tmp_path):
    spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS["unet3d"], "record_bytes": 50_000,
                                                       "record_bytes_stdev": 10_000})
    data = dataset.generate_dataset(tmp_path / "npz", "unet3d", spec, 6, seed=3, log=lambda *_: None)
    arrays = [np.load(f)["x"] for f in data["files"]]
    sizes = dataset.sample_sizes(spec, 6, 3)[:, 0]
    assert [a.size for a in arrays] == sizes.tolist()
    assert len({a[:64].tobytes() for a in arrays}) == 6     # random content, not zeros
    mtime = Path(data["files"][0]).stat().st_mtime_ns
    again = dataset.generate_dataset(tmp_path / "npz", "unet3d", spec, 6, seed=3, log=lambda *_: None)
    assert again["files"] == data["files"] and Path(data["files"][0]).stat().st_mtime_ns == mtime
    tf_spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS["resnet50"], "record_bytes": 1000,
                                                          "samples_per_file": 5})
    tfd = dataset.generate_dataset(tmp_path / "tfr", "resnet50", tf_spec, 2, seed=0, log=lambda *_: None)
    raw = Path(tfd["files"][0]).read_bytes()
    pos, frames = 0, 0
    while pos < len(raw):
        (length,) = struct.unpack("<Q", raw[pos:pos + 8])
        assert struct.unpack("<I", raw[pos + 8:pos + 12])[0] == tfrecord.masked_crc(raw[pos:pos + 8])
        assert [pos, length + 16] == tfd["spans"][0][frames]
        pos += length + 16
        frames += 1
    assert frames == 5 and length == 1000


def test_masked_crc32c_known_value():
    # CRC-32C("123456789") = 0xE3069283; TFRecord masks it.
    crc = 0xE3069283
    assert tfrecord.masked_crc(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
def test_generated_tfrecords_read_back_with_tensorflow_crc_checks(tmp_path):
    """tf.data checks the length CRC and the data CRC of every frame: each generated file reads back whole."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    shapes = {"resnet50": {"record_bytes": 3000, "samples_per_file": 7},          # many samples per file
              "cosmoflow": {"record_bytes": 20_000, "record_bytes_stdev": 5000}}  # one per file, sizes vary
    for name, change in shapes.items():
        spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS[name], **change})
        data = dataset.generate_dataset(tmp_path / name, name, spec, 4, seed=1, log=lambda *_: None)
        sizes = dataset.sample_sizes(spec, 4, 1)
        assert sum(1 for _ in tf.data.TFRecordDataset(data["files"])) == sizes.size
        for i, f in enumerate(data["files"]):
            raw = Path(f).read_bytes()
            records = [r.numpy() for r in tf.data.TFRecordDataset(f)]
            assert [len(r) for r in records] == sizes[i].tolist()
            for payload, (offset, length) in zip(records, data["spans"][i]):
                assert raw[offset + 12:offset + length - 4] == payload
                (data_crc,) = struct.unpack("<I", raw[offset + length - 4:offset + length])
                assert data_crc == tfrecord.masked_crc(payload) != 0


def test_tfrecord_dataset_of_format_version_1_is_regenerated(tmp_path):
    """Version 1 wrote a data CRC of 0, which tf.data rejects: such a dataset is not reused."""
    spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS["cosmoflow"], "record_bytes": 5000,
                                                       "record_bytes_stdev": 0})
    data = dataset.generate_dataset(tmp_path / "d", "cosmoflow", spec, 2, seed=0, log=lambda *_: None)
    manifest = tmp_path / "d" / "manifest.json"
    old = json.loads(manifest.read_text())
    assert old["spec"]["version"] == 2
    old["spec"]["version"] = 1
    manifest.write_text(json.dumps(old))
    said = []
    again = dataset.generate_dataset(tmp_path / "d", "cosmoflow", spec, 2, seed=0, log=said.append)
    assert again["files"] == data["files"] and len(said) == 1 and said[0].startswith("generated 2 tfrecord files")
    assert json.loads(manifest.read_text())["spec"]["version"] == 2


@pytest.mark.parametrize("odirect", [False, True])
def test_loader_reads_every_byte_and_times_each_read(tmp_path, odirect):
    spec = emulate_params.WorkloadSpec.model_validate({**emulate_params.WORKLOADS["unet3d"], "record_bytes": 100_000,
                                                       "record_bytes_stdev": 20_000})
    data = dataset.generate_dataset(tmp_path / "d", "unet3d", spec, 8, seed=0, log=lambda *_: None)
    batches = batch_plan(data["spans"], 8, 1, 0, epochs=1, seed=0, batch=2, steps=4)
    loader = Loader(data["files"], batches, threads=2, prefetch=1, block=32768, odirect=odirect)
    loader.start()
    got = sum(loader.next() for _ in batches)
    loader.close()
    sizes = [os.path.getsize(f) for f in data["files"]]
    if odirect:
        assert got >= sum(sizes) - 8 * 4096 and got <= sum(sizes)
    else:
        assert got == sum(sizes)
        assert len(loader.read_latencies()) == sum(-(-s // 32768) for s in sizes)
    lat = loader.read_latencies()
    assert lat.size > 0 and (lat > 0).all()


# --------------------------------------------------------------------------- fidelity
@pytest.fixture(scope="module")
def fast_study(tmp_path_factory):
    """Two unthrottled targets, data in page cache: storage is not the limit."""
    tmp = tmp_path_factory.mktemp("emu_fast")
    p = config.validate(params_dict(tmp, SMALL, targets=[{"name": "fast", "path": str(tmp / "fast")},
                                                         {"name": "also-fast", "path": str(tmp / "fast2")}],
                                    cold_cache=False))
    out = tmp / "out"
    frame = STUDY.run(p, out, log=lambda *_: None)
    return p, out, frame


@pytest.mark.e2e
def test_fast_target_au_close_to_100(fast_study):
    _, out, full = fast_study
    frame = emulate_plan.measured(full)
    assert len(frame) == 4 and set(frame.accelerators) == {1, 2}
    for c in results.COMMON_COLUMNS:
        assert c in frame and frame[c].notna().all()
    # Emulator overhead must not look like storage slowness (generous: 2 shared cores).
    # (a run below that on this shared machine must say the client took it: the storage here is page cache)
    low = frame[frame.au_percent < 95.0]
    assert (low.limited_by == "client").all(), low[["target", "accelerators", "au_percent", "limited_by_reason"]]
    assert (frame.loader_bytes > 0).all()
    assert (frame.reads > 0).all()
    for col in ("read_latency_us_mean", "read_latency_us_p50", "read_latency_us_p90", "read_latency_us_p99",
                "read_latency_us_max"):
        assert frame[col].gt(0).all()
    assert (frame.read_latency_us_p50 <= frame.read_latency_us_p99).all()
    assert (frame.read_latency_us_p99 <= frame.read_latency_us_max).all()
    if frame.cgroup_read_bytes.notna().all():   # the data really came from the page cache
        assert (frame.cgroup_read_bytes <= 0.1 * frame.loader_bytes).all()
    # samples/s agrees with the steps actually taken
    assert (frame.samples == frame.accelerators * frame.batch_size * frame.steps).all()
    # "none" exactly when AU is within 3 points of its bound (100 %), else a cause with its evidence.
    assert ((frame.au_percent >= 97) == (frame.limited_by == "none")).all(), frame[["au_percent", "limited_by"]]
    assert frame.limited_by.isin(["none", "client", "storage", "unexplained"]).all()
    assert frame.limited_by_reason.str.len().gt(0).all()
    assert (frame.client_cpu_s > 0).all() and frame.client_cpu_s_per_gb.gt(0).all()


@pytest.mark.e2e
def test_outputs_layout(fast_study):
    _, out, frame = fast_study
    acc = pd.read_csv(out / "accelerators.csv")
    assert acc.groupby("run_id").size().to_dict() == dict(zip(frame.run_id, frame.accelerators))
    hist = pd.read_csv(out / "latency_histograms.csv")
    assert hist.groupby("run_id")["count"].sum().to_dict() == dict(zip(frame.run_id, frame.reads))
    for rid in frame.run_id:
        assert (out / "timeseries" / f"{rid}.csv").exists()
    assert json.loads((out / "notes.json").read_text())["warnings"] is not None
    inv = json.loads((out / "inventory.json").read_text())
    assert [t["name"] for t in inv["targets"]] == ["fast", "also-fast"]
    ml = json.loads((out / "mlperf_results.json").read_text())
    assert {r["num_accelerators"] for r in ml["results"]} == {1, 2}
    r0 = ml["results"][0]
    g = frame[(frame.target == r0["target"]) & (frame.accelerators == r0["num_accelerators"])]
    assert r0["train_au_mean_percentage"] == pytest.approx(g.au_percent.mean())
    assert r0["train_io_mean_MiB_per_second"] == pytest.approx(g.loader_read_mib_per_s.mean())
    m = json.loads((out / "metrics.json").read_text())
    # 2 where both counts kept AU up (page cache, no profile); on a machine loaded by other work the 2-accelerator
    # run can miss AU with the client named as the limit (the suite saw it once): the answer then says so
    # (or its AU window too short to be a measurement: not answered at this scale)
    # judged on the sweep's own rows: a confined re-run of the client check (CI saw one at 89 %) is not scored
    scored = emulate_plan.measured(frame)
    fast = scored[scored.target == "fast"].set_index("accelerators")
    got, fails = m["unet3d"]["fast"]["accelerators_supported"], fast[~fast.au_pass]
    why = fast[["au_percent", "limited_by", "limited_by_reason"]]
    if fails.empty:
        assert got == 2, why
    elif fails.loc[fails.index.min()].limited_by == "client":
        assert got == f"client-limited at {fails.index.min()}", why
    else:
        assert fails.loc[fails.index.min()].limited_by == "unmeasured", why
        assert str(got).startswith("not answered at this scale"), (got, why)
    assert results.read_runs(out / "runs.csv").shape[0] == len(frame)


@pytest.mark.e2e
def test_runs_csv_holds_only_declared_columns(fast_study):
    _, out, _ = fast_study
    frame = pd.read_csv(out / "runs.csv")
    assert columns.undeclared(frame.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, metrics.COLUMNS) == []


@pytest.mark.e2e
def test_headlines_and_brief_section(fast_study):
    pytest.importorskip("IPython")
    pytest.importorskip("seaborn")
    from storagebrief import brief

    _, out, full = fast_study
    frame = emulate_plan.measured(full)
    hs = metrics.headlines(full, ["fast", "also-fast"])      # the client check's rows are left out by itself
    assert [h["metric"] for h in hs] == [m for m, _, _ in metrics.headline_metrics(frame)]
    drive = {m for m, _, _ in metrics.headline_metrics(frame)[3:5]}
    assert all(h["delta_percent"] is not None for h in hs if h["metric"] not in drive)
    tt = hs[0]
    means = frame.groupby(["accelerators", "target"]).total_time_s.mean().unstack()
    expect = ((1 - means["fast"] / means["also-fast"]) * 100).max()
    assert tt["delta_percent"] == pytest.approx(round(expect, 1))
    sup = metrics.supported(frame)
    # every count passes, or the client (a busy shared machine) failed one and the storage earned no number there
    assert all((txt.startswith("client-limited") if pd.isna(n) else n == 2)       # NA: pandas' missing count
               for n, txt in zip(sup.accelerators_supported, sup.accelerators_supported_text)), sup.to_string()
    ds = metrics.days_saved_table(frame, "fast", "also-fast", "unet3d")
    # seconds-long runs: the time comparison stands, the per-year extrapolation is left off and says why
    assert len(ds) == 2 and "fast faster %" in ds and not [c for c in ds if c.endswith(metrics.PER_YEAR)]
    assert "need runs of at least 60 s" in metrics.extrapolation_refused(frame, "unet3d")
    steady = frame.assign(total_time_s=frame.total_time_s * 1000, epochs=2)     # as if long enough
    ds = metrics.days_saved_table(steady, "fast", "also-fast", "unet3d")
    assert metrics.extrapolation_refused(steady, "unet3d") is None
    assert np.allclose(ds["Days saved / year"], 365 * ds["fast faster %"] / 100)
    brief.study_section("emulate", out)   # renders tables and figures without error


@pytest.mark.privileged
@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(_root_blkio_memory() is not None, reason=str(_root_blkio_memory()))
def test_throttled_target_au_follows_demand_over_cap(tmp_path):
    """Each accelerator demands batch x record / compute; AU ~ cap / (N x demand) once that exceeds 100 %."""
    cap = 40.0                                    # MB/s, bandwidth only (no IOPS cap: clean arithmetic)
    section = {**SMALL, "dataset_sizing": "memory_cap", "memory_limit_mib": 16, "num_files": 360,
               "epochs": 2, "accelerators": [1, 3],
               "workload_overrides": {"unet3d": {"record_bytes": 262144, "record_bytes_stdev": 0,
                                                 "batch_size_by_accelerator": {"v100": 2},
                                                 "compute_s": {"v100": 0.02}}}}
    p = config.validate(params_dict(tmp_path, section,
                                    targets=[{"name": "slow", "path": str(tmp_path / "slow"), "profile": "cap40"}],
                                    profiles={"cap40": {"read_mb_per_s": cap}}))
    frame = emulate_plan.measured(STUDY.run(p, tmp_path / "out", log=lambda *_: None))
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == []
    demand = frame.demand_mb_per_s_per_accelerator.iloc[0]
    assert demand == pytest.approx(2 * (262144 + 250) / 0.02 / 1e6, rel=0.01)   # npz header ~250 B
    one, three = frame.set_index("accelerators").loc[1], frame.set_index("accelerators").loc[3]
    assert bool(one.emulated) and one.dataset_sizing == "memory_cap"
    assert one.au_percent >= 90.0                              # 26 MB/s demand < 40 MB/s cap
    expected = 100 * cap / (3 * demand)                        # ~51 %
    assert three.throttle_au_bound_percent == pytest.approx(expected, rel=1e-6)
    # AU over the steady-state window (warm-up and final drain left out) follows the bound.
    assert expected - 8 <= three.au_percent <= expected + 15, (three.au_percent, expected)
    assert three.limited_by == "storage", three.limited_by_reason
    assert (one.au_percent >= 97) == (one.limited_by == "none"), one.limited_by_reason   # none only near 100 %
    assert three.loader_read_mb_per_s <= cap * 1.15            # the throttle held
    # The page-cache cap kept reads on the device: device bytes ~ loader bytes.
    assert 0.9 <= three.device_bytes_per_loader_byte <= 1.3


# --------------------------------------------------------------------------- faults
@pytest.mark.parametrize("fault, message", [
    ({"fail_rank": 1, "fail_at_step": 3}, "accelerator 1 died: exited with status 3"),
    ({"fail_rank": 0, "fail_at_step": None}, "injected failure before the first step"),
])
@pytest.mark.e2e
def test_dead_worker_fails_run_cleans_up_and_leaves_no_row(tmp_path, monkeypatch, fault, message):
    section = {**SMALL, "accelerators": [2]}
    targets = [{"name": "fast", "path": str(tmp_path / "fast")}]
    profiles = {}
    if _root_blkio_memory() is None:   # with a cgroup, check it is removed too
        targets = [{"name": "slow", "path": str(tmp_path / "slow"), "profile": "cap"}]
        profiles = {"cap": {"read_mb_per_s": 500}}
    p = config.validate(params_dict(tmp_path, section, targets=targets, profiles=profiles, cold_cache=False))
    monkeypatch.setattr(emulate_run, "FAULT", fault)   # the run module's test hook
    with pytest.raises(RuntimeError, match=message):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None)
    assert mp.active_children() == []
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == []
    assert not (tmp_path / "out" / "runs.csv").exists()


def _descendants_alive(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    state = [l for l in (d / "status").read_text().splitlines() if l.startswith("State:")]
                    if state and "Z" not in state[0]:
                        pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupt_cleans_up_processes_and_cgroups(tmp_path, sig):
    section = {**SMALL, "accelerators": [3], "epochs": 50,
               "workload_overrides": {"unet3d": {"record_bytes": 131072, "record_bytes_stdev": 0,
                                                 "compute_s": {"v100": 0.05}}}}
    targets = [{"name": "slow", "path": str(tmp_path / "slow"), "profile": "cap"}]
    pf = tmp_path / "params.yaml"
    pf.write_text(yaml.safe_dump(params_dict(tmp_path, section, targets=targets,
                                             profiles={"cap": {"read_mb_per_s": 200}}, cold_cache=False)))
    out = tmp_path / f"out-{sig.name}"
    code = "import sys; from storagebrief.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "emulate", "--params", str(pf), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marker = str(out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # wait for the accelerators to be running
        if len(_descendants_alive(marker)) >= 4 or proc.poll() is not None:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read()
    time.sleep(1.0)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the study did not stop within 30 s of the signal")
    assert proc.returncode != 0
    deadline = time.monotonic() + 10
    while _descendants_alive(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _descendants_alive(marker) == []
    assert cgroups.leftover_dirs(owner_pid=proc.pid) == []
    assert not (out / "runs.csv").exists()


def test_notebook_is_thin_and_parameterised():
    jupytext = pytest.importorskip("jupytext")
    nb = jupytext.read(REPO / "notebooks" / "02_emulated_training.py")
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "emulate = {" in tagged[0].source and "out_dir = None" in tagged[0].source
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert 'notebook.run_study("emulate", emulate' in code
    assert 'brief.study_section("emulate", runs.attrs["out_dir"])' in code


# --------------------------------------------------------------------------- an override's name is a name (issue 36)
def test_a_workload_override_named_like_a_path_is_refused(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                                 "emulate": {"workloads": ["unet3d"],
                                             "workload_overrides": {"../../victim": {"base": "unet3d"}}}}))
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and "a name used in file paths" in res.stderr, res.stderr
