"""checkpoint on an S3 target through the real local gateway (versitygw, not a mock): each rank's files as
multipart uploads read back by ranged GETs, the bytes as written, rows comparable with the directory's, the
intervals answer for the S3 target, the objects gone, no gateway, registry entry or cgroup left; a gateway
killed mid-save is a failed row with one line (a killed rank: test_checkpoint_ranks.py); settings S3 cannot take are one line before any work."""
from __future__ import annotations

import json
import os
import subprocess
import time
import zlib
from pathlib import Path

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config, s3gateway, s3store
from storagebrief.core.store import open_store
from storagebrief.core.checkpoint_workloads import layout, layout_bytes, workload
from storagebrief.core.s3store import ObjectStore
from storagebrief.studies.checkpoint import rank_io
from storagebrief.studies.checkpoint import run as ck_run
from conftest import REPO

try:
    s3gateway.binary()
    NO_GATEWAY = None
except s3gateway.GatewaySetupError as exc:
    NO_GATEWAY = str(exc)
needs_gateway = pytest.mark.skipif(NO_GATEWAY is not None, reason=f"{NO_GATEWAY}")
STUDY = studies.get("checkpoint")
W = workload("llama3-8b")
CK = {**STUDY.tiny, "repeats": 1, "cost": {"modes": ["none", "async"], "intervals_steps": [2], "steps": 4,
                                           "compute_s": 0.01, "files": 2}, "framework": {"scenarios": []}}


def _params(tmp: Path, **ck):
    data = {"targets": [{"name": "dir", "path": str(tmp / "dir")},
                        {"name": "obj", "path": str(tmp / "obj"), "kind": "s3", "s3": {}}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "checkpoint": {**CK, **ck}}
    return config.validate(data, root=REPO)


def _nothing_left(tmp: Path, owner_pid: int) -> None:
    """No bucket of the run, no registry entry of the process that ran it, no gateway over the folder, no
    gateway cgroup (other work on the machine may run gateways of its own)."""
    gw_root = tmp / "obj" / "storagebrief" / "s3gw"
    assert not [p for p in gw_root.iterdir() if p.name.startswith("sb-")] if gw_root.is_dir() else True
    assert not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{owner_pid}-*.json"))
    time.sleep(0.3)
    assert not subprocess.run(["pgrep", "-f", str(gw_root)], capture_output=True, text=True).stdout.split()
    left = subprocess.run(["find", "/sys/fs/cgroup", "-maxdepth", "3", "-name", f"*checkpoint-obj-gateway-{owner_pid}-*"],
                          capture_output=True, text=True).stdout.split()
    assert not left, left


@pytest.mark.slow
@needs_gateway
def test_protocol_on_s3_beside_a_directory_then_nothing_left(tmp_path, monkeypatch):
    """... and every S3 byte of the ranks is their compiled client's: boto3 (whose every request the trace hook
    records with its process) is the study process's alone (the bucket, manifests, deletes)."""
    trace = tmp_path / "boto3-requests"
    monkeypatch.setenv(s3store.TRACE_ENV, str(trace))
    STUDY.run(_params(tmp_path), tmp_path / "out", log=lambda *_: None, progress="off")
    requests = [line.split() for line in trace.read_text().splitlines()]
    assert "CreateBucket" in {op for _, op in requests}                       # the hook sees the study's own
    assert {int(pid) for pid, _ in requests} == {os.getpid()}, requests       # and no rank's
    out = tmp_path / "out"
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs.status) == {"ok"}
    prot = runs[runs.sweep == "protocol"].set_index("target")
    assert set(prot.index) == {"dir", "obj"}
    assert prot.loc["obj", "access"] == "S3 local gateway" and prot.loc["dir", "access"] == "files"
    assert set(runs[runs.sweep == "cost"].target) == {"dir"}        # the cost sweep: directories only
    for col in ("mlperf_save_gib_per_s", "honest_save_gib_per_s", "mlperf_load_gib_per_s", "honest_load_gib_per_s",
                "save_client_cpu_s_per_gb", "load_client_cpu_s_per_gb", "save_gateway_cpu_s_per_gb"):
        assert prot.loc["obj", col] > 0, col
    nbytes = layout_bytes(layout(W, CK["scale"]))
    ck = pd.read_csv(out / "checkpoints.csv")
    s3 = ck[ck.target == "obj"]
    assert (s3.bytes == nbytes).all() and len(s3) == CK["saves"] + CK["restores"]
    assert (s3.fsync_calls == 0).all()
    rk = pd.read_csv(out / "ranks.csv")
    assert (rk[rk.target == "obj"].groupby(["op", "index"]).size() == W.ranks).all()
    lat = pd.read_csv(out / "latency.csv")
    parts = lat[(lat.target == "obj") & (lat.call == "write")]["count"].sum()
    assert parts == s3[s3.op == "save"].files.sum()       # tiny: every file fits one part
    study = json.loads((out / "study.json").read_text())
    assert study["targets"]["obj"]["access"] == "S3 local gateway" and "secret" not in json.dumps(study).lower()
    obj_rows = [r for r in study["intervals"] if r["target"] == "obj"]
    assert obj_rows and all(r["sync_interval_s"] > 0 and r["async_interval_s"] for r in obj_rows)
    notes = json.loads((out / "notes.json").read_text())["warnings"]
    assert any("'obj' is an S3 target" in n and "cost sweep" in n for n in notes)
    assert (out / "logs" / "obj-versitygw.log").exists()
    from storagebrief.studies.checkpoint import brief
    answers = brief.answers(out, runs, ["dir", "obj"])
    assert {a["target"] for a in answers} == {"dir", "obj"}
    _nothing_left(tmp_path, os.getpid())


@pytest.mark.slow
@needs_gateway
def test_a_multipart_object_reads_back_as_written(tmp_path):
    from storagebrief.core.targets import resolve_all
    params = _params(tmp_path)
    t = next(x for x in resolve_all(params, create=True) if x.name == "obj")
    store = ObjectStore(t, tmp_path / "logs", tag="ckpt-test").open()
    try:
        rs = open_store(store.handle(), pool=4)         # as a rank opens it: its own store from the store's handle
        block = 5 << 20
        files = [("a.distcp", 12 << 20), ("b.distcp", 300_000)]
        rs.connect(None, 3)                              # as a rank does before any clock (ranks._setup)
        try:
            rs.make_body(block, seed=7)
            total, fsyncs, hist, (in_puts, in_rest) = rank_io.save_s3(rs, "ck/step1", files, block)
            assert total == sum(n for _, n in files) and fsyncs == 0 and in_puts > 0 and in_rest > 0
            assert sum(hist["write"]) == 3 + 1 and sum(hist["fsync"]) == 2        # 3 + 1 parts, 2 uploads
            body = store.client.get_object(Bucket=store.bucket, Key="ck/step1/a.distcp")["Body"].read()
            assert len(body) == 12 << 20 and len(zlib.compress(body[:block], 1)) > 0.99 * block   # incompressible
            assert body[block:2 * block] == body[:block] and body[2 * block:] == body[:(12 << 20) - 2 * block]
            small = store.client.get_object(Bucket=store.bucket, Key="ck/step1/b.distcp")["Body"].read()
            assert small == body[:300_000]                  # every part the rank's one body, as its buffer was
            head = store.client.head_object(Bucket=store.bucket, Key="ck/step1/a.distcp", ChecksumMode="ENABLED")
            assert head["ChecksumCRC32C"].endswith("-3"), head      # each part's CRC32C checked and kept (issue 58)
            total, hist = rank_io.load_s3(rs, "ck/step1", files, 4 << 20, 3)
        finally:
            rs.disconnect()
        assert total == sum(n for _, n in files) and sum(hist["read"]) == 3 + 1
        assert not store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads")
    finally:
        store.close()
    assert not [p for p in (tmp_path / "obj" / "storagebrief" / "s3gw").iterdir() if p.name.startswith("sb-")]


@pytest.mark.slow
@needs_gateway
def test_gateway_killed_mid_save_is_a_failed_row_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(ck_run, "FAULT", {"kill_gateway": True})
    STUDY.run(_params(tmp_path, cost={"modes": []}), tmp_path / "out", log=lambda *_: None, progress="off")
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("target")
    assert runs.loc["dir", "status"] == "ok"
    assert runs.loc["obj", "status"] != "ok"
    why = runs.loc["obj", "failure_reason"]
    assert "\n" not in why and "S3 gateway (versitygw" in why and "killed by SIGKILL" in why, why
    assert "objects were removed" in why
    _nothing_left(tmp_path, os.getpid())


def test_parts_below_s3s_minimum_are_refused_before_any_work(tmp_path):
    with pytest.raises(config.ParamsError, match=r"checkpoint.write_block_mib = 1: .*at least 5 MiB"):
        _params(tmp_path, scale=1024, write_block_mib=1, read_block_mib=1)      # validate refuses it (issue 44)
    assert not (tmp_path / "out" / "runs.csv").exists()


def test_the_ranks_budget_counts_each_ranks_s3_client_and_no_python_buffers_on_s3(monkeypatch):
    """On S3 a rank's bytes are its compiled client's (kit.budget.s3_client_bytes: the body it uploads, a buffer per
    connection); the rank holds no Python write or read buffer (issue 58), so a room too small for the directory's
    buffers holds the S3 ranks, and one too small for their clients refuses them naming the client."""
    from storagebrief.kit.budget import s3_client_bytes
    from storagebrief.studies.checkpoint import ranks as budget
    p = config.validate({"targets": [{"name": "t", "path": "/nonexistent/t"}],
                         "checkpoint": {**CK, "scale": 1024, "readers_per_rank": 4, "read_block_mib": 8}},
                        check_targets=False).section("checkpoint")
    write, read = budget.rank_buffers(p, "llama3-8b")
    client = s3_client_bytes(p.readers_per_rank, body=write)
    files = write + p.readers_per_rank * read
    assert files > client
    room = int(8 * (client + budget.RANK_OWN_BYTES) / budget.MEMORY_SHARE) + 1          # 8 S3 ranks, no more
    monkeypatch.setattr(budget, "memory_left", lambda: (room, "MemAvailable"))
    budget.check_budget(p, s3=True, directories=False)
    with pytest.raises(ValueError, match=r"llama3-8b's 8 ranks need .* MiB write buffer \+ readers_per_rank"):
        budget.check_budget(p, s3=True)                                 # a directory target beside: its buffers
    monkeypatch.setattr(budget, "memory_left", lambda: (room - 2 * 2**20, "MemAvailable"))
    with pytest.raises(ValueError, match=rf"\({client / 2**20:,.0f} MiB for its compiled S3 client with the "
                                         rf"{write / 2**20:,.0f} MiB body it uploads \+ 8 MiB per process\)\), more"):
        budget.check_budget(p, s3=True, directories=False)



def test_an_s3_rank_holds_no_python_write_buffer(tmp_path, monkeypatch):
    """Issue 58: an S3 rank's uploads send the body its compiled client made (core.s3mover), so the rank makes no
    Python write buffer (ranks._setup: buf None, the generator never called); a directory rank makes its own. The
    client starts without reaching the endpoint (nothing listens there: no request is made)."""
    from storagebrief.core.s3mover import missing
    from storagebrief.studies.checkpoint import ranks
    if missing():
        pytest.skip(missing())
    made, real = [], ranks.incompressible
    monkeypatch.setattr(ranks, "incompressible", lambda n, seed=None: made.append(n) or real(n, seed))
    s3 = {"endpoint": "http://127.0.0.1:9", "bucket": "b", "region": "us-east-1", "profile": None, "verify_tls": True,
          "addressing": "path", "credentials": {"aws_access_key_id": "k", "aws_secret_access_key": "s"}}
    cfg = {"store": {"folder": None, "s3": s3}, "readers": 2, "buf_bytes": 64 << 20, "fault": None}
    buf, store, *_ = ranks._setup(0, 1, cfg)
    try:
        assert buf is None and made == [] and store.mover is not None
    finally:
        store.disconnect()
    buf, *_ = ranks._setup(0, 1, {**cfg, "store": {"folder": str(tmp_path), "s3": None}})
    assert len(buf) == 64 << 20 and made == [64 << 20]
