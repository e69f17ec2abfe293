"""Shared fixtures: a small params file with targets inside the test's tmp dir."""
from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml

from storagebrief.core import cache, cgroups

REPO = Path(__file__).resolve().parents[1]

# A test run started in the background by a shell without job control (`make test &`, some CI
# runners) inherits SIGINT ignored, and so would every child it starts: the Ctrl-C tests would see
# runs that cannot be interrupted. Restore Python's own handler (exec'd children then get SIGINT's default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _controller(name: str) -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to create cgroups"
    state = cgroups.capabilities()[name]
    if state.startswith("unavailable") or "not writable" in state:
        return False, f"{name} controller: {state}"
    return True, ""


def has_blkio() -> tuple[bool, str]:
    return _controller("blkio")


def has_memory_cgroup() -> tuple[bool, str]:
    return _controller("memory")


def privileged_if(ok: bool, why: str):
    """Marks a test `privileged` (pytest -m "not privileged" leaves it out) and skips it, with the
    reason, where the capability is missing."""
    def mark(test):
        return pytest.mark.privileged(pytest.mark.skipif(not ok, reason=why)(test))
    return mark


def needs_root(why: str = "needs root"):
    return privileged_if(os.geteuid() == 0, why)


def needs_blkio():
    return privileged_if(*has_blkio())


def needs_memory_cgroup():
    return privileged_if(*has_memory_cgroup())


def needs_drop_caches():
    return privileged_if(*cache.drop_caches_possible())


def process_alive(pid: int) -> bool:
    """True while pid runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def mpi_missing() -> str | None:
    """Why MPI runs cannot be tested here (no mpirun, ...), or None."""
    from storagebrief.kit import mpi
    try:
        mpi.check_available("mpirun", "emulate")
    except mpi.MpiUnavailable as exc:
        return str(exc)
    return None


def descendants(pid: int) -> list[int]:
    """Every descendant of pid (children, their children: workers, accelerators, ranks, jobs)."""
    import subprocess
    out, todo = [], [pid]
    while todo:
        kids = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True).stdout.split()
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def wait_for(pred, timeout: float = 60.0) -> bool:
    """True as soon as pred() is; False after `timeout` seconds of polling."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def tracked_copy(dest: Path) -> Path:
    """The working tree's tracked files (as they are now) in a fresh git repository at `dest`."""
    import subprocess
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dest, check=True, capture_output=True)
    return dest


def base_params(tmp: Path, **preprocess) -> dict:
    pp = {"image_count": 6, "image_counts": [3], "processes": [1, 2], "image_width": 320,
          "image_height": 240, "num_classes": 3, "resize_width": 32, "resize_height": 32, "repeats": 1}
    pp.update(preprocess)
    return {
        "scale": "quick",
        "targets": [{"name": "fast", "path": str(tmp / "fast")},
                    {"name": "slow", "path": str(tmp / "slow"), "profile": "hdd_7200"}],
        "run": {"cold_cache": True, "monitor_interval_s": 0.1},
        "preprocess": pp,
    }



def write_params(tmp_path: Path, **preprocess) -> Path:
    """params.yaml in tmp_path: base_params() with these preprocess knobs."""
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(base_params(tmp_path, **preprocess)))
    return f


def cli_process(*args, env=None, **kw):
    """`storagebrief <args>` started in the repository, TensorFlow's native log quiet."""
    import subprocess
    import sys
    return subprocess.Popen([sys.executable, "-m", "storagebrief.cli", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}, **kw)


@pytest.fixture
def params_file(tmp_path):
    def make(**preprocess) -> Path:
        f = tmp_path / "params.yaml"
        f.write_text(yaml.safe_dump(base_params(tmp_path, **preprocess)))
        shutil.copytree(REPO / "params", tmp_path / "params", dirs_exist_ok=True)
        return f
    return make


def hosts_missing() -> str | None:
    """Why test hosts (core.nethosts: network namespaces with sshd) cannot be made here, or None."""
    from storagebrief.core import nethosts
    return nethosts.unavailable()


@pytest.fixture
def two_hosts(tmp_path_factory):
    """Two client hosts (netns + UTS ns + sshd) for the test, always removed; skipped with the reason
    where they cannot be made (CI here has root and openssh-server, so it runs)."""
    from storagebrief.core import nethosts
    why = nethosts.unavailable()
    if why:
        pytest.skip(f"no test hosts: {why}")
    with nethosts.HostSet.up(2, tmp_path_factory.mktemp("hosts")) as hs:
        yield hs
