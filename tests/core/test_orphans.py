"""Issue 20 ("Faults round 2"): nothing a run starts outlives it, and its temporary files stay in its
own folders.

* kill -9 of transfer-sweep just as fio forks its job process (unthrottled target, so no throttle
  cgroup): the job is orphaned, waiting on fio's start-up futex forever, until doctor --clean or the
  next run finds it (run cgroup, owner marker) and kills it;
* the same without any cgroup (the owner marker alone, as for a user who is not root);
* SIGTERM during the busy load's calibration leaves no storagebrief-load-* file in the temp folder;
* scratch folders of dead runs are removed, live ones kept.
(Profiles the kernel cannot hold: test_targets.py and test_cgroups.py; Open MPI's files: test_emulate_mpi.py.)
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from storagebrief.core import leftovers, procs
from conftest import REPO, process_alive, wait_for
from another_user import _as_nobody, _dead_pid, _plant, _stop, as_root, shared  # noqa: F401  (shared: a fixture)

ENV = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
FIO = shutil.which("fio") is not None
STRESS_NG = shutil.which("stress-ng") is not None


def _cli(*args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "storagebrief.cli", *args], cwd=REPO, env={**ENV, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _referencing(text: str) -> list[int]:
    """Running processes (not this one) whose command line names `text` (the test's folder)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmd and process_alive(int(d.name)):
                out.append(int(d.name))
    return out


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


# --------------------------------------------------------------------------- owner marker, no cgroup
ORPHAN_MAKER = textwrap.dedent("""
    import os, sys, time
    from storagebrief.core import procs
    # The child forks a grandchild that leaves the process group (as fio's job does, setsid) and
    # sleeps; PDEATHSIG covers only the child. No cgroup: the marker is the only way to find it.
    code = "import os, time\\nif os.fork() == 0:\\n    os.setsid(); time.sleep(300)\\nelse:\\n    time.sleep(300)"
    scope = procs.Scope("orphan-maker")
    proc = scope.popen([sys.executable, "-c", code, sys.argv[1]])
    time.sleep(1)
    print(proc.pid, flush=True)
    time.sleep(300)
""")


def test_owner_marker_finds_a_dead_runs_orphans_without_a_cgroup(tmp_path):
    maker = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER, str(tmp_path)], env=ENV, stdout=subprocess.PIPE,
                             text=True)
    child = int(maker.stdout.readline())
    tree = [p for p in _referencing(str(tmp_path)) if p != maker.pid]
    assert child in tree and len(tree) == 2, tree           # the child and its setsid grandchild
    os.kill(maker.pid, signal.SIGKILL)
    maker.wait()
    assert _wait(lambda: not process_alive(child), 10)      # PDEATHSIG: the direct child goes ...
    orphans = _referencing(str(tmp_path))
    assert len(orphans) == 1 and os.getsid(orphans[0]) == orphans[0]   # ... its grandchild stays
    lines = leftovers.remove_leftovers()
    assert any(f"of dead process {maker.pid}" in ln for ln in lines), lines
    assert _wait(lambda: not _referencing(str(tmp_path)), 10)


def test_scratch_folders_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    mine = procs.scratch_dir(tmp_path, "x")
    dead = subprocess.run([sys.executable, "-c", "import sys; from storagebrief.core import procs; "
                           "d = procs.scratch_dir(sys.argv[1], 'y'); (d / 'f').write_text('x'); "
                           "import os; os._exit(0)", str(tmp_path)], env=ENV)   # _exit: as kill -9, no atexit
    assert dead.returncode == 0
    (old,) = [d for d in tmp_path.glob(".storagebrief-tmp-y-*")]
    lines = leftovers.remove_leftovers([tmp_path])
    assert not old.exists() and mine.exists() and any(str(old) in ln for ln in lines)
    procs.remove_scratch(mine)
    assert not mine.exists()


# --------------------------------------------------------------------------- kill -9 as fio starts
SWEEP = {"block_sizes": ["4k"], "queue_depths": [1], "repeats": 3, "file_mib": 8, "runtime_s": 0.3,
         "ramp_time_s": 0.05, "loads": ["idle"], "forecast": {"emulate_dir": "/nonexistent"}}


def _sweep_params(tmp_path: Path, **ts) -> Path:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "a", "path": str(tmp_path / "a")}],   # unthrottled
                                 "transfer_sweep": {**SWEEP, **ts}}))
    return f


def _kill_as_fio_forks(f: Path, out: Path) -> int | None:
    """Start a sweep and kill -9 it the moment fio has forked its job process; the study's PID."""
    run = _cli("transfer-sweep", "--params", str(f), "--out", str(out), "--progress", "off")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        fios = [k for k in _children(run.pid) if _comm(k) == "fio"]
        if fios and _children(fios[0]):
            os.kill(run.pid, signal.SIGKILL)
            run.wait()
            return run.pid
    run.kill()
    run.wait()
    return None


@pytest.mark.e2e
@pytest.mark.skipif(not FIO, reason="fio is not installed")
def test_kill_9_as_fio_forks_on_an_unthrottled_target_leaves_no_orphan(tmp_path):
    f, out = _sweep_params(tmp_path), tmp_path / "out"
    dead = None
    for _ in range(5):              # the kill must land between fio's fork and its job's start
        pid = _kill_as_fio_forks(f, out)
        time.sleep(0.5)
        if pid is not None and _referencing(str(tmp_path)):
            dead = pid
            break
    assert dead is not None, "never caught fio forking its job; the orphan case was not exercised"
    # An orphaned fio job (PPID 1, waiting on fio's start-up futex) is there now. doctor --clean kills
    # it (on a shared machine another run's leftovers sweep may get there first: same code, same end).
    clean = _cli("doctor", "--clean")
    said, _ = clean.communicate(timeout=60)
    assert clean.returncode == 0, said
    assert _wait(lambda: not _referencing(str(tmp_path)), 10), f"doctor --clean left the orphaned fio job: {said}"
    assert not [d for d in leftovers._all_controller_dirs() for d in d.glob(f"storagebrief-*-{dead}-*")]
    # The next run: no half-written JSON of the killed run, no scratch folder of it, nothing left running.
    proc = _cli("transfer-sweep", "--params", str(f), "--out", str(out), "--progress", "off",
                "-S", "transfer_sweep.repeats=1")
    said, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, said[-2000:]
    assert not list((out / "fio").glob(".*.tmp")) and not list(out.glob(procs.SCRATCH_PREFIX + "*"))
    assert not _referencing(str(tmp_path))


# --------------------------------------------------------------------------- SIGTERM in calibration
@pytest.mark.skipif(not (FIO and STRESS_NG), reason="fio or stress-ng is not installed")
def test_sigterm_during_load_calibration_leaves_no_temp_files(tmp_path):
    systmp = tmp_path / "systmp"          # the study's system temp folder (TMPDIR), watched alone
    systmp.mkdir()
    f = _sweep_params(tmp_path, loads=["busy"], busy={"peak_seconds": 5, "calibrate_seconds": 1})
    out = tmp_path / "out"
    run = _cli("transfer-sweep", "--params", str(f), "--out", str(out), "--progress", "off",
               env={"TMPDIR": str(systmp)})
    assert _wait(lambda: any(_comm(k) == "stress-ng" for k in _children(run.pid)) or run.poll() is not None, 120)
    load = [k for k in _children(run.pid) if _comm(k) == "stress-ng"]
    assert load, "never caught the calibration running"
    time.sleep(0.5)
    run.send_signal(signal.SIGTERM)
    said, _ = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, said[-2000:]
    assert not [p.name for p in systmp.iterdir()], "temporary files left in the system temp folder"
    assert not list(out.glob(procs.SCRATCH_PREFIX + "*")), "the scratch folder outlived the run"
    assert _wait(lambda: not any(process_alive(p) for p in load), 10)


# --------------------------------------------------------------------------- the sweep leaves others' alone (issue 44)
@as_root
def test_the_sweep_removes_no_scratch_folder_and_kills_no_process_of_another_user(shared):
    dead = _dead_pid()
    theirs = shared / f"{procs.SCRATCH_PREFIX}mpi-{dead}-1"
    _plant(lambda: (theirs.mkdir(), (theirs / "data").write_text("theirs")))
    mine = shared / f"{procs.SCRATCH_PREFIX}mpi-{dead}-2"
    mine.mkdir()
    lines = procs.remove_dead_scratch(shared)
    assert (theirs / "data").read_text() == "theirs" and not mine.exists(), lines
    other = subprocess.Popen(["sleep", "60"], preexec_fn=_as_nobody,
                             env={**os.environ, procs.OWNER_ENV: f"{dead}:1:forged"})
    try:
        assert wait_for(lambda: procs.marker(other.pid) is not None, 10)
        lines = procs.kill_orphans()
        assert other.poll() is None and not any(f"process {other.pid} " in ln for ln in lines), lines
    finally:
        _stop(other)
