"""A client process is judged against the cores it can use (kit/client_bound, through kit/s3study's rule): a real
Python process that keeps one core busy is client-bound on any machine, one well below a core is not."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from storagebrief.kit import client_bound, s3study
from conftest import REPO

# A real client-shaped process: `threads` Python threads that either spin (interpreter-bound work, like boto3
# parsing responses) or mostly sleep (a client waiting on its store), measured by the process itself.
PROCESS = r"""
import json, sys, threading, time
from storagebrief.kit.client_bound import SelfMeter
threads, mode = int(sys.argv[1]), sys.argv[2]
done = threading.Event()
def work():
    while not done.is_set():
        if mode == "sleep":
            time.sleep(0.05)
meter = SelfMeter().start()
pool = [threading.Thread(target=work) for _ in range(threads)]
[t.start() for t in pool]
time.sleep(1.0)
got = meter.stop(threads, interpreter_bound=True, label="worker")     # its threads still alive, as s3ops does
done.set()
[t.join() for t in pool]
print(json.dumps(got.as_dict()))
"""


def _measured(threads: int, mode: str) -> client_bound.ProcessCPU:
    out = subprocess.run([sys.executable, "-c", PROCESS, str(threads), mode], capture_output=True, text=True,
                         timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "lib")}, check=True)
    return client_bound.ProcessCPU(**json.loads(out.stdout))


def _row(p: client_bound.ProcessCPU, **more) -> dict:
    return {"wall_seconds": p.wall_seconds, "client_cpu_seconds": p.cpu_seconds,
            "client_processes": [p.as_dict()], **more}


def test_a_python_client_saturating_one_core_is_client_bound_though_the_machine_has_more():
    # one thread spinning: on a CPU or ready for one the whole time, however loaded the machine is
    p = _measured(1, "spin")
    assert p.usable_cores == 1 and p.cores_wanted > 0.85, p
    bound, why = client_bound.judge([p])
    assert bound, why
    assert "of 1 usable core" in why
    label, reason = s3study.judge_row(_row(p, access="S3 local gateway", gateway_cpu_seconds=0.1))
    assert label == "client CPU"                  # before: only at 80 % of *all* CPUs, never for one process on 2+
    assert "worker" in reason and "gateway 0.10 CPU-s" in reason
    assert s3study.limited_by(_row(p)) == "client CPU"


def test_a_client_well_below_a_core_is_not_client_bound():
    p = _measured(4, "sleep")
    bound, why = client_bound.judge([p])
    assert not bound and p.cores_wanted < 0.5, why
    assert s3study.judge_row(_row(p, access="S3 external"))[0] == ""
    assert "gateway CPU not measured (external)" in s3study.judge_row(_row(p, access="S3 external"))[1]


def test_usable_cores_one_per_interpreter_else_threads_within_the_cpus_it_may_use():
    cpus = len(os.sched_getaffinity(0))
    assert client_bound.usable_cores(32, interpreter_bound=True) == 1
    assert client_bound.usable_cores(32, interpreter_bound=False) == min(32, cpus)
    assert client_bound.usable_cores(1, interpreter_bound=False) == 1


def test_one_saturated_process_of_several_makes_the_row_client_bound_and_each_is_named():
    idle = client_bound.ProcessCPU(0.1, 2.0, 1.0, label="worker 1")
    busy = client_bound.ProcessCPU(1.9, 2.0, 1.0, label="worker 2")
    bound, why = client_bound.judge([idle, busy])
    assert bound and "worker 1" in why and "worker 2" in why
    assert not client_bound.judge([idle])[0]
    starved = client_bound.ProcessCPU(0.6, 2.0, 1.0, thread_runnable_seconds=1.9, waited_seconds=1.3, label="worker")
    bound, why = client_bound.judge([starved])
    assert bound and "starved" in why
    # many threads' run-queue waits overlap: their sum is no evidence of a process wanting a core
    many = client_bound.ProcessCPU(0.5, 2.0, 1.0, thread_runnable_seconds=0.3, waited_seconds=6.0, label="worker")
    assert not client_bound.judge([many])[0]


def test_the_ready_sampler_sees_a_spinning_process_ready_and_a_sleeping_one_not():
    """Sampled from this process, as the object sweep samples its workers: a process that always has CPU work is
    ready (on a CPU or in the run queue) in nearly every sample however loaded the machine is; one that waits
    is not."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    nap = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)                                   # both started
        with client_bound.ReadySampler([spin.pid, nap.pid], period_s=0.01) as s:
            time.sleep(1.0)
        got = s.fractions()
    finally:
        for p in (spin, nap):
            p.kill()
            p.wait()
    assert got[spin.pid] > 0.9 and got[nap.pid] < 0.2, got
    assert client_bound.ready_now(spin.pid) is None       # gone: no sample counted
    assert client_bound.ReadySampler([spin.pid]).fractions() == {}    # too few samples to say


def test_a_client_that_always_had_work_ready_is_client_bound_though_it_got_less_than_a_core():
    """A boto3 PUT worker beside the gateway on 2 CPUs: 0.78 of a core used, no one thread ready long (its work
    moves between 8 threads), but a thread of it ready in 94 % of the samples: it never waited on the store."""
    p = client_bound.ProcessCPU(4.1, 5.3, 1.0, thread_runnable_seconds=1.5, waited_seconds=2.0, label="put worker",
                                pid=4242, ready_fraction=None)
    assert not client_bound.judge([p])[0]
    sampled = client_bound.ProcessCPU(**client_bound.add_ready([p.as_dict()], {4242: 0.94})[0])
    bound, why = client_bound.judge([sampled])
    assert bound and "starved" in why and "in 94% of the samples" in why, why
    label, _ = s3study.judge_row(_row(sampled, access="S3 local gateway", gateway_cpu_seconds=2.7))
    assert label == "client CPU"
    waiting = client_bound.ProcessCPU(**client_bound.add_ready([p.as_dict()], {4242: 0.55})[0])
    assert not client_bound.judge([waiting])[0]           # idle between responses: the store set the pace


def test_client_and_gateway_count_the_cpu_the_client_wanted_not_only_what_it_got(monkeypatch):
    """PUT 1M c8 beside the gateway on 2 CPUs: the client used 0.69 of a core and had a thread ready in 83 % of the
    samples, the gateway 0.89 cores: together they wanted 86 % of both CPUs, though they got 79 %."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    sampled = client_bound.ProcessCPU(0.46, 0.67, 1.0, label="put worker", pid=1, ready_fraction=0.83)
    label, why = s3study.judge_row(_row(sampled, access="S3 local gateway", gateway_cpu_seconds=0.60))
    assert label == "client + gateway CPU" and "together 86 % of all 2 CPUs" in why, why
    unsampled = client_bound.ProcessCPU(0.46, 0.67, 1.0, label="put worker")       # what it got: 79 %
    assert s3study.judge_row(_row(unsampled, access="S3 local gateway", gateway_cpu_seconds=0.60))[0] == ""


def test_a_client_at_its_own_ceiling_is_client_cpu_on_a_busy_machine_and_machine_cpu_only_below_it(monkeypatch):
    """Issue 58: the client's own budget first. A Go worker with 3 requests in flight on 16 CPUs (usable 3 cores)
    at 2.7 of them is `client CPU` though every CPU was 97 % busy; at 1.2 of them the busy machine is named."""
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    at_ceiling = client_bound.ProcessCPU(5.4, 2.0, 3.0, label="put worker (Go)")
    assert s3study.judge_row(_row(at_ceiling), machine_busy_percent=97.0)[0] == "client CPU"
    below = client_bound.ProcessCPU(2.4, 2.0, 3.0, label="put worker (Go)")
    assert s3study.judge_row(_row(below), machine_busy_percent=97.0)[0] == "machine CPU (97 % busy)"
    assert s3study.judge_row(_row(below), machine_busy_percent=50.0)[0] == ""


def test_a_pool_at_the_cores_it_can_use_together_is_client_bound_though_no_process_is(monkeypatch):
    """Two Go workers, each free to use both CPUs the pool may run on, each at 0.9 of a core: neither at 85 % of
    its own 2 cores, the pool at 1.8 of the 2 it can use together."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    pool = [client_bound.ProcessCPU(1.8, 2.0, 2.0, label=f"worker {i}") for i in range(2)]
    assert client_bound.pool_cores(pool) == 2.0
    bound, why = client_bound.judge(pool)
    assert bound and "together 1.80 of the 2 cores the 2 processes can use" in why, why
    assert not client_bound.judge(pool[:1])[0]                     # one of them alone: 0.9 of its 2 cores
    calm = [client_bound.ProcessCPU(1.2, 2.0, 2.0, label=f"worker {i}") for i in range(2)]
    assert not client_bound.judge(calm)[0]                         # 1.2 of 2
    assert client_bound.judge(calm, cpus=1.2)[0]                   # a pool held to 1.2 CPUs used them all
