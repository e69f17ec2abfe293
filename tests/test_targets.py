import os
import time
from pathlib import Path

import pytest

from storagebrief.core import cgroups, config, monitor, targets
from conftest import needs_blkio, needs_drop_caches


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
@needs_drop_caches()
def test_throttled_target_is_really_slower(tmp_path):
    """Reads through an emulated 40 MB/s profile take ~size/40MB/s; unthrottled far less."""
    files = [_write(tmp_path / f"f{i}.bin", 16 << 20) for i in range(3)]  # 48 MiB
    catalogue = {**targets.DEVICE_PROFILES, "slow40": targets.DeviceProfile(read_mb_per_s=40)}
    t = targets.resolve(config.TargetParams(name="slow", path=str(tmp_path), profile="slow40"), catalogue)
    if t.device is None or t.device.major is None:
        pytest.skip(t.device.reason)

    def timed(group):
        os.sync()
        open("/proc/sys/vm/drop_caches", "w").write("3")
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
