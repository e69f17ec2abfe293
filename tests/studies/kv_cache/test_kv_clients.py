"""kv_cache's clients (studies/kv_cache/clients.py, issue 44): budgeted before any work (memory against the cgroup
limit and MemAvailable, tasks against pids.max) by `validate` and by the KV run only, not by a load of params; a
client the OOM killer took names the cgroup's limit; a stopped client ends the run in one line within a bounded
time. Each failed on the code as found (fdbeda7)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from storagebrief.core import config, machine_fit
from storagebrief.kit import budget
from storagebrief.studies.kv_cache import clients
from child_cgroup import ENV, child_cgroup, cli_in, run_in
from conftest import REPO


SMALL = {"run": ["w"], "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 2, "concurrency": 2}},
         "clients": 2, "contexts": [{"tokens": 16, "weight": 1}], "turns": [{"tokens": 3, "weight": 1}],
         "turn_tokens": 8, "duration_s": 0.4, "repeats": 1, "write_block_mib": 1, "prefill": {"measure": False}}
# the probe's heavy setting: 4 clients × (a 0.5 GiB CPU tier + 125 MiB caches), OOM-killed in an 800 MB cgroup
HEAVY = {**SMALL, "clients": 4, "contexts": [{"tokens": 1000, "weight": 1}],
         "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 4, "concurrency": 2, "cpu_tier_gib": 0.5}}}


def _params(tmp_path, section) -> str:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}],
                                 "run": {"trace": False, "cold_cache": False}, "kv_cache": section}))
    return str(f)


# --------------------------------------------------------------------------- the budget, by validate and the run
def test_validate_refuses_clients_beyond_the_memory_cgroup_with_the_numbers(tmp_path):
    f = _params(tmp_path, HEAVY)
    with child_cgroup("memory", {"memory.limit_in_bytes": 800 << 20}) as d:
        res = cli_in(d, "validate", "--params", f)
        run = cli_in(d, "kv-cache", "--params", f, "--out", str(tmp_path / "out"), "--progress", "off")
    for r in (res, run):
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "kv_cache.clients = 4 (workload w) need" in r.stderr and "cpu_tier_gib 0.5 GiB" in r.stderr
        assert f"GiB this run may use (the memory cgroup {d} (limit 0.78 GiB" in r.stderr
    assert not (tmp_path / "t").exists()                    # refused before any work


def test_validate_refuses_more_clients_than_the_pids_limit_leaves(tmp_path):
    """The probe's 64 clients under pids.max 40: the run died on EAGAIN; now validate names the limit."""
    f = _params(tmp_path, {**SMALL, "clients": 64})
    with child_cgroup("pids", {"pids.max": 40}) as d:
        res = cli_in(d, "validate", "--params", f)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "kv_cache.clients = 64 (workload w), 256 tasks (64 × (2 + concurrency 2))" in res.stderr
    assert f"pids.max 40 in {d}" in res.stderr


def test_the_budget_counts_every_clients_buffers_and_tier():
    p = config.validate({"targets": [{"name": "t", "path": "/nonexistent/t"}], "kv_cache": HEAVY},
                        check_targets=False).section("kv_cache")
    entry = p.largest_entry_bytes("w")                       # 1,016 tokens × 128 KiB
    per = (1 << 20) + entry + 2 * (1 << 20) + (1 << 29) + 2 * entry + budget.PROCESS_OWN_BYTES
    fits = budget.Room(None, None, (1 << 20, ""), (int(4 * per / budget.MEMORY_SHARE) + 1, "MemAvailable"))
    clients.check_budget(p, fits)
    short = budget.Room(None, None, (1 << 20, ""), (int(4 * per / budget.MEMORY_SHARE) - (1 << 20), "MemAvailable"))
    with pytest.raises(ValueError, match=r"kv_cache.clients = 4 \(workload w\) need .*MemAvailable"):
        clients.check_budget(p, short)


def test_a_section_beyond_this_machine_loads_and_stops_only_its_own_run(tmp_path, monkeypatch):
    """Paper-scale KV caches need ~29 GiB available; on this 24 GiB machine that refusal stopped every study's
    load (the budget was a section validator). It is `validate`'s and the KV run's, not another study's."""
    monkeypatch.setattr(budget, "memory_left", lambda: (512 << 20, "a test's 512 MiB"))
    data = {"targets": [{"name": "t", "path": str(tmp_path / "t")}], "kv_cache": HEAVY,
            "object_sweep": {"object_sizes": ["4k"], "concurrency": [1], "loads": ["idle"]}}
    p = config.validate(data)                                  # loads: another study's run is not stopped
    machine_fit.check_machine(p, ["object_sweep"])
    with pytest.raises(config.ParamsError, match=r"kv_cache.clients = 4 \(workload w\) need .*a test's 512 MiB"):
        machine_fit.check_machine(p)


# --------------------------------------------------------------------------- a client the OOM killer took
_LAUNCH = textwrap.dedent("""
    import sys
    from pathlib import Path
    from storagebrief.core import config
    from storagebrief.errors import error_line, expected
    from storagebrief.kit.launch import open_launch
    from storagebrief.studies.kv_cache import clients, run
    section = {SECTION}
    p = config.validate({{"targets": [{{"name": "t", "path": "{TMP}/t"}}], "kv_cache": section}},
                        check_targets=False).section("kv_cache")          # no budget: as if memory shrank after it
    Path("{TMP}/t").mkdir(exist_ok=True)
    spec = run._spec(p, "w", Path("{TMP}/t"))
    try:
        with open_launch(clients.WORKER, range(p.clients), spec) as launch:
            launch.operate(timeout_s=300)
    except Exception as exc:
        print(error_line(exc) if expected(exc) else f"BUG {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
        sys.exit(2 if expected(exc) else 1)
""")


@pytest.mark.slow
def test_a_client_killed_by_the_oom_killer_names_the_client_the_signal_and_the_cgroups_limit(tmp_path):
    code = _LAUNCH.format(SECTION=repr({**HEAVY, "duration_s": 10}), TMP=tmp_path)
    with child_cgroup("memory", {"memory.limit_in_bytes": 800 << 20}) as d:
        res = run_in(d, [sys.executable, "-c", code], timeout=300)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "kv_cache client" in res.stderr and "died: killed by signal 9 (SIGKILL) by the OOM killer" in res.stderr
    assert f"the memory cgroup {d} (limit 0.78 GiB" in res.stderr


# --------------------------------------------------------------------------- a stopped client
@pytest.mark.slow
def test_a_stopped_client_is_named_and_ends_the_run_in_bounded_time(tmp_path):
    """SIGSTOP on a client: before, the study waited 20 × duration + 600 s in silence (here 1,200 s)."""
    from conftest import descendants, process_alive
    f = _params(tmp_path, {**SMALL, "duration_s": 30})
    run = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "kv-cache", "--params", f, "--out",
                            str(tmp_path / "out"), "--progress", "off"], cwd=REPO, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, env=ENV)
    root = tmp_path / "t" / "storagebrief" / "kv_cache"
    deadline = time.monotonic() + 120
    while not list(root.rglob("*.kv")) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    kids = [p for p in descendants(run.pid) if "storagebrief.cli" in open(f"/proc/{p}/cmdline").read()]
    assert kids, "no client started"
    family = descendants(run.pid)
    os.kill(kids[-1], signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, err = run.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        run.kill()
        os.kill(kids[-1], signal.SIGKILL)
        pytest.fail("the run waited on a stopped client")
    assert time.monotonic() - stopped < 30
    assert run.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert f"(pid {kids[-1]}) is stopped (state T in /proc" in err and "kv_cache client" in err
    deadline = time.monotonic() + 30
    while any(process_alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in family if process_alive(p)], "a client outlived the run"
    assert not list(root.rglob("*.kv"))


# a full target names the target and the file: test_kv_cache_runs.py::test_a_target_that_fills_mid_run_is_a_failed_row_and_left_clean


# --------------------------------------------------------------------------- hints name knobs the workload has
def _kv(section: dict):
    return config.validate({"targets": [{"name": "t", "path": "/nonexistent/t"}], "kv_cache": section},
                           check_targets=False).section("kv_cache")


MLPERF_OWN = {"w": {"family": "mlperf", "model": "llama3.1-8b", "users_per_client": 3, "cpu_tier_gib": 0.5}}


@pytest.mark.parametrize("room", ["memory", "tasks"])
@pytest.mark.parametrize("run,workloads,named,absent", [
    ("mlperf-closed-2", {}, ["kv_cache.clients", "MLPerf's 100 users per client", "family: mlperf"],
     ["concurrency", "workloads.mlperf-closed-2"]),
    ("w", MLPERF_OWN, ["kv_cache.clients", "workloads.w.users_per_client"], ["concurrency"]),
    ("w", HEAVY["workloads"], ["kv_cache.clients", "workloads.w.concurrency"], ["users_per_client"]),
])
def test_a_refusal_names_only_knobs_the_workload_has(run, workloads, named, absent, room):
    """A closed-2 preset that did not fit was told to lower `concurrency`, a knob the mlperf family lacks."""
    p = _kv({**SMALL, "run": [run], "workloads": workloads})
    short = (budget.Room(None, None, (1 << 20, ""), (1 << 20, "MemAvailable")) if room == "memory" else
             budget.Room((3, "pids.max 3"), None, (1 << 20, ""), None))
    with pytest.raises(ValueError) as e:
        clients.check_budget(p, short)
    msg = str(e.value)
    assert "\n" not in msg and all(n in msg for n in named) and not any(a in msg for a in absent), msg


def test_a_presets_cpu_tier_beyond_ram_names_no_workloads_key_it_lacks():
    with pytest.raises(Exception) as e:
        _kv({**SMALL, "run": ["mlperf-closed-2"], "workloads": {}, "clients": 1000})
    assert "mlperf-closed-2's cpu_tier_gib (MLPerf's; lower kv_cache.clients) = 4" in str(e.value), str(e.value)
    assert "workloads.mlperf-closed-2" not in str(e.value)
