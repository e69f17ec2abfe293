"""Timed batches with the client's CPU beside them (kit/s3ops.py), through the directory path that
the object sweep uses for directory targets (the boto3 path is tested against the real gateway in
tests/studies/object_sweep)."""
from __future__ import annotations

import numpy as np

from storagebrief.core.store import DirStore, open_store
from storagebrief.kit import s3ops
from peak_memory import OBJECT, _peak_kib


def test_payload_is_reproducible_and_incompressible():
    a, b = s3ops.payload(1 << 16, seed=1), s3ops.payload(1 << 16, seed=1)
    assert a == b and a != s3ops.payload(1 << 16, seed=2) and len(a) == 1 << 16
    counts = np.bincount(np.frombuffer(a, dtype=np.uint8), minlength=256)
    assert counts.min() > 0                      # every byte value occurs: random, not a pattern


def test_a_store_batch_moves_every_object_and_times_each_request(tmp_path):
    body = s3ops.payload(64 << 10)
    names = [f"sub/obj-{i}" for i in range(12)]
    store = open_store(DirStore(tmp_path).handle())     # as a worker opens it: from the store's handle
    put = s3ops.store_batch(store, "put", names, body, concurrency=4)
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == sorted(n.split("/")[1] for n in names)
    assert all((tmp_path / n).read_bytes() == body for n in names)
    get = s3ops.store_batch(store, "get", names, len(body), concurrency=4)
    for batch in (put, get):
        row = batch.row()
        assert batch.errors == 0 and len(batch.latencies_s) == len(names)     # one latency per request
        assert row["objects"] == 12 and row["bytes_moved"] == 12 * len(body)
        assert row["latency_ms_p50"] <= row["latency_ms_p99"] <= row["latency_ms_max"]
        assert row["client_cpu_seconds"] >= 0 and row["wall_seconds"] > 0


# --------------------------------------------------------------------------- the payload is one copy (issue 44)
def test_the_payload_is_made_once_as_one_copy():
    """256 MiB: 518 MiB above the interpreter before (an array and its .tobytes()), 278 MiB now."""
    base = _peak_kib("from storagebrief.kit import s3ops")
    peak = _peak_kib(f"from storagebrief.kit import s3ops; b = s3ops.payload({OBJECT}, 0); assert len(b) == {OBJECT}")
    assert (peak - base) * 1024 < 1.2 * OBJECT, f"{(peak - base) / 1024:.0f} MiB for a 256 MiB payload"
