"""The object sweep's worker (the compiled s3worker, issue 58) and its budget (studies/object_sweep/worker.py, issue
44): a GET worker holds no body and a PUT worker one copy, so the budget's arithmetic holds; an object beyond the memory the run may use is refused by
`validate` and the run, with the numbers; one that fits runs where it was OOM-killed. Each failed on the code as
found (fdbeda7)."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from child_cgroup import child_cgroup, cli_in
from peak_memory import MIB, OBJECT, _peak_kib
from storagebrief.kit import s3worker
from storagebrief.studies.object_sweep.worker import GO


def _worker_peak(cfg: dict) -> tuple[dict, int]:
    """The compiled worker as the study starts it: its 'done' event and its peak RSS (VmHWM) read while it waits
    for its next command."""
    proc = subprocess.Popen([str(s3worker.binary()), "{}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(json.dumps(cfg) + "\n" + json.dumps(GO) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"event": "ready"}
        done = json.loads(proc.stdout.readline())
        peak = next(int(line.split()[1]) for line in open(f"/proc/{proc.pid}/status") if line.startswith("VmHWM:"))
        proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    return done, peak * 1024


@pytest.mark.skipif(s3worker.missing() is not None, reason=str(s3worker.missing()))
def test_a_get_worker_holds_no_body_and_a_put_worker_one(tmp_path):
    """The compiled worker on a directory: a PUT holds its one body, a GET none (1 MiB a request in flight)."""
    cfg = {"size": OBJECT, "concurrency": 2, "seed": 0, "keys": ["a", "b"], "store": {"folder": str(tmp_path)}}
    put, put_peak = _worker_peak({**cfg, "op": "put"})
    get, get_peak = _worker_peak({**cfg, "op": "get"})
    assert (tmp_path / "a").stat().st_size == OBJECT and put["batch"]["bytes_moved"] == 2 * OBJECT
    assert get["batch"]["bytes_moved"] == 2 * OBJECT and len(get["batch"]["latencies_s"]) == 2
    assert get_peak < 64 * MIB, f"GET worker peak {get_peak / MIB:.0f} MiB"
    assert put_peak < OBJECT + 64 * MIB, f"PUT worker peak {put_peak / MIB:.0f} MiB"


@pytest.mark.skipif(s3worker.missing() is not None, reason=str(s3worker.missing()))
def test_a_short_file_fails_the_batch_in_one_line(tmp_path):
    """Bytes counted are bytes received: a GET of a file shorter than the object fails the batch, naming it."""
    (tmp_path / "a").write_bytes(b"x" * 10)
    done, _ = _worker_peak({"op": "get", "size": 4096, "concurrency": 1, "seed": 0, "keys": ["a"],
                            "store": {"folder": str(tmp_path)}})
    assert "batch" not in done and done["error"] == "get a: returned 10 of 4096 bytes: a short body is not a whole object"


def _params(tmp_path, size: str) -> str:
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "dir", "path": str(tmp_path / "dir")}],
                                 "run": {"trace": False, "cold_cache": False},
                                 "object_sweep": {"ops": ["put", "get"], "object_sizes": [size], "concurrency": [2],
                                                  "mib_per_point": 1, "min_objects": 1, "max_objects": 1,
                                                  "loads": ["idle"], "repeats": 1}}))
    return str(f)


def test_an_object_beyond_the_memory_the_run_may_use_is_refused_by_validate_and_the_run(tmp_path):
    """The probe's 1 GiB object in an 800 MB cgroup: the study process was OOM-killed (exit 137, no line)."""
    f = _params(tmp_path, "1g")
    with child_cgroup("memory", {"memory.limit_in_bytes": 800 << 20}) as d:
        checked = cli_in(d, "validate", "--params", f)
        ran = cli_in(d, "object-sweep", "--params", f, "--out", str(tmp_path / "out"), "--progress", "off")
    for res in (checked, ran):
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "object_sizes up to 1,024.0 MiB: need 1.13 GiB (the largest object 1,024.0 MiB, made once" in res.stderr
        assert f"GiB this run may use (the memory cgroup {d} (limit 0.78 GiB" in res.stderr
    assert not (tmp_path / "dir").exists()                   # refused before any object was written


@pytest.mark.slow   # over 10 s in the fast tier (two workers): make test-fast <= 3 min
def test_a_256_mib_object_runs_where_its_copies_were_oom_killed(tmp_path):
    """560 MiB: the study process peaked at 619 MiB making the GET objects' body (killed); now 377 MiB."""
    f = _params(tmp_path, "256m")
    with child_cgroup("memory", {"memory.limit_in_bytes": 560 << 20}) as d:
        res = cli_in(d, "object-sweep", "--params", f, "--out", str(tmp_path / "out"), "--progress", "off")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "2 runs complete" in res.stdout + res.stderr
