"""Emulated accelerators as MPI ranks across two client hosts (network namespaces with sshd, one shared
filesystem: core.nethosts), as the README's multi-host recipe runs them (issue 23): both hosts in the
rows, the single-host figures, a remote rank's failure and a kill -9 leaving no rank on any host."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from storagebrief.core import config
from storagebrief.brief import assemble as report_brief
from storagebrief.studies.emulate import STUDY, run as emulate_run
from conftest import hosts_missing, mpi_missing, wait_for
from test_emulate import SMALL, _descendants_alive, params_dict

pytestmark = [pytest.mark.skipif(mpi_missing() is not None, reason=f"MPI unavailable: {mpi_missing()}"),
              pytest.mark.skipif(hosts_missing() is not None, reason=f"no test hosts: {hosts_missing()}"),
              pytest.mark.privileged, pytest.mark.e2e]

ACROSS = {**SMALL, "launcher": "mpi", "accelerators": [4], "epochs": 2, "num_files": 96, "repeats": 2}


def _section(hs, **extra) -> dict:
    return {**ACROSS, "mpi": {"hostfile": str(hs.hostfile(slots=2))}, **extra}


def _in_hosts(hs) -> list[str]:
    """Processes inside the hosts other than their sshd listeners: what a run left there."""
    left = []
    for h in hs.hosts:
        sshd = int(h.pidfile.read_text())
        for pid in subprocess.run(["ip", "netns", "pids", h.name], capture_output=True, text=True).stdout.split():
            if int(pid) != sshd:
                try:
                    left.append(f"{h.name}: {open(f'/proc/{pid}/cmdline').read().replace(chr(0), ' ')[:120]}")
                except OSError:
                    pass
    return left


@pytest.mark.slow
def test_ranks_on_two_hosts_give_the_one_host_figures(tmp_path, two_hosts, monkeypatch):
    one = STUDY.run(config.validate(params_dict(tmp_path, {**ACROSS}, cold_cache=False)), tmp_path / "one",
                    log=lambda *_: None)
    for k, v in two_hosts.mpi_env().items():
        monkeypatch.setenv(k, v)
    two = STUDY.run(config.validate(params_dict(tmp_path, _section(two_hosts), cold_cache=False)), tmp_path / "two",
                    log=lambda *_: None)
    assert set(two.hosts) == {2} and set(one.hosts) == {1}
    hosts = pd.read_csv(tmp_path / "two" / "hosts.csv")
    assert sorted(set(hosts.host)) == [h.name for h in two_hosts.hosts]
    assert (hosts.groupby("run_id").accelerators.sum() == 4).all()          # two ranks on each host
    assert (hosts.groupby("run_id").host.nunique() == 2).all()
    spread = max(one.au_percent.max() - one.au_percent.min(), two.au_percent.max() - two.au_percent.min(), 3.0)
    assert abs(two.au_percent.mean() - one.au_percent.mean()) <= 2 * spread, (one.au_percent, two.au_percent)
    assert two.samples_per_s.mean() == pytest.approx(one.samples_per_s.mean(), rel=0.15)
    assert (two.loader_bytes.values == one.loader_bytes.values).all()     # the same batches were read
    assert _in_hosts(two_hosts) == []
    _hosts_are_in_the_rows_inventory_and_appendix(tmp_path / "two", two, two_hosts, monkeypatch)


def _hosts_are_in_the_rows_inventory_and_appendix(out, frame, hs, monkeypatch):
    names = [h.name for h in hs.hosts]
    here = socket.gethostname()
    assert set(frame.host_roles) == {f"launcher {here}; ranks {names[0]} ×2, {names[1]} ×2"}
    inv = json.loads((out / "inventory.json").read_text())
    roles = {h["name"]: h["roles"] for h in inv["hosts"]}
    assert roles == {here: ["launcher"], names[0]: ["emulate: MPI ranks"], names[1]: ["emulate: MPI ranks"]}
    assert all(h["cpu_threads"] and h["memory_total_bytes"] and h["kernel"] for h in inv["hosts"])
    assert {h["hostname"] for h in inv["hosts"]} == {here, *names}          # each reported by that host
    tables = []
    monkeypatch.setattr(report_brief, "show_table", lambda df, *a, **k: tables.append(df))
    monkeypatch.setattr(report_brief, "show_html", lambda *a, **k: None)
    reports = out.parent / "reports"
    (reports / "emulate").mkdir(parents=True)
    shutil.copy(out / "inventory.json", reports / "emulate" / "inventory.json")
    report_brief.appendix_configuration(reports)
    hosts_table = [t for t in tables if "Host" in t.columns]
    assert len(hosts_table) == 1 and sorted(hosts_table[0].Host) == sorted([here, *names])


def test_a_rank_failing_on_the_remote_host_fails_the_run_and_leaves_no_rank(tmp_path, two_hosts, monkeypatch):
    for k, v in two_hosts.mpi_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(emulate_run, "FAULT", {"fail_rank": 3, "fail_at_step": 3})   # slots fill host 1 first
    p = config.validate(params_dict(tmp_path, _section(two_hosts, repeats=1), cold_cache=False))
    with pytest.raises(RuntimeError, match="MPI ranks failed during the run"):
        STUDY.run(p, tmp_path / "out", log=lambda *_: None)
    assert wait_for(lambda: _in_hosts(two_hosts) == [], 15), _in_hosts(two_hosts)
    assert _descendants_alive(str(tmp_path / "fast")) == []


def test_kill_9_of_the_study_leaves_no_orted_or_rank_on_any_host(tmp_path, two_hosts):
    pf = tmp_path / "params.yaml"
    pf.write_text(yaml.safe_dump(params_dict(tmp_path, _section(two_hosts, repeats=1, epochs=60), cold_cache=False)))
    code = "import sys; from storagebrief.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "emulate", "--params", str(pf), "--out", str(tmp_path / "o")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **two_hosts.mpi_env()})
    try:
        assert wait_for(lambda: len([x for x in _in_hosts(two_hosts) if "storagebrief.kit.ranks_mpi" in x]) >= 4
                        or proc.poll() is not None, 120), "the ranks never started on both hosts"
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert wait_for(lambda: _in_hosts(two_hosts) == [], 30), _in_hosts(two_hosts)
    assert wait_for(lambda: _descendants_alive(str(tmp_path / "fast")) == [], 15)
    assert not (tmp_path / "o" / "runs.csv").exists()
