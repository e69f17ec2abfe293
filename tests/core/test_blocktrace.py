"""Capture on this machine (root + tracefs): the right bytes, and nothing left behind after
SIGTERM, kill -9 of the run, or kill -9 of the run and its reader (then the leftovers sweep)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief import studies
from storagebrief.core import blocktrace, characterize as ch, config, leftovers, machine, targets
from conftest import REPO, privileged_if, process_alive


def _tracing() -> tuple[bool, str]:
    try:
        blocktrace.tracefs_root()
    except blocktrace.TraceUnavailable as exc:
        return False, str(exc)
    return True, ""


_OK, _WHY = _tracing()
needs_tracefs = privileged_if(_OK, f"block tracing unavailable: {_WHY}")


def _device(path: Path) -> targets.BlockDevice:
    dev = targets.resolve_device(path)
    if dev.major is None:
        pytest.skip(f"{path} is not on a block device: {dev.reason}")
    return dev


@needs_tracefs
@pytest.mark.serial("traces every request to the disk: another test's reads of the file's sectors would count")
def test_capture_around_direct_io_has_the_right_bytes(tmp_path):
    dev = _device(tmp_path)
    data = tmp_path / "data.bin"
    # 36 KiB requests (72 sectors): a size nothing else on the disk is likely to use at once
    subprocess.run(["dd", "if=/dev/urandom", f"of={data}", "bs=36k", "count=64", "oflag=direct", "status=none"], check=True)
    trace = blocktrace.BlockTrace((dev.major, dev.minor), tmp_path / "t.tracefs-raw.gz", buffer_kib=1024).start()
    inst = trace.instance
    assert inst.is_dir() and (inst / "events/block/block_rq_issue/filter").read_text().strip() == \
        f"dev == {blocktrace.dev_t(dev.major, dev.minor)}"
    try:
        subprocess.run(["fio", "--name=r", f"--filename={data}", "--rw=read", "--bs=36k", "--direct=1",
                        "--ioengine=psync", f"--size={36 * 1024 * 64}", "--output=/dev/null"], check=True)
    finally:
        result = trace.stop()
    assert not inst.exists(), "instance left behind"
    assert result.reader_rc == 0 and result.lost_events == 0
    row, dists, _ = ch.characterize(result.path, "tracefs-raw", dev.size_bytes // 512)
    # every byte of the file was read from the device exactly once: the read requests that fall in
    # the file's extents (filefrag, in sectors of the disk) add up to its size
    inside = [(sec, n) for _, sec, n, op, _ in dists["sample"]
              if op == "R" and any(a <= sec < b for a, b in _extents(data, dev))]
    assert len(dists["sample"]) < ch.SAMPLE_POINTS       # the sample holds every request here
    assert sum(n for _, n in inside) * 512 == 36 * 1024 * 64 == data.stat().st_size
    assert row["read_bytes"] >= 36 * 1024 * 64
    assert row["device"] == f"{dev.major}:{dev.minor}" and row["devices"] == 1
    assert row["read_latency_us_median"] > 0 and row["unmatched_issues"] == 0
    # the file was read front to back: after its first request, nearly all of its 64 are sequential
    assert row["sequential_read_ops"] >= 48



@needs_tracefs
def test_raw_pages_decode_to_exactly_what_the_kernel_prints(tmp_path):
    """The kernel's own formatter is the reference: events recorded into an instance are printed
    by its (non-consuming) `trace` file, then the reader copies the same buffer's pages."""
    dev = _device(tmp_path)
    root = blocktrace.tracefs_root()
    inst = root / "instances" / f"{blocktrace.PREFIX}{os.getpid()}-oracle"   # ours: the leftovers sweep knows it
    inst.mkdir()
    try:
        (inst / "buffer_size_kb").write_text("16384")
        for ev in blocktrace.EVENTS:
            (inst / "events/block" / ev / "filter").write_text(f"dev == {blocktrace.dev_t(dev.major, dev.minor)}")
            (inst / "events/block" / ev / "enable").write_text("1")
        (inst / "tracing_on").write_text("1")
        subprocess.run(["fio", "--name=o", f"--filename={tmp_path / 'f'}", "--size=32m", "--rw=randrw", "--bs=4k",
                        "--direct=1", "--ioengine=psync", "--runtime=1", "--time_based", "--fsync=50",
                        "--output=/dev/null"], check=True)
        (inst / "tracing_on").write_text("0")
        assert "overrun: 0" in (inst / "per_cpu/cpu0/stats").read_text()
        (tmp_path / "kernel.txt").write_text((inst / "trace").read_text())
        reader = subprocess.Popen([sys.executable, "-m", "storagebrief.core.blocktrace", "read", str(inst),
                                   str(tmp_path / "t.tracefs-raw.gz"), str(os.getpid())],
                                  stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
        assert reader.stderr.readline().startswith(b"ready")
        time.sleep(2 * blocktrace.DRAIN_INTERVAL_S)
        reader.communicate(b"stop\n", timeout=30)
        assert reader.returncode == 0
    finally:
        blocktrace.switch_off(inst)
        blocktrace.rmdir_instance(inst)
    text = list(ch.events(tmp_path / "kernel.txt", "tracefs", ch.ParseCounts()))
    counts = ch.ParseCounts()
    pages = list(ch.events(tmp_path / "t.tracefs-raw.gz", "tracefs-raw", counts))
    # the kernel prints microseconds, rounded to nearest
    as_text = [((round(e.t * 1e9) + 500) // 1000, e.action, e.dev, e.op, e.sector, e.sectors) for e in pages]
    printed = [(round(e.t * 1e6), e.action, e.dev, e.op, e.sector, e.sectors) for e in text]
    assert len(printed) > 2000 and as_text == printed
    assert counts.malformed == 0 and any(e.op == "F" for e in pages)

def _extents(path: Path, dev: targets.BlockDevice) -> list[tuple[int, int]]:
    """The file's physical extents as [start, end) sectors of the whole disk."""
    start = 0
    if dev.partition:
        start = int(Path(f"/sys/class/block/{dev.partition}/start").read_text())
    out = subprocess.run(["filefrag", "-v", "-b512", str(path)], capture_output=True, text=True, check=True).stdout
    spans = []
    for line in out.splitlines():
        f = line.replace(":", " ").replace("..", " ").split()
        if len(f) >= 6 and f[0].isdigit():      # ext logical_start logical_end physical_start physical_end length
            spans.append((start + int(f[3]), start + int(f[4]) + 1))
    assert spans, out
    return spans


_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from storagebrief.core import blocktrace, cgroups
    cgroups.install_handlers()
    t = blocktrace.BlockTrace((int(sys.argv[1]), int(sys.argv[2])), Path(sys.argv[3]), 256).start()
    print(t.instance, t._reader.pid, flush=True)
    time.sleep(120)
""")


def _holder(tmp_path: Path):
    dev = _device(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(dev.major), str(dev.minor), str(tmp_path / "h.gz")],
                         stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    inst, reader = p.stdout.readline().split()
    inst = Path(inst)
    assert inst.is_dir() and (inst / "tracing_on").read_text().strip() == "1"
    return p, inst, int(reader)


def _gone(path: Path, pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not path.exists() and not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


@needs_tracefs
def test_sigterm_switches_tracing_off_and_removes_the_instance(tmp_path):
    p, inst, reader = _holder(tmp_path)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 128 + signal.SIGTERM
    assert _gone(inst, reader), f"{inst} or reader {reader} outlived SIGTERM"


@needs_tracefs
def test_kill_9_of_the_run_the_reader_removes_the_instance(tmp_path):
    p, inst, reader = _holder(tmp_path)
    p.kill()
    p.wait(10)
    assert _gone(inst, reader), f"{inst} or reader {reader} outlived kill -9 of its run"


@needs_tracefs
@pytest.mark.serial("every storagebrief run starts with the machine's leftovers sweep: one beside it removed the "
                    "killed run's instance before this test's own sweep could (seen once at 4f3aa5d)")
def test_kill_9_of_run_and_reader_then_leftovers_sweep(tmp_path):
    p, inst, reader = _holder(tmp_path)
    os.kill(reader, signal.SIGKILL)
    p.kill()
    p.wait(10)
    time.sleep(0.2)
    assert inst.is_dir() and (inst / "tracing_on").read_text().strip() == "1"   # what kill -9 leaves
    lines = leftovers.remove_leftovers()
    assert not inst.exists() and any(inst.name in line and "removed leftover tracefs instance" in line for line in lines)


def test_availability_is_reported_by_doctor():
    from storagebrief.core.inventory import doctor_lines
    line = next(x for x in doctor_lines() if x.startswith("tracefs"))
    ok, why = blocktrace.availability()
    assert why in line and (ok or "diskstats" in line)


def _tiny(tmp_path: Path, trace: bool) -> Path:
    data = {"targets": [{"name": "fast", "path": str(tmp_path / "fast")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2, "trace": trace, "trace_buffer_kib": 1024},
            "preprocess": {"image_count": 6, "image_counts": [], "processes": [1], "repeats": 2, "image_width": 640,
                           "image_height": 480, "num_classes": 2, "resize_width": 32, "resize_height": 32}}
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
@needs_tracefs
def test_engine_traces_every_measured_run_and_writes_characterization(tmp_path):
    params = config.load(_tiny(tmp_path, trace=True))
    out = tmp_path / "out"
    frame = studies.get("preprocess").run(params, out, log=lambda *_: None, progress="off")
    chz = pd.read_csv(out / "characterization.csv")
    assert list(chz.run_id) == list(frame.run_id) and set(chz.source) == {"tracefs"}
    for _, r in chz.iterrows():
        assert (out / r.trace_file).is_file() and r.lost_events == 0 and r.malformed_lines == 0
        assert r.capacity_source == "header" and r.requests_beyond_capacity == 0 and pd.isna(r.warning)
    joined = frame.merge(chz, on="run_id")
    # the trace and diskstats saw the same device: read bytes agree (the trace starts a little earlier)
    assert (joined.read_bytes >= joined.device_read_bytes * 0.9).all() and (joined.read_bytes > 0).all()
    assert not blocktrace.instances() or all(blocktrace.owner_pid(i.name) != os.getpid() for i in blocktrace.instances())


def test_engine_without_tracing_falls_back_to_diskstats(tmp_path):
    params = config.load(_tiny(tmp_path, trace=False))
    out = tmp_path / "out"
    frame = studies.get("preprocess").run(params, out, log=lambda *_: None, progress="off")
    chz = pd.read_csv(out / "characterization.csv")
    assert list(chz.run_id) == list(frame.run_id) and set(chz.source) == {"diskstats"}
    assert chz.random_percent.isna().all() and (chz.read_ops > 0).all()
    assert not list((out / "traces").iterdir())


@needs_tracefs
def test_raw_header_records_the_device_its_capacity_and_this_host(tmp_path):
    dev = _device(tmp_path)
    trace = blocktrace.BlockTrace((dev.major, dev.minor), tmp_path / "t.tracefs-raw.gz", buffer_kib=256).start()
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={tmp_path / 'f'}", "bs=64k", "count=16", "oflag=direct",
                        "status=none"], check=True)
    finally:
        result = trace.stop()
    from storagebrief.core.characterize import tracefs_raw
    info = tracefs_raw.header_info(result.path)
    assert info["device"] == (dev.major, dev.minor) and info["capacity_sectors"] == dev.size_bytes // 512
    assert info["host"] == machine.host_identity() and info["same_host"]
    row, _, _ = ch.characterize(result.path, "tracefs-raw")
    assert row["capacity_source"] == "header" and row["capacity_sectors"] == dev.size_bytes // 512
    assert row["requests_beyond_capacity"] == 0 and row["warning"] == "" and row["write_ops"] >= 16


def test_host_identity_matches_this_boot_only():
    here = machine.host_identity()
    assert here["hostname"] == os.uname().nodename and here["boot_id"]
    assert machine.same_host(dict(here))
    for key in ("hostname", "machine_id", "boot_id"):
        assert not machine.same_host({**here, key: "elsewhere"}), key
    assert not machine.same_host({}) and not machine.same_host("vm")
