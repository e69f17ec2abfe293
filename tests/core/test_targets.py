import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from storagebrief.core import cache, cgroups, config, monitor, targets
from conftest import REPO, base_params, needs_blkio, cli_run as _cli, one_line as _one_line
from mounts import mount, needs_root  # noqa: F401  (mount: a fixture)


@pytest.mark.parametrize("path", ["/", "/dev", "/dev/sda1", "/proc/self", "/sys/block", "/etc", "/usr/lib/x"])
def test_refuses_system_paths(path):
    with pytest.raises(ValueError):
        targets.check_target_path(path)


def test_resolves_block_device_and_mount(tmp_path):
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path / "t")), targets.DEVICE_PROFILES)
    st = os.stat(tmp_path).st_dev
    if Path(f"/sys/dev/block/{os.major(st)}:{os.minor(st)}").exists():
        assert t.device.name and t.device.major is not None
        assert Path(f"/sys/block/{t.device.name}").exists()  # whole disk, not a partition
    assert t.filesystem != "unknown" and t.mount_point.startswith("/")


def test_free_space_precheck_refuses(tmp_path):
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    with pytest.raises(targets.TargetError, match="GB is free"):
        targets.check_free_space(t, 10**18, "a huge dataset")


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(os.urandom(size))
    return path


def _read_in_child(files, procs_files, r, w):
    pid = os.fork()
    if pid == 0:
        try:
            if procs_files:
                cgroups.join(procs_files)
            os.read(r, 1)  # wait for go
            for f in files:
                with open(f, "rb") as fh:
                    while fh.read(1 << 20):
                        pass
        finally:
            os._exit(0)
    return pid


@needs_blkio()
def test_throttled_target_is_really_slower(tmp_path):
    """Reads through an emulated 40 MB/s profile take ~size/40MB/s; unthrottled far less."""
    files = [_write(tmp_path / f"f{i}.bin", 16 << 20) for i in range(3)]  # 48 MiB
    catalogue = {**targets.DEVICE_PROFILES, "slow40": targets.DeviceProfile(read_mb_per_s=40)}
    t = targets.resolve(config.TargetParams(name="slow", path=str(tmp_path), profile="slow40"), catalogue)
    if t.device is None or t.device.major is None:
        pytest.skip(t.device.reason)

    def timed(group):
        os.sync()
        cache.fadvise_dontneed(files)       # these files only: the tests beside it keep their page cache
        r, w = os.pipe()
        pid = _read_in_child(files, group.procs_files if group else None, r, w)
        time.sleep(0.2)
        with monitor.Monitor(t.device.name, 0.2) as mon:
            start = time.perf_counter()
            os.write(w, b"g")
            os.waitpid(pid, 0)
            elapsed = time.perf_counter() - start
        return elapsed, mon.summary()

    fast, _ = timed(None)
    with targets.emulation(t, "test") as group:
        assert group is not None, t.warnings
        slow, summary = timed(group)
    expected = 3 * (16 << 20) / 40e6
    assert slow > 2 * fast
    assert slow == pytest.approx(expected, rel=0.3)
    assert summary["device_read_bytes"] > 0  # device-wide counters: others' I/O may add to it
    assert not cgroups.leftover_dirs(os.getpid())


# --------------------------------------------------------------------------- profiles the kernel can hold
@pytest.mark.parametrize("key, value, allowed", [
    ("read_iops", 4294967297, "1..4294967294 IOPS"),
    ("write_iops", 0, "1..4294967294 IOPS"),
    ("read_mb_per_s", 2e13, "1e-06..18446744073709.55 MB/s"),
    ("write_mb_per_s", 1e-7, "1e-06..18446744073709.55 MB/s"),
])
def test_profile_the_kernel_cannot_hold_is_refused_by_validate(tmp_path, key, value, allowed):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "a", "path": str(tmp_path / "a"), "profile": "big"}],
                                 "profiles": {"big": {key: value}}}))
    proc = subprocess.run([sys.executable, "-m", "storagebrief.cli", "validate", "--params", str(f)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    lines = [ln for ln in out.splitlines() if f"profiles.big.{key}" in ln]
    assert len(lines) == 1 and allowed in lines[0] and f"= {value}:" in lines[0], out


def test_profile_bounds_are_the_kernels():
    """The largest values the kernel stores unchanged pass; one more is refused."""
    ok = targets.DeviceProfile(read_iops=2**32 - 2, write_iops=1, read_mb_per_s=1e-6, write_mb_per_s=18446744073709)
    assert ok.read_iops == 4294967294
    for bad in ({"read_iops": 2**32 - 1}, {"write_mb_per_s": float("nan")}, {"read_mb_per_s": -5}):
        with pytest.raises(ValueError, match="outside what the kernel"):
            targets.DeviceProfile(**bad)


# --------------------------------------------------------------------------- a target in memory says so (issue 20)
@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
@needs_root
def test_ramfs_target_says_what_it_is_not_zero_bytes_free(tmp_path, mount):
    ram = mount("ram", "-t", "ramfs", "ramfs")
    data = base_params(tmp_path)
    data["targets"] = [{"name": "ram", "path": str(ram / "t")}]
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    res = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "out"))
    line = _one_line(res)
    assert res.returncode == 2 and "reports no size" in line and "ramfs" in line and "0 B" not in line


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
@needs_root
def test_tmpfs_target_is_named_as_memory_in_the_notes(tmp_path, mount):
    mem = mount("mem", "-t", "tmpfs", "-o", "size=64m", "tmpfs")
    data = base_params(tmp_path, image_counts=[], processes=[1])
    data["targets"] = [{"name": "mem", "path": str(mem / "t")}]
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    res = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    notes = (tmp_path / "out" / "notes.json").read_text()
    assert "is on tmpfs, a filesystem in memory" in notes and "not a storage device" in notes
