"""A cgroup of a test's own (root): a child of this process's cgroup for one controller with limits written into
it, for a subprocess to start in, removed afterwards with anything left inside. Skips, with the reason, where
the controller is absent or not writable (the pids controller is not mounted everywhere)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from storagebrief.core import cgroup_tree, cgroups

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@contextmanager
def child_cgroup(controller: str, limits: dict[str, int]):
    """A fresh cgroup below ours for `controller` ('memory', 'pids'), with `limits` ({"pids.max": 30},
    {"memory.limit_in_bytes": bytes}: also as memory.max on v2, and swap held to the same) written into it; yields
    its directory."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a cgroup")
    try:
        version, own = cgroup_tree.controller_dir(controller)
    except cgroups.CgroupUnavailable as exc:
        pytest.skip(f"no {controller} cgroup controller here: {exc}")
    d = own / f"storagebrief-test-{controller}-{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        for name, value in limits.items():
            if name == "memory.limit_in_bytes":           # no swap to escape to: the OOM killer, not swapping
                files = [("memory.max", value), ("memory.swap.max", 0)] if version == 2 else \
                    [(name, value), ("memory.memsw.limit_in_bytes", value)]
            else:
                files = [(name, value)]
            for f, v in files:
                if f == name or (d / f).exists():
                    (d / f).write_text(str(v))
    except OSError as exc:
        if d.exists():
            d.rmdir()
        pytest.skip(f"cannot make a {controller} cgroup with {limits}: {exc}")
    try:
        yield d
    finally:
        for _ in range(50):
            pids = (d / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        d.rmdir()


def run_in(d: Path, argv: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """argv run inside cgroup `d` (it joins before exec), with this test's import path."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=kw.pop("env", ENV),
                          preexec_fn=lambda: (d / "cgroup.procs").write_text(str(os.getpid())), **kw)


def cli_in(d: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_in(d, [sys.executable, "-m", "storagebrief.cli", *args], timeout=timeout)


def validate_in(controller: str, limits: dict[str, int], tmp_path: Path, section: str):
    """`storagebrief validate` of a params file with one target and `section` (a YAML line, e.g. "preprocess: {...}")
    run in a fresh cgroup with `limits`; (the CompletedProcess, the cgroup's directory), having checked it is one
    line and exit 2."""
    params = tmp_path / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {tmp_path / 't'}}}]\n{section}\n")
    with child_cgroup(controller, limits) as d:
        res = cli_in(d, "validate", "--params", str(params), timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res, d
