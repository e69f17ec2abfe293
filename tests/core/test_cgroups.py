import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storagebrief.core import cache, cgroup_tree, cgroups, targets
from conftest import needs_blkio, needs_memory_cgroup


def test_own_paths_parse():
    own = cgroup_tree._own_paths()
    assert own  # every Linux process is in some cgroup


@needs_memory_cgroup()
def test_memory_limit_enforced_and_removed():
    """A process in a 64 MiB group that allocates 256 MiB is OOM-killed; the group is removed."""
    with cgroups.Cgroup("memtest", memory_limit_bytes=64 << 20) as g:
        assert g.memory_limit_applied() == 64 << 20
        code = "import sys; b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096]); print('survived')"
        proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: cgroups.join(g.procs_files),
                                stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=60)
        stats = g.memory_stats()
        path = g.dirs["memory"][1]
    assert proc.returncode == -signal.SIGKILL and b"survived" not in out
    assert stats["memory_failcnt"] > 0 and stats["memory_peak_bytes"] <= (64 << 20) + (1 << 20)
    assert stats.get("oom_kills", 1) >= 1
    assert not path.exists()


@needs_memory_cgroup()
def test_reclaim_evicts_page_cache_and_keeps_the_limit(tmp_path):
    """Proactive reclaim (how a ratio caps a job's page cache) shrinks the cache, not the limit."""
    data = tmp_path / "cached.bin"
    data.write_bytes(os.urandom(1 << 20) * 64)
    os.sync()
    cache.fadvise_dontneed([str(data)])   # so the reader's group is charged for its pages
    with cgroups.Cgroup("reclaim", memory_limit_bytes=1 << 30) as g:
        code = "import sys; open(sys.argv[1], 'rb').read(); print('read')"
        proc = subprocess.run([sys.executable, "-c", code, str(data)], preexec_fn=lambda: cgroups.join(g.procs_files),
                              capture_output=True, timeout=60)
        assert b"read" in proc.stdout
        def unmapped() -> int:
            b = g.memory_breakdown()
            return b["cache_bytes"] - b["mapped_file_bytes"]
        before = unmapped()
        if before < 48 << 20:
            pytest.skip(f"the file's pages were charged elsewhere (only {before >> 20} MiB in the group)")
        g.reclaim(before - (16 << 20))
        assert unmapped() <= 20 << 20
        assert g.memory_limit_applied() == 1 << 30


def test_reclaim_v2_file_protocol(tmp_path, monkeypatch):
    """cgroup v2 (not on this VM's memory controller): memory.reclaim when present, else a memory.high
    pulse that ends where it started (memory.max, which could OOM-kill, is never touched)."""
    g = cgroups.Cgroup("v2")
    g.dirs["memory"] = (2, tmp_path)
    (tmp_path / "memory.current").write_text("100000000\n")
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.high").write_text("max\n")
    writes = []
    real_write = type(tmp_path).write_text
    monkeypatch.setattr(type(tmp_path), "write_text",
                        lambda self, text, *a, **k: (writes.append((self.name, text)), real_write(self, text, *a, **k))[1])
    g.reclaim(30_000_000)
    assert writes == [("memory.high", "70000000"), ("memory.high", "max")]
    assert (tmp_path / "memory.max").read_text() == "max\n"
    writes.clear()
    (tmp_path / "memory.reclaim").write_text("")
    writes.clear()
    g.reclaim(30_000_000)
    assert writes == [("memory.reclaim", "30000000")]


@needs_blkio()
def test_io_limits_written():
    dev = os.stat("/").st_dev
    with cgroups.Cgroup("iotest", io=cgroups.IoLimits(device=(os.major(dev), os.minor(dev)), read_bps=10**7)) as g:
        version, d = g.dirs["blkio"]
        text = (d / ("blkio.throttle.read_bps_device" if version == 1 else "io.max")).read_text()
        assert "10000000" in text
    assert not d.exists()


@needs_memory_cgroup()
def test_sigterm_removes_cgroup(tmp_path):
    """A process killed with SIGTERM while holding a cgroup removes it on the way out."""
    marker = tmp_path / "path.txt"
    script = textwrap.dedent(f"""
        import time
        from storagebrief.core import cache, cgroups
        g = cgroups.Cgroup("sigterm", memory_limit_bytes=256 << 20).create()
        open({str(marker)!r}, "w").write(str(g.dirs["memory"][1]))
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 30
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    path = marker.read_text()
    assert os.path.isdir(path)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not os.path.exists(path)



def test_ctrl_c_swallowed_inside_fork_is_raised_again():
    """Python only reports a KeyboardInterrupt raised in os.fork's at-fork callbacks; the engine
    remembers the SIGINT and raises it again, so the run still stops (CI saw a run go on)."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from storagebrief.core import cgroup_tree, cgroups
        sys.unraisablehook = lambda u: None
        cgroups.install_handlers()
        os.register_at_fork(before=lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("after fork", flush=True)
        try:
            cgroups.raise_pending_signal()
        except KeyboardInterrupt:
            sys.exit(3)
        cgroups.install_handlers()            # a new sweep forgets it
        cgroups.raise_pending_signal()
        sys.exit(4)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "after fork" in proc.stdout and proc.returncode == 3, proc.stderr

def test_unavailable_controller_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cgroup_tree, "_v1_mount", lambda c: None)
    monkeypatch.setattr(cgroup_tree, "_v2_mount", lambda: None)
    with pytest.raises(cgroups.CgroupUnavailable, match="no writable 'memory'"):
        cgroups.Cgroup("x", memory_limit_bytes=1 << 30).create()


@needs_blkio()
@pytest.mark.skipif(not cache.drop_caches_possible()[0], reason="needs drop_caches to read from the device")
def test_a_child_never_escapes_an_ancestor_throttle(tmp_path):
    """cgroup v1 blkio limits are not inherited: every child we create copies the ancestors' limit."""
    from storagebrief.core import config, targets
    t = targets.resolve(config.TargetParams(name="x", path=str(tmp_path)), targets.DEVICE_PROFILES)
    if t.device is None or t.device.major is None:
        pytest.skip("tmp_path is not on a block device")
    dev = (t.device.major, t.device.minor)
    data = tmp_path / "f.bin"
    data.write_bytes(os.urandom(48 << 20))
    os.sync()
    r, w = os.pipe()
    with cgroups.Cgroup("outer", io=cgroups.IoLimits(device=dev, read_bps=40_000_000)) as outer:
        pid = os.fork()
        if pid == 0:   # the "user's" throttled process: it runs a study that makes its own child cgroup
            code = 1
            try:
                cgroups.join(outer.procs_files)
                with cgroups.Cgroup("inner", io=cgroups.IoLimits(device=dev)) as inner:   # accounting only
                    cgroups.join(inner.procs_files)
                    limit = (inner.dirs["blkio"][1] / "blkio.throttle.read_bps_device").read_text().split()
                    cache.cold_cache([data])
                    t0 = time.perf_counter()
                    with open(data, "rb") as fh:
                        while fh.read(1 << 20):
                            pass
                    rate = (48 << 20) / (time.perf_counter() - t0) / 1e6
                    os.write(w, f"{' '.join(limit)} {rate:.1f}".encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        out = os.read(r, 200).decode().split()
    assert status == 0 and out[:2] == [f"{dev[0]}:{dev[1]}", "40000000"]
    assert float(out[2]) < 40 * 1.25     # reads at the ancestor's cap, not the disk's speed


# --------------------------------------------------------------------------- limits read back
def _device(path: Path) -> tuple[int, int]:
    dev = targets.resolve_device(path)
    if dev.major is None:
        pytest.skip(f"{path} has no block device: {dev.reason}")
    return dev.major, dev.minor


@needs_blkio()
@pytest.mark.parametrize("limits, stored", [({"read_iops": 2**32 + 1}, "stored 1"),     # 32-bit: wraps
                                            ({"write_iops": 2**32}, "stored 0"),
                                            ({"read_bps": 2**64 - 1}, "stored no limit")])  # 'unlimited'
def test_a_limit_the_kernel_stores_differently_is_caught_by_reading_it_back(tmp_path, limits, stored):
    """Past validation (a profile built in code, another kernel): the read-back stops the run."""
    before = cgroups.leftover_dirs(owner_pid=os.getpid())
    with pytest.raises(cgroups.CgroupLimitError, match=stored):
        cgroups.Cgroup("readback", io=cgroups.IoLimits(device=_device(tmp_path), **limits)).create()
    assert cgroups.leftover_dirs(owner_pid=os.getpid()) == before


def test_io_max_read_back_v2(tmp_path, monkeypatch):
    """cgroup v2 (not on this VM's blkio): io.max is read back too; a kernel that clamps riops to
    32 bits (as blk-throttle does) is caught. The 'kernel' here is a file that clamps what is written."""
    real = Path.write_text

    def kernel(self, text, *a, **kw):
        if self.name == "io.max":
            dev, *kv = text.split()
            text = dev + " " + " ".join(f"{k}={min(int(v), 2**32 - 1) if 'iops' in k else v}"
                                        for k, v in (x.split("=") for x in kv))
        return real(self, text, *a, **kw)
    monkeypatch.setattr(Path, "write_text", kernel)
    g = cgroups.Cgroup("v2")
    g.dirs["blkio"] = (2, tmp_path)
    g._set_io(cgroups.IoLimits(device=(8, 0), read_bps=10**6, read_iops=1000))      # held: fine
    assert cgroup_tree.read_io_max(tmp_path / "io.max", (8, 0)) == {"rbps": 10**6, "riops": 1000}
    with pytest.raises(cgroups.CgroupLimitError, match=r"io.max riops on 8:0: wrote 4,294,967,297 but the kernel "
                                                       r"stored 4,294,967,295"):
        g._set_io(cgroups.IoLimits(device=(8, 0), read_iops=2**32 + 1))


def test_set_io_throttles_a_counting_group_from_then_on(tmp_path):
    """A group made with IoLimits(device) alone counts without a limit; set_io throttles it later
    (train_resnet50: a job's start-up unthrottled, its measured phase at the emulated profile)."""
    g = cgroups.Cgroup("later")
    with pytest.raises(cgroups.CgroupUnavailable, match="no io controller"):
        g.set_io(cgroups.IoLimits(device=(8, 0), read_iops=150))
    g.dirs["blkio"] = (2, tmp_path)
    g._set_io(cgroups.IoLimits(device=(8, 0)))          # what create() writes for a counting group: nothing
    assert not (tmp_path / "io.max").exists()
    g.set_io(cgroups.IoLimits(device=(8, 0), read_bps=150 * 10**6, read_iops=150))
    assert cgroup_tree.read_io_max(tmp_path / "io.max", (8, 0)) == {"rbps": 150 * 10**6, "riops": 150}
    assert g.io.read_iops == 150
