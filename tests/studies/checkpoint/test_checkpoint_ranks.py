"""checkpoint's forked ranks (studies/checkpoint/ranks.py, issue 36): bounded by the machine (the pids cgroup,
RLIMIT_NPROC, open files) and by the memory their buffers need, checked by `validate` and before any work; a fork
that fails anyway is one line and never hangs; a rank killed from outside is a clean exit 2. Each failed on
d545649."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml

from storagebrief.core import cgroup_tree, cgroups, config
from conftest import cli_run as _cli


SMALL = {"models": ["llama3-8b"], "scale": 65536, "saves": 1, "restores": 1, "pause_s": 0.0, "retain": 1,
         "write_block_mib": 1, "read_block_mib": 1, "readers_per_rank": 1, "repeats": 1, "cost": {"modes": []}}
SHAPE = {"layers": 2, "hidden": 64, "ffn": 128, "heads": 2, "kv_heads": 2, "vocab": 256, "tp": 1, "pp": 1, "dp": 2,
         "zero_stage": 1}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _params(tmp_path: Path, **ck) -> Path:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                                 "run": {"trace": False, "cold_cache": False}, "checkpoint": {**SMALL, **ck}}))
    return f


# --------------------------------------------------------------------------- bounded ranks, no hang
def test_a_shape_with_more_ranks_than_the_machine_allows_is_refused_by_validate(tmp_path):
    f = _params(tmp_path, models=["wide"], shapes={"wide": {**SHAPE, "dp": 100000}}, readers_per_rank=1)
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "100,000 ranks" in res.stderr and ("RLIMIT" in res.stderr or "pids.max" in res.stderr
                                               or "GiB" in res.stderr)


def _pids_cgroup(limit: int) -> Path | None:
    if os.geteuid() != 0:
        return None
    try:
        _, own = cgroup_tree.controller_dir("pids")
    except cgroups.CgroupUnavailable:
        return None
    d = own / f"storagebrief-test-pids-{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
        (d / "pids.max").write_text(str(limit))
    except OSError:
        return None
    return d


@pytest.mark.slow
def test_a_failed_fork_under_a_pids_limit_is_one_line_and_never_hangs(tmp_path):
    """Fork 64 ranks where the pids cgroup allows 30 (the preflight bypassed: a limit lowered after it):
    before, the CLI printed 'internal error: BlockingIOError' and hung in join()."""
    d = _pids_cgroup(30)
    if d is None:
        pytest.skip("needs root and a writable pids cgroup controller to lower the process limit")
    code = textwrap.dedent("""
        import sys
        from storagebrief.errors import error_line, expected
        from storagebrief.studies.checkpoint.ranks import RankPool
        try:
            with RankPool(list(range(64)), 1 << 16, store={"folder": "/nonexistent"}):   # opened, never written
                pass
        except Exception as exc:
            print(error_line(exc) if expected(exc) else f"BUG {type(exc).__name__}: {exc}", file=sys.stderr)
            sys.exit(2 if expected(exc) else 1)
    """)
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=ENV,
                                preexec_fn=lambda: (d / "cgroup.procs").write_text(str(os.getpid())))
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the run hung after a failed fork")
        assert proc.returncode == 2, err
        assert len(err.strip().splitlines()) == 1 and "fork failed" in err and "pids.max" in err
        for _ in range(100):
            if not (d / "cgroup.procs").read_text().split():
                break
            time.sleep(0.1)
        assert not (d / "cgroup.procs").read_text().split()            # every rank gone
    finally:
        for pid in (d / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        d.rmdir()


def test_the_budget_refuses_more_tasks_than_the_pids_limit_leaves(monkeypatch):
    from storagebrief.studies.checkpoint import ranks as budget
    monkeypatch.setattr(budget, "pids_left", lambda: (150, "pids.max 150 in /x (0 in use)"))
    p = config.validate({"targets": [{"name": "t", "path": "/nonexistent/t"}], "checkpoint": SMALL},
                        check_targets=False).section("checkpoint")
    big = p.model_copy(update={"models": ["llama3-405b"]})
    with pytest.raises(ValueError, match=r"llama3-405b forks 512 ranks, 1,536 tasks .* more than the 150 .*pids.max 150"):
        budget.check_budget(big)
    budget.check_budget(p)         # llama3-8b's 8 ranks: 24 tasks fit


# --------------------------------------------------------------------------- memory preflight
def test_rank_buffers_beyond_the_memory_the_run_may_use_are_refused_before_any_work(tmp_path, monkeypatch):
    from storagebrief.studies.checkpoint import ranks as budget
    monkeypatch.setattr(budget, "memory_left", lambda: (1 << 30, "the memory cgroup /x (limit 1.00 GiB)"))
    p = config.validate({"targets": [{"name": "t", "path": "/nonexistent/t"}], "checkpoint": SMALL},
                        check_targets=False).section("checkpoint")
    heavy = p.model_copy(update={"scale": 1.0, "readers_per_rank": 64, "read_block_mib": 1024})
    with pytest.raises(ValueError, match=r"llama3-8b's 8 ranks need .* GiB .*readers_per_rank 64 × read_block "
                                         r"1,024 MiB.* 1.00 GiB this run may use \(the memory cgroup"):
        budget.check_budget(heavy)


def test_validate_refuses_buffers_beyond_memavailable(tmp_path):
    f = _params(tmp_path, scale=1, readers_per_rank=64, read_block_mib=1024)
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and "GiB this run may use" in res.stderr and "readers_per_rank" in res.stderr


def _cmdline(pid: str) -> str:
    """A process's command line, or "" if it ended after pgrep listed it (a short-lived child of the run)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except FileNotFoundError:
        return ""


# --------------------------------------------------------------------------- a killed rank
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["directory", "s3"])
def test_a_rank_killed_from_outside_is_a_clean_exit_2(tmp_path, kind):
    """On an S3 target (the real local gateway) too: and the run's bucket, gateway and its entry are gone."""
    from storagebrief.core import s3gateway
    f = _params(tmp_path, pause_s=20, saves=2)
    if kind == "s3":
        try:
            s3gateway.binary()
        except s3gateway.GatewaySetupError as exc:
            pytest.skip(str(exc))
        doc = yaml.safe_load(f.read_text())
        doc["targets"] = [{"name": "obj", "path": str(tmp_path / "obj"), "kind": "s3", "s3": {}}]
        f.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "checkpoint", "--params", str(f), "--out",
                             str(out), "--progress", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    ranks = []
    for _ in range(1200):
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        ranks = [k for k in kids if "storagebrief.cli" in _cmdline(k)]
        if len(ranks) >= 8:
            break
        time.sleep(0.1)
    assert ranks, "no rank started"
    time.sleep(2)
    os.kill(int(ranks[-1]), signal.SIGKILL)
    killed = time.monotonic()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 2, err
    # the ranks sit in a 20 s pause: a watched pause ends the run at once (0.4 s here), not at the next barrier
    assert time.monotonic() - killed < 10, "the run noticed the dead rank only after the pause"
    assert len(err.strip().splitlines()) == 1 and "died: killed by signal 9" in err
    if kind == "s3":
        gw_root = tmp_path / "obj" / "storagebrief" / "s3gw"
        assert not [p for p in gw_root.iterdir() if p.name.startswith("sb-")]
        assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{proc.pid}-*.json"))
        assert not subprocess.run(["pgrep", "-f", str(gw_root)], capture_output=True, text=True).stdout.split()


# --------------------------------------------------------------------------- as a user held by RLIMIT_NPROC
NOBODY = 65534


def _as_limited_user(nproc: int) -> list[str]:
    """argv prefix running a command as an unprivileged user with `ulimit -u nproc`: as root, uid 65534 via
    setpriv under prlimit; without root, this user under prlimit."""
    import shutil
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) is not installed")
    if os.geteuid() != 0:
        return ["prlimit", f"--nproc={nproc}:{nproc}", sys.executable]
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                            "-c", "pass"], capture_output=True, cwd="/")
    if probe.returncode:
        pytest.skip(f"{sys.executable} cannot be run by uid {NOBODY}")
    return ["prlimit", f"--nproc={nproc}:{nproc}", "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
            "--clear-groups", sys.executable]


def _world_readable_dir() -> Path:
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="sb-nproc-"))
    os.chmod(base, 0o777)
    return base


def test_validate_as_a_user_under_rlimit_nproc_refuses_too_many_ranks():
    import shutil
    argv = _as_limited_user(40)
    base = _world_readable_dir()
    try:
        f = _params(base, models=["llama3-70b"], mode="default")        # 64 ranks, 192 tasks
        os.chmod(f, 0o644)
        res = subprocess.run([*argv, "-m", "storagebrief.cli", "validate", "--params", str(f)], capture_output=True,
                             text=True, timeout=120, cwd=base, env={**ENV, "HOME": str(base)})
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "RLIMIT_NPROC 40" in res.stderr and "llama3-70b forks 64 ranks" in res.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_a_failed_fork_under_rlimit_nproc_is_one_line_and_never_hangs():
    argv = _as_limited_user(30)
    code = textwrap.dedent("""
        import sys
        from storagebrief.errors import error_line, expected
        from storagebrief.studies.checkpoint.ranks import RankPool
        try:
            with RankPool(list(range(64)), 1 << 16, store={"folder": "/nonexistent"}):   # opened, never written
                pass
        except Exception as exc:
            print(error_line(exc) if expected(exc) else f"BUG {type(exc).__name__}: {exc}", file=sys.stderr)
            sys.exit(2 if expected(exc) else 1)
    """)
    res = subprocess.run([*argv, "-c", code], capture_output=True, text=True, timeout=120, cwd="/", env=ENV)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "fork failed" in res.stderr and "ulimit -u" in res.stderr
