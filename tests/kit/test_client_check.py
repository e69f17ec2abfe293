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



@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a cpuset cgroup")
def test_a_confined_rerun_does_not_forget_a_signal_the_run_already_took(monkeypatch):
    """A Ctrl-C swallowed inside os.fork is remembered (cgroups.raise_pending_signal); making the check's cpuset
    group after it must not clear it, or the run goes on to the end."""
    import signal
    monkeypatch.setattr(cgroups, "_pending_signal", signal.SIGINT)
    conf = client_check.confine("t-pending", [0])
    try:
        if conf.method == client_check.AFFINITY:
            pytest.skip(conf.reason)
        with pytest.raises(KeyboardInterrupt):
            cgroups.raise_pending_signal()
    finally:
        conf.remove()

def test_verdict_words_fell_rose_or_held():
    base = {"gib_per_s": [2.0, 2.2]}
    fell = client_check.sensitivity(base, {"gib_per_s": [1.0]})
    rose = client_check.sensitivity(base, {"gib_per_s": [3.0]})
    held = client_check.sensitivity(base, {"gib_per_s": [2.1]})
    assert client_check.verdict_word(fell) == "client-bound"
    assert rose["client_bound"] and client_check.verdict_word(rose).startswith("client-sensitive (faster")
    assert client_check.verdict_word(held) == "not client-sensitive"


def _rows():
    import pandas as pd
    return pd.DataFrame([
        {"target": "a", "w": "x", "v": 2.0, "client_check": None},
        {"target": "a", "w": "x", "v": 2.2, "client_check": client_check.REFERENCE},
        {"target": "a", "w": "x", "v": 1.0, "client_check": client_check.CHECK, "cpus_confined": 1,
         "cpus_available": 2, "cpu_confinement": "cgroup cpuset (v1) 0"},
        {"target": "b", "w": "x", "v": 5.0, "client_check": None}])


def test_rows_and_verdicts_shared_by_the_studies():
    frame = _rows()
    assert list(client_check.unchecked(frame).v) == [2.0, 5.0]
    assert list(client_check.checks(frame).v) == [1.0]
    assert list(client_check.checks(frame, client_check.REFERENCE).v) == [2.2]
    c, = client_check.verdicts(frame, ["target", "w"], lambda r: {"v": list(r.v)}, lambda k: f"{k[0]}, {k[1]}")
    assert (c["target"], c["w"], c["repeats"], c["confined_runs"], c["cpus_confined"], c["cpus_all"]) == \
        ("a", "x", 2, 1, 1, 2)
    assert c["client_bound"] and c["verdict"] == "client-bound" and c["text"].startswith("a, x with the client on 1 of 2")
    assert client_check.short_note(c, " (x)") == \
        "client check (x), rerun on 1 of 2 CPUs: client-bound (v fell by 1.1, more than its repeats' spread of 0.2)"
    assert "- a, x with the client" in client_check.markdown([c], "the clients", "GiB/s")
    assert client_check.verdicts(frame.drop(columns="client_check"), ["target"], None, None) == []


def test_check_cpus_says_why_it_cannot_run():
    notes = []
    assert client_check.check_cpus(notes.append, "mpi") == [] and "launcher mpi" in notes[0]
    if len(os.sched_getaffinity(0)) >= 2:
        assert client_check.check_cpus(notes.append) == client_check.half_cpus() and len(notes) == 1
    cols = client_check.row_columns(None)
    assert set(cols) == {c.name for c in client_check.COLUMNS} and not any(cols.values())


def test_no_move_within_a_wide_spread_is_inconclusive():
    wide = client_check.sensitivity({"gib_per_s": [1.0, 2.0]}, {"gib_per_s": [1.2]})
    assert not wide["client_bound"]
    assert client_check.verdict_word(wide) == "inconclusive (the repeats of gib_per_s spread 67 % of their mean)"


def test_a_run_without_a_cgroup_gets_its_own_to_confine():
    """An unthrottled target's run has no cgroup: the check makes it one (under v2 the half is set on it) and its
    processes join it beside any cpuset child (the engine's run.confine_cpus makes that: core/cpu_confine.py); when
    none can be made, the confinement falls back by itself."""
    from types import SimpleNamespace
    own = SimpleNamespace(procs_files=["/own/cgroup.procs"])
    got = {}

    def confine_cpus(cpus, group=None):
        got["group"] = group
        return client_check.Confinement(cpus, client_check.CPUSET + " (v1)", procs_files=["/cpuset/cgroup.procs"])
    notes = []
    run = SimpleNamespace(run_id="r", cgroup=lambda suffix: own, confine_cpus=confine_cpus,
                          sweep=SimpleNamespace(note=notes.append))
    conf = client_check.confine_run(run, None)
    assert got["group"] is own and conf.procs_files == ["/own/cgroup.procs", "/cpuset/cgroup.procs"] and not notes

    def refuse(suffix):
        raise cgroups.CgroupUnavailable("not root")
    conf = client_check.confine_run(SimpleNamespace(run_id="r", cgroup=refuse, confine_cpus=confine_cpus,
                                                    sweep=run.sweep), None)
    assert got["group"] is None and conf.procs_files == ["/cpuset/cgroup.procs"]
