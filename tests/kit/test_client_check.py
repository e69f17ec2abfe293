"""The client-sensitivity check (kit/client_check.py): the rule that calls a point client-bound, and how
it confines a run to half the CPUs where cgroups cannot."""
from __future__ import annotations

import os

import pytest

from storagebrief.core import cgroups
from storagebrief.kit import client_check


def test_sensitivity_rule():
    base = {"au_percent": [94.0, 95.0], "samples_per_s": [100.0, 101.0]}
    same = client_check.sensitivity(base, {"au_percent": [94.6], "samples_per_s": [100.5]})
    assert not same["client_bound"]
    moved = client_check.sensitivity(base, {"au_percent": [80.0], "samples_per_s": [100.5]})
    assert moved["client_bound"] and moved["figures"]["au_percent"]["moved"] == pytest.approx(-14.5)
    assert "client-bound" in client_check.verdict_text(moved, 1, 2, "local, unet3d at N = 8")


def test_half_cpus_and_affinity_confinement():
    assert client_check.half_cpus([0, 1, 2, 3]) == [0, 1] and client_check.half_cpus([5]) == [5]
    conf = client_check.confine("t-affinity", [0], run_group=_FakeV2())      # a v2 dir that cannot be written
    assert conf.method == client_check.AFFINITY and conf.reason and conf.affinity == [0]


class _FakeV2:
    dirs = {"memory": (2, __import__("pathlib").Path("/nonexistent/storagebrief-test"))}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a cpuset cgroup")
def test_cpuset_cgroup_holds_a_process_and_is_removed():
    import subprocess
    import sys
    try:
        conf = client_check.confine("t-cpuset", [0])
    except Exception as exc:      # pragma: no cover
        pytest.skip(f"no cpuset: {exc}")
    if conf.method == client_check.AFFINITY:
        pytest.skip(conf.reason)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        for f in conf.procs_files:
            open(f, "w").write(str(child.pid))
        assert os.sched_getaffinity(child.pid) == {0}
    finally:
        child.kill()
        child.wait()
        conf.remove()
    assert not [d for d in cgroups.leftover_dirs(os.getpid()) if "t-cpuset" in d.name]
