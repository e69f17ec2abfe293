"""core.longjob: a worker that outlives runs, owned by the engine. Started once (in its cgroup before it
imports anything), re-armed per run, replaced when it died, limited per run through the Run (lifted when
the run closes), ended however the sweep ends, and gone after kill -9 of its parent (no process, no
cgroup). The worker here is a few lines of Python, not TensorFlow: the studies' jobs go through the same
class in their own tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storagebrief.core import cgroup_tree, cgroups, leftovers, longjob, sweep, targets as targets_mod
from conftest import needs_blkio, needs_memory_cgroup, process_alive, wait_for
from test_sweep import FakeStudy, _study, params  # noqa: F401  (the engine's tiny study and its params)

WORKER = textwrap.dedent("""
    import json, os, subprocess, sys

    def main(spec_path):
        spec = json.load(open(spec_path))
        fd = spec["event_fd"]

        def emit(**e):
            os.write(fd, (json.dumps(e) + "\\n").encode())

        emit(event="ready", pid=os.getpid(), cgroup=open("/proc/self/cgroup").read())
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("quit"):
                return
            if cmd.get("die"):
                os._exit(3)
            if cmd.get("child"):          # a grandchild in the job's session, as TensorFlow's helpers would be
                child = subprocess.Popen(["sleep", "300"])
                emit(event="child", pid=child.pid)
                continue
            emit(event="done", n=cmd["n"], armed=spec["armed"])
""")


def _job(tmp_path: Path, name: str = "lj-test", **kw) -> longjob.LongJob:
    (tmp_path / "lj_worker.py").write_text(WORKER)
    env = {"PYTHONPATH": os.pathsep.join([longjob.LIB, str(tmp_path)])}
    return longjob.LongJob(name, "lj_worker:main", {"armed": "first"}, tmp_path / "logs" / f"{name}.log", env=env,
                           quit_command={"quit": True}, **kw)


def _mine(name: str) -> list[Path]:
    return [d for d in cgroups.leftover_dirs(owner_pid=os.getpid()) if name in d.name]


def test_started_once_re_armed_per_run_then_stopped_leaves_nothing(tmp_path):
    job = _job(tmp_path).start()
    ready = job.wait("ready", 60)
    if job.group is not None:          # it joined its cgroup before importing anything
        assert ready["pid"] in job.group.pids() and job.group.name in ready["cgroup"]
        assert job.group.kill_on_remove
    for n in (1, 2, 3):                # one process serves every run
        job.send({"n": n})
        assert job.wait("done", 60) == {"event": "done", "n": n, "armed": "first"}
    assert job.pid == ready["pid"] and job.alive
    job.send({"child": True})
    child = job.wait("child", 60)["pid"]
    job.stop()
    assert not job.alive and job.proc.returncode == 0          # it quit when asked ...
    assert wait_for(lambda: not process_alive(child), 10)      # ... and what it started went with its cgroup
    assert not _mine("lj-test")


def test_a_job_that_dies_mid_run_says_so_and_the_registry_replaces_it(tmp_path):
    jobs = longjob.Jobs()
    first = jobs.get("tf", lambda: _job(tmp_path)).start()
    first.wait("ready", 60)
    assert jobs.get("tf", lambda: pytest.fail("a live job is not replaced")) is first
    first.send({"die": True})
    with pytest.raises(longjob.JobDied, match=r"ended \(exit 3\) before 'done'"):
        first.wait("done", 60)
    second = jobs.get("tf", lambda: _job(tmp_path)).start()    # the dead one stopped, its cgroup removed
    assert second is not first and second.wait("ready", 60)["pid"] != first.pid
    assert len(_mine("lj-test")) == (1 if second.group is not None else 0)
    jobs.end_all()
    assert not second.alive and len(jobs) == 0 and not _mine("lj-test")


def test_the_engine_ends_every_job_however_the_sweep_ends(params, tmp_path):  # noqa: F811
    seen = []

    def run_one(run, c):
        job = run.sweep.jobs.get("w", lambda: _job(tmp_path, "lj-engine"))
        if not job.started:
            job.start().wait("ready", 60)
        seen.append(job)
        raise KeyboardInterrupt        # as Ctrl-C would, with the job alive between runs

    with pytest.raises(KeyboardInterrupt):
        sweep.run(_study(run_one=run_one), params, tmp_path / "out", log=lambda *_: None, progress="off")
    assert len(seen) == 1 and not seen[0].alive and not _mine("lj-engine")

    def broken_close(sw):
        raise RuntimeError("the study's close hook failed")

    with pytest.raises(RuntimeError, match="close hook failed"):      # its own cleanup failing does not keep it
        sweep.run(_study(run_one=lambda run, c: _keep(run, seen, tmp_path), close=broken_close),
                  params, tmp_path / "out2", log=lambda *_: None, progress="off")
    assert len(seen) == 2 and not seen[1].alive and not _mine("lj-engine")


def _keep(run, seen, tmp_path):
    """A run that leaves its job alive for later runs (the last run's job is the same one)."""
    job = run.sweep.jobs.get("w", lambda: _job(tmp_path, "lj-engine"))
    if not job.started:
        job.start().wait_ready(60)
        seen.append(job)
    return sweep.Measurement({"value_s": 1.0})


@needs_blkio()
@needs_memory_cgroup()
def test_a_runs_limits_go_on_the_job_and_come_off_when_the_run_closes(params, tmp_path):  # noqa: F811
    sw = sweep.Sweep(_study(), params, tmp_path / "out", log=lambda *_: None)
    slow = next(t for t in sw.targets if t.profile_name)          # hdd_7200 on a real device
    io = targets_mod.io_limits(slow)
    if io is None:
        pytest.skip("the target has no block device to throttle")
    job = _job(tmp_path, "lj-limits", io_device=io.device)
    try:
        assert "blkio" in job.group.dirs and "memory" in job.group.dirs
        run = sweep.Run(sw, slow, 1, "lj-limits-r1")
        assert run.limit_job(job, memory_limit_bytes=512 << 20) and run.emulated
        version, d = job.group.dirs["blkio"]
        held = (cgroup_tree.read_io_max(d / "io.max", io.device).get("riops") if version == 2 else
                cgroup_tree.read_v1_limit(d / "blkio.throttle.read_iops_device", io.device))
        assert held == io.read_iops
        assert job.group.memory_limit_applied() == 512 << 20
        run.close()                                                # failed or not, the limits come off
        held = (cgroup_tree.read_io_max(d / "io.max", io.device).get("riops") if version == 2 else
                cgroup_tree.read_v1_limit(d / "blkio.throttle.read_iops_device", io.device))
        assert not held and job.group.memory_limit_applied() >= longjob.ram_bytes() // 2
        bare = sweep.Run(sw, slow, 1, "lj-limits-r2")              # a job without an io group: unthrottled, said
        nogroup = _job(tmp_path, "lj-nogroup")
        nogroup.group.remove()
        nogroup.group = None
        assert not bare.limit_job(nogroup) and not bare.emulated
        assert any("lj-nogroup has no io cgroup" in w for w in slow.warnings)
        bare.close()
    finally:
        job.stop()
    assert not _mine("lj-limits")


KILLED_PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from test_longjob import _job
    from pathlib import Path
    job = _job(Path(sys.argv[2]), "lj-orphan").start()
    ready = job.wait("ready", 60)
    job.send({"child": True})
    print(ready["pid"], job.wait("child", 60)["pid"], flush=True)
    time.sleep(300)
""")


def test_kill_9_of_the_parent_leaves_no_process_and_no_cgroup(tmp_path):
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([longjob.LIB, tests, str(Path(tests).parent)])}
    parent = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, tests, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        job_pid, child = (int(x) for x in parent.stdout.readline().split())
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    assert wait_for(lambda: not process_alive(job_pid), 10)      # PDEATHSIG: the job went with its parent
    lines = leftovers.remove_leftovers()                          # the next run's sweep: cgroup and grandchild
    assert wait_for(lambda: not process_alive(child), 10), lines
    assert not [d for d in cgroups.leftover_dirs(owner_pid=parent.pid)]


def test_the_runs_cache_methods_are_the_rows_cache_method(params, tmp_path):  # noqa: F811
    from types import SimpleNamespace
    from storagebrief.core import cache

    sw = sweep.Sweep(_study(), params, tmp_path / "out", log=lambda *_: None)
    run = sweep.Run(sw, sw.targets[0], 1, "lj-cache-r1")
    data = tmp_path / "one" / "data.bin"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(os.urandom(1 << 20))
    assert run.evict([data], "dataset files") == "none (run.cold_cache is false)" == run.cache_method
    assert cache.cached_pages(data) > 0                            # run.cold_cache false: nothing evicted
    run.params = SimpleNamespace(run=SimpleNamespace(cold_cache=True))
    assert run.evict([data], "dataset files") == "fadvise_dontneed (dataset files)" == run.cache_method
    assert cache.cached_pages(data) == 0
    data.write_bytes(os.urandom(1 << 20))                          # written: dirty, then written back and evicted
    assert run.settle_written(data.parent).startswith("fadvise_dontneed (the run's checkpoint folder, after os.sync")
    assert cache.cached_pages(data) == 0
    assert run.cache_not_controlled() == "remote store: not controlled" == run.cache_method


@needs_blkio()
def test_a_lasting_throttle_outlives_the_run_and_ends_with_the_sweep(params, tmp_path):  # noqa: F811
    sw = sweep.Sweep(_study(), params, tmp_path / "out", log=lambda *_: None)
    slow = next(t for t in sw.targets if t.profile_name)
    if targets_mod.io_limits(slow) is None:
        pytest.skip("the target has no block device to throttle")
    run = sweep.Run(sw, slow, 1, "lj-lasting-r1")
    group = run.lasting_throttle("brokers")
    assert group is not None and run.emulated
    run.close()
    assert all(d.exists() for _, d in group.dirs.values())       # the brokers' later runs keep it
    sw.jobs.end_all()
    assert not group.dirs and not _mine("lj-lasting")
