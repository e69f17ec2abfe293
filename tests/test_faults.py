"""Faults and safety (issue 10): hostile targets, concurrent runs, signals, bad images, honest files.

Study-independent guarantees live in the engine (core.sweep, core.lock, core.cgroups,
core.targets); the study-specific ones tested here are the preprocess pipeline's.
"""
from __future__ import annotations

import io
import json
import os
import re
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

from storagebrief.cli import main as cli_main
from storagebrief.core import cgroups, config, leftovers, lock, results, targets
from storagebrief.report import brief as brief_mod
from storagebrief.studies.preprocess import STUDY, dataset, pipeline
from conftest import process_alive, REPO, base_params, needs_blkio

ROOT = os.geteuid() == 0
TF_NATIVE_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} )")
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (mounts, cgroups)")


def _write_params(tmp_path: Path, **preprocess) -> Path:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(base_params(tmp_path, **preprocess)))
    return f


def _cli(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "storagebrief.cli", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}, **kw)


# --------------------------------------------------------------------------- hostile targets
def test_symlink_into_a_system_directory_is_refused(tmp_path):
    (tmp_path / "etc-link").symlink_to("/etc")
    (tmp_path / "root-link").symlink_to("/")
    for link in ("etc-link", "root-link", "etc-link/sub"):
        with pytest.raises(ValueError, match="symlink"):
            targets.check_target_path(str(tmp_path / link))
    f = _write_params(tmp_path)
    assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={tmp_path / 'etc-link'}"]) == 2


def test_file_target_missing_parent_and_root_folder_are_refused_by_validate(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    f = _write_params(tmp_path)
    cases = {str(tmp_path / "a-file"): "is a file", str(tmp_path / "no" / "such" / "dir"): "parent",
             "/storagebrief-new-folder-at-root": "filesystem root"}
    for path, words in cases.items():
        assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={path}"]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "no").exists() and not Path("/storagebrief-new-folder-at-root").exists()


def test_out_that_is_a_file_is_refused_before_work(tmp_path, capsys):
    f = _write_params(tmp_path)
    (tmp_path / "out-file").write_text("x")
    assert cli_main(["preprocess", "--params", str(f), "--out", str(tmp_path / "out-file")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert not (tmp_path / "fast").exists()


@pytest.fixture
def small_fs(tmp_path):
    """A 50 MB tmpfs (root only): small filesystems must work with small datasets."""
    d = tmp_path / "small"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m", "tmpfs", str(d)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield d
    subprocess.run(["umount", "-l", str(d)])


@needs_root
def test_read_only_target_is_refused_by_validate_and_run_with_nothing_written(small_fs, tmp_path, capsys):
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    f = _write_params(tmp_path)
    for target in (small_fs, small_fs / "new"):
        assert cli_main(["validate", "--params", str(f), "-S", f"targets.0.path={target}"]) == 2
        assert "read-only" in capsys.readouterr().err
    assert cli_main(["preprocess", "--params", str(f), "-S", f"targets.0.path={small_fs}",
                     "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists() and not (tmp_path / "slow").exists()


@needs_root
def test_small_filesystem_holds_a_small_dataset_and_sizes_have_fitting_units(small_fs):
    t = targets.resolve(config.TargetParams(name="s", path=str(small_fs)), targets.DEVICE_PROFILES)
    targets.check_free_space(t, int(3.5e6), "a 3.5 MB dataset")      # 5 % + 1 GiB would refuse this
    with pytest.raises(targets.TargetError, match=r"needs 60\.0 MB but only [0-9.]+ MB is free"):
        targets.check_free_space(t, int(60e6), "a 60 MB dataset")


# --------------------------------------------------------------------------- target lock
def test_second_holder_of_a_target_refuses_naming_the_first(tmp_path):
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    with lock.TargetLocks([t], "refuse"):
        with pytest.raises(lock.TargetBusy, match=f"in use by PID {os.getpid()}"):
            lock.TargetLocks([t], "refuse").acquire()
    with lock.TargetLocks([t], "refuse"):   # released on exit
        pass


def _wait_for(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def _locked_by(path: Path, pid: int) -> bool:
    try:
        return json.loads((path / lock.LOCK_NAME).read_text() or "{}").get("pid") == pid
    except (OSError, ValueError):
        return False


def test_concurrent_runs_on_one_target_wait_or_refuse_and_stay_clean(tmp_path):
    f = _write_params(tmp_path, image_count=6, image_counts=[], processes=[1], repeats=2)
    first = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "a"), "--progress", "off")
    assert _wait_for(lambda: _locked_by(tmp_path / "fast", first.pid)), "first run never locked its target"
    refused = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "b"), "-S", "run.on_busy_target=refuse")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and f"in use by PID {first.pid}" in err
    waiting = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "c"), "--progress", "off")
    out_w, err_w = waiting.communicate(timeout=600)
    assert first.wait(timeout=600) == 0, first.stderr.read()
    assert waiting.returncode == 0 and "waiting for it to finish" in out_w
    a, c = pd.read_csv(tmp_path / "a" / "runs.csv"), pd.read_csv(tmp_path / "c" / "runs.csv")
    assert pd.to_datetime(c.started_at).min() >= pd.to_datetime(a.started_at).max()   # never overlapped
    assert (a.images_ok == 6).all() and (c.images_ok == 6).all() and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- signals and kill -9
def _storagebrief_cgroups(pid: int) -> list[Path]:
    return [d for parent in leftovers._all_controller_dirs() for d in parent.glob(f"{cgroups.PREFIX}*-{pid}-*")]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _slow_preprocess(tmp_path: Path) -> Path:
    # 1600x1200 TIFFs through the 150 MB/s throttle: long enough to be killed mid-run
    return _write_params(tmp_path, image_count=16, image_counts=[], processes=[2], repeats=3,
                         image_width=1600, image_height=1200)


@needs_blkio()
def test_kill_9_leaves_nothing_a_rerun_or_doctor_does_not_remove(tmp_path):
    f = _slow_preprocess(tmp_path)
    run = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "o"), "--progress", "off",
               "-S", "run.cold_cache=false")
    assert _wait_for(lambda: _storagebrief_cgroups(run.pid), 300), "the run never created its throttle cgroup"
    workers = _children(run.pid)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    assert _wait_for(lambda: not any(process_alive(w) for w in workers), 20), "workers outlived their parent"
    assert _storagebrief_cgroups(run.pid)          # kill -9 gives no chance to clean up ...
    clean = _cli("doctor", "--clean")
    out, _ = clean.communicate(timeout=60)
    assert f"dead process {run.pid}" in out       # ... the next run or doctor --clean does
    assert not _storagebrief_cgroups(run.pid)


@needs_blkio()
@pytest.mark.parametrize("sig, code, words", [(signal.SIGHUP, 129, "stopped by SIGHUP"),
                                              (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_hangup_and_ctrl_c_end_with_one_line_and_no_leftovers(tmp_path, sig, code, words):
    f = _slow_preprocess(tmp_path)
    run = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "o"), "--progress", "off",
               "-S", "run.cold_cache=false")
    assert _wait_for(lambda: _storagebrief_cgroups(run.pid), 300)
    workers = _children(run.pid)
    run.send_signal(sig)
    _, err = run.communicate(timeout=120)
    assert run.returncode == code, err
    ours = [ln for ln in err.strip().splitlines() if not TF_NATIVE_LOG.match(ln)]   # TensorFlow's C++ start-up lines
    assert words in err and "Traceback" not in err and len(ours) == 1, err
    assert not _storagebrief_cgroups(run.pid)
    assert _wait_for(lambda: not any(process_alive(w) for w in workers), 20)


# --------------------------------------------------------------------------- preprocess: real-world images
def _patch_tags(data: bytes, values: dict[int, int]) -> bytes:
    """Overwrite inline SHORT/LONG tag values of a little-endian classic TIFF's first directory."""
    buf = bytearray(data)
    off = struct.unpack("<I", buf[4:8])[0]
    for i in range(struct.unpack("<H", buf[off:off + 2])[0]):
        pos = off + 2 + 12 * i
        tag, typ = struct.unpack("<HH", buf[pos:pos + 4])
        if tag in values:
            fmt = "<H" if typ == 3 else "<I"
            buf[pos + 8:pos + 12] = struct.pack(fmt, values[tag]).ljust(4, b"\0")
    return bytes(buf)


def _tiff(img: np.ndarray) -> bytes:
    ok, enc = cv2.imencode(".tiff", img, [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    return enc.tobytes()


def test_oversize_and_unsupported_tiffs_are_skipped_with_the_real_reason():
    size = (16, 16)
    huge = _patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {256: 60000, 257: 60000})
    with pytest.raises(pipeline.BadImage, match="OpenCV refused it"):
        pipeline.decode_resize(huge, size, "area")
    five = _patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {277: 5})
    with pytest.raises(pipeline.BadImage, match="5 samples per pixel"):
        pipeline.decode_resize(five, size, "area")
    half = _patch_tags(_tiff(np.zeros((16, 16), np.float32)), {258: 16})
    with pytest.raises(pipeline.BadImage, match="16-bit floating-point"):
        pipeline.decode_resize(half, size, "area")


def test_rgba_keeps_stored_colour_and_drops_alpha():
    from PIL import Image
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[...] = (200, 100, 50, 128)
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="TIFF")       # unassociated alpha
    out = pipeline.decode_resize(buf.getvalue(), (8, 8), "nearest")
    assert out.shape == (8, 8, 3) and out[0, 0].tolist() == [200, 100, 50]
    bgra = np.ascontiguousarray(rgba[..., [2, 1, 0, 3]])
    assert pipeline.decode_resize(_tiff(bgra), (8, 8), "nearest")[0, 0].tolist() == [200, 100, 50]


def test_source_subsets_are_class_balanced(tmp_path):
    for cls, n in (("a", 5), ("b", 2), ("c", 3)):
        (tmp_path / cls).mkdir()
        for i in range(n):
            (tmp_path / cls / f"{i}.tif").write_bytes(b"x")
    order = dataset.list_source(tmp_path)
    labels = [dataset.label_for(f, tmp_path) for f in order]
    assert labels[:3] == [0, 1, 2] and sorted(labels[:6]) == [0, 0, 1, 1, 2, 2] and len(order) == 10


def test_skipped_bytes_are_not_ingested_bytes_and_kept_output_waits_for_completion(tmp_path, monkeypatch):
    src = tmp_path / "src" / "only"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    good = [src / f"g{i}.tif" for i in range(3)]
    for g in good:
        cv2.imwrite(str(g), rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), [cv2.IMWRITE_TIFF_COMPRESSION, 1])
    bad = src / "z-huge.tif"
    bad.write_bytes(_patch_tags(_tiff(np.zeros((16, 16), np.uint8)), {256: 60000, 257: 60000}))
    f = _write_params(tmp_path, source_dir=str(tmp_path / "src"), image_count=4, image_counts=[],
                      processes=[1], repeats=2)
    p = config.load(f, ["targets.1.profile=null"])
    frame = STUDY.run(p, tmp_path / "out", progress="off")
    assert (frame.input_bytes == sum(g.stat().st_size for g in good)).all()
    assert (frame.skipped_bytes == bad.stat().st_size).all() and (frame.images_skipped == 1).all()
    outputs = json.loads((tmp_path / "out" / "outputs.json").read_text())
    kept = [Path(x) for x in outputs["tfrecords"]["fast"]]
    before = {x: x.stat().st_mtime_ns for x in kept}
    # a second study that fails in its last run must leave the kept output and outputs.json as they were
    calls = {"n": 0}
    real = pipeline.run_pipeline

    def fail_last(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected failure")
        return real(*a, **k)
    monkeypatch.setattr("storagebrief.studies.preprocess.run.run_pipeline", fail_last)
    with pytest.raises(RuntimeError, match="injected"):
        STUDY.run(p, tmp_path / "out2", progress="off")
    assert {x: x.stat().st_mtime_ns for x in kept} == before


# --------------------------------------------------------------------------- honest files and brief
def test_result_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        results.write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == results.FILE_MODE == 0o666 & ~old


def test_headlines_of_an_unapplied_profile_say_so(tmp_path):
    d = tmp_path / "preprocess"
    d.mkdir()
    rows = [{"study": "preprocess", "run_id": f"r{i}", "target": t, "profile": prof, "emulated": False,
             "repeat": 1, "started_at": "x", "cache_method": "drop_caches", "sweep": "processes",
             "processes": 1, "image_count": 4, "input_mb_per_s": mb, "completion_time_s": 10 / mb,
             # the rest of the columns the preprocess section needs (the brief's gate checks them)
             "input_bytes": 10e6, "images_per_s": 0.4 * mb, "images_skipped": 0, "read_share_percent": 40.0,
             "decode_resize_share_percent": 35.0, "encode_write_share_percent": 25.0}
            for i, (t, prof, mb) in enumerate((("fast", "", 200.0), ("slow", "hdd_7200", 150.0)))]
    pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
    hs = brief_mod.all_headlines(tmp_path)
    assert hs and all(any("slow: profile hdd_7200 not applied" in c for c in h["caveats"]) for h in hs)
    assert brief_mod.unapplied_profiles(pd.DataFrame(rows)) == {
        "slow": "profile hdd_7200 not applied in none of its runs (they ran unthrottled)"}
