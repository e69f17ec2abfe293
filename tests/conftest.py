"""Shared fixtures: a small params file with targets inside the test's tmp dir."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from storagebrief import studies
from storagebrief.core import cache, cgroup_tree

REPO = Path(__file__).resolve().parents[1]
# Every Kafka broker the suite starts (about 15 clusters of one to three JVMs) runs without the C2 compiler: ~40 %
# less CPU to start one (measured on the brokers' stop test: 23.4 -> 13.6 s user). Kafka's own variable
# (cluster.JVM_OPTIONS_ENV), which a user's shell may set too; the runs note it, and the tests' subprocesses inherit it.
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:TieredStopAtLevel=1")
# No study run in the suite drops the whole machine's page cache: each evicts its own files (run.cold_cache: files,
# core/cache.py FILES_ENV). A drop_caches by one test emptied what the tests beside it held cached on purpose (a
# baseline's second epoch, a probe's file, a page-cache cap's residency: they ran alone for it) and made every other
# process re-read its libraries. The tests of drop_caches itself unset it (monkeypatch.delenv) and run alone.
os.environ.setdefault(cache.FILES_ENV, "files")

# two workers, serial tests alone, the per-test budget (tests/suite.py); imported as a plugin before any test
# module imports it, or pytest warns that it cannot rewrite its asserts
pytest_plugins = ["suite"]

# A test run started in the background by a shell without job control (`make test &`, some CI
# runners) inherits SIGINT ignored, and so would every child it starts: the Ctrl-C tests would see
# runs that cannot be interrupted. Restore Python's own handler (exec'd children then get SIGINT's default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _controller(name: str) -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root to create cgroups"
    state = cgroup_tree.capabilities()[name]
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


def gateway_missing() -> str | None:
    """Why the local S3 gateway (versitygw) cannot run here (`make s3` builds it), or None."""
    from storagebrief.core import s3gateway
    try:
        s3gateway.binary()
        return None
    except s3gateway.GatewaySetupError as exc:
        return str(exc)


def needs_gateway(fn):
    why = gateway_missing()
    return pytest.mark.skipif(why is not None, reason=str(why))(fn)


@contextlib.contextmanager
def tmpfs_at(mnt: Path, size: str, label: str):
    """A tmpfs of `size` mounted at `mnt` (made here; root), unmounted afterwards."""
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", label, str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_fs(tmp_path):
    """A 16 MiB tmpfs as the target's filesystem (root), unmounted afterwards."""
    with tmpfs_at(tmp_path / "small", "16m", "storagebrief-test-full") as mnt:
        yield mnt


def process_alive(pid: int) -> bool:
    """True while pid runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@functools.cache     # asked by eight test files at collection: `mpirun --version` took 0.37 s a time
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



def bare_project(tmp_path: Path) -> Path:
    """tmp_path/proj: a project as config.project_root finds one (params.yaml and dvc.yaml), nothing else in it."""
    root = tmp_path / "proj"
    root.mkdir()
    for marker in ("params.yaml", "dvc.yaml"):
        (root / marker).write_text("{}\n")
    return root


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


def cli_run(*args, timeout=300, cwd=None):
    """`storagebrief <args>` run to its end in a fresh interpreter that imports what this one does: the finished
    process (stdout and stderr as text)."""
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def one_line(res) -> str:
    """The one line a finished process said on stderr (the test fails when it said more)."""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def run_study(command: str, tmp_path: Path, data: dict, timeout: float = 600):
    """`storagebrief <command>` on params.yaml = `data` in tmp_path, results in tmp_path/out: the finished process."""
    import subprocess
    import sys
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", command, "--params", str(tmp_path / "params.yaml"),
                           "--out", str(tmp_path / "out"), "--progress", "off"], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})


@pytest.fixture
def params_file(tmp_path):
    def make(**preprocess) -> Path:
        f = tmp_path / "params.yaml"
        f.write_text(yaml.safe_dump(base_params(tmp_path, **preprocess)))
        shutil.copytree(REPO / "params", tmp_path / "params", dirs_exist_ok=True)
        return f
    return make


@functools.cache
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


# The report tests' shared inputs: one tiny `dvc repro` of every study in a copy of the repository
# (session-wide: the end-to-end test and the layout test read the same brief).
# Tiny values per study section: the chain runs in about a minute or two.
TINY = {
    "preprocess": {"image_count": 6, "image_counts": [3], "processes": [1, 2], "image_width": 640,
                   "image_height": 480, "repeats": 2, "resize_width": 64, "resize_height": 64},
    "emulate": {"accelerators": [1, 2], "repeats": 1, "epochs": 1, "num_files": 200, "memory_limit_mib": 16},
    # 32x32 inputs (quick: 64): a step a quarter of the compute; the chain's readers ask for the runs, the page-cache
    # cap and the re-arming, not for convergence (test_carried_loss.py trains at the quick profile's 64x64)
    "train_resnet50": {"dataset": "generated", "dataset_images": 48, "record_kib": 64, "batch_size": 8, "input_size": 32,
                       "memory_limits": ["none", "2.5:1"], "parallel_models": [1], "parallel_memory": "none",
                       "ingest_mb_per_s": 0,
                       "checkpoint_every_steps": 0},
    "transfer_sweep": {"block_sizes": ["4k", "1m"], "queue_depths": [1, 4], "repeats": 2, "file_mib": 16,
                       "runtime_s": 0.3, "ramp_time_s": 0.05,
                       "busy": {"peak_seconds": 0.5, "calibrate_seconds": 0.5, "settle_s": 0.1}},
    # one Kafka node per target: a replicated cluster is the stream study's own tests' (three nodes, rf 3)
    "stream_inference": {"videos": ["144p@12"], "duration_s": 2, "streams": [1], "topics": [1], "partitions": [2],
                         "brokers": 1, "replication_factors": [1], "broker_heap_mib": 256, "drain_timeout_s": 15,
                         "input_size": 32, "batch_size": 8},
    "checkpoint": {"scale": 65536, "saves": 2, "restores": 2, "pause_s": 0.05, "write_block_mib": 1,
                   "read_block_mib": 1, "readers_per_rank": 2,
                   "cost": {"modes": ["none", "sync", "async"], "intervals_steps": [2], "steps": 6,
                            "compute_s": 0.02, "files": 2},
                   # the framework sweep: every scenario once, one TensorFlow job, a tiny BERT
                   "framework": {"scenarios": ["default", "every", "limited", "ingest"], "steps": 4,
                                 "every_steps": 1, "default_every_steps": 2, "layers": 1, "hidden": 32, "heads": 2,
                                 "ffn": 64, "seq_len": 16, "vocab": 512, "predictions": 4, "batch_size": 2,
                                 "memory_headroom_mib": 96, "ingest_mb_per_s": 5}},
    # the study's tiny settings, and the prefill measured at two short contexts (the brief's break-even part)
    "kv_cache": {**studies.get("kv_cache").tiny,
                 "prefill": {"measure": True, "layers": 1, "contexts": [64, 128], "repeats": 1}},
    "object_sweep": {"object_sizes": ["64k", "1m"], "mib_per_point": 4, "repeats": 2},
    "vector_search": studies.get("vector_search").tiny,      # 2,000 x 16 vectors: seconds, not the quick ~50 s
}

# The studies that borrow MLPerf Storage's name (issue 60): their command and the MLPerf benchmark type they export.
MLPERF_STUDIES = {"emulate": ("emulate", "training"), "checkpoint": ("checkpoint", "checkpointing"),
                  "kv_cache": ("kv-cache", "kv_cache"), "vector_search": ("vector-search", "vector_database")}


# params.yaml's run section as whole-run tests use it: a fine monitor, and no re-run of a disturbed run (the suite's
# own workers disturb nearly every run: a re-run would add a run and a row to each; core/test_sweep.py and
# tests/core/test_reruns.py test re-runs)
TINY_RUN = {"monitor_interval_s": 0.1, "rerun_disturbed": 0}


def mlperf_tiny_params(work: Path, study: str) -> dict:
    """One MLPerf-named study's params: TINY, fewer runs, no side sweeps, on a target of its own under work (the
    same disk: a study waits for another that uses its target, so with one each they run side by side)."""
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["targets"] = [{"name": study, "path": str(work / "t" / study)}]
    p["run"].update(TINY_RUN)
    for section in MLPERF_STUDIES:
        p[section].update(TINY[section])
        if section != "vector_search":
            p[section]["client_check"] = False
    p["emulate"]["accelerators"] = [1]
    p["kv_cache"].update({"prefill": {"measure": False}, "repeats": 1})
    p["checkpoint"].update({"saves": 1, "restores": 1})
    p["checkpoint"]["cost"]["modes"] = []
    p["checkpoint"]["framework"]["scenarios"] = []
    p["vector_search"].update({"search_list": [10], "uniform_control": False})
    return p


def run_mlperf_tiny(work: Path, timeout: float = 300) -> Path:
    """The four MLPerf-named studies at mlperf_tiny_params, side by side; results in work/reports/<study>/ (returned:
    work/reports). Raises AssertionError naming a study that failed, with its last output."""
    (work / "t").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    procs = {}
    for s, (cmd, _) in MLPERF_STUDIES.items():
        (work / f"params-{s}.yaml").write_text(yaml.safe_dump(mlperf_tiny_params(work, s)))
        procs[s] = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", cmd, "--params",
                                     str(work / f"params-{s}.yaml"), "--out", str(work / "reports" / s),
                                     "--progress", "off"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
    for s, p in procs.items():
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"{s}: {out[-1500:]}"
    return work / "reports"

def _copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dst / f)



def _build_tiny_chain(tmp_path: Path) -> dict:
    work = tmp_path / "repo"
    _copy_repo(work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (tmp_path / "t").mkdir()   # storagebrief creates only the last component of a target path
    params["targets"][0]["path"] = str(tmp_path / "t" / "local")
    params["targets"][1]["path"] = str(tmp_path / "t" / "hdd")
    params["run"].update(TINY_RUN)
    for section, values in TINY.items():
        params[section].update(values)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run = _chain_runner(work)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        assert run(*cmd).returncode == 0
    res = run("dvc", "repro")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {"work": str(work), "stdout": res.stdout, "stderr": res.stderr}


def _chain_runner(work: Path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return lambda *cmd: subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="session")
def tiny_chain(request):
    """`dvc repro` of the tiny profile in a copy of the repository, built once per test run (both xdist workers
    read the same one: tests/suite.py's built_once): work (its folder), res (the run's stdout and stderr) and
    run(*cmd) (a command in that folder). Its readers only read it."""
    from suite import built_once        # the plugin pytest_plugins loaded (imported here, not above: see there)
    got = built_once(request, "tiny_chain", _build_tiny_chain)
    work = Path(got["work"])
    res = SimpleNamespace(returncode=0, stdout=got["stdout"], stderr=got["stderr"])
    return SimpleNamespace(work=work, res=res, run=_chain_runner(work))


def notebook_outputs(nb: dict) -> tuple[list[dict], str]:
    """An executed notebook's (JSON) error outputs, and all its outputs' text as one string."""
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    text = "\n".join("".join(o.get("text", "")) + json.dumps(o.get("data", {})) + "".join(o.get("traceback", []))
                     for o in outputs)
    return [o for o in outputs if o["output_type"] == "error"], text


def pin_without_cgroup(monkeypatch, seen: Path) -> None:
    """The client check as for a user who may not make cgroups: confinement falls back to sched_setaffinity, and
    each worker the launcher starts (kit.ranks, its apply_affinity) records the CPUs it ended up on in `seen`/<pid>."""
    from storagebrief.core import cpu_confine      # the engine's (run.confine_cpus)
    from storagebrief.kit import client_check, ranks
    monkeypatch.setattr(cpu_confine, "confine", lambda name, cpus, group=None: cpu_confine.Confinement(
        cpus, cpu_confine.AFFINITY, reason="no cgroup: test", affinity=list(cpus)))
    seen.mkdir()

    def pinned(cpus):
        client_check.apply_affinity(cpus)
        (seen / str(os.getpid())).write_text(",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    monkeypatch.setattr(ranks, "apply_affinity", pinned)
