"""kit.ingest: an ingest writer appends real frames at a set rate, never ahead of it, and cleans up."""
from __future__ import annotations

import time

from storagebrief.kit.ingest import IngestWriter


def _size(path) -> int:
    """Bytes on disk so far (the writer flushes at least twice a second)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def test_writes_the_sources_frames_never_ahead_of_its_rate_and_leaves_nothing(tmp_path):
    source = tmp_path / "data.tfrecord"
    source.write_bytes(bytes(range(256)) * 64)                   # 16 KiB of "records"
    out = tmp_path / "ingest"
    writer = IngestWriter(out, [str(source)], mb_per_s=0.5, procs_files=[])
    assert writer.payload == source.read_bytes()                 # the dataset's own first frames
    writer.start()
    deadline = time.monotonic() + 60                              # counts, not clocks: wait for 3 frames
    shard = out / "ingest-000.tfrecord"
    while _size(shard) < 3 * len(writer.payload) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shard.read_bytes()[:len(writer.payload)] == writer.payload
    elapsed_before_stop = time.monotonic() - writer.t0
    got = writer.stop()
    assert got["ingest_bytes"] >= 3 * len(writer.payload) and got["ingest_bytes"] % len(writer.payload) == 0
    # the writer only writes what its schedule has made due: at most rate × (time it ran) + one frame
    assert got["ingest_bytes"] <= 0.5e6 * (time.monotonic() - writer.t0) + len(writer.payload)
    assert got["ingest_mb_per_s"] > 0 and elapsed_before_stop > 0
    assert not out.exists() and not writer.launch.procs[0].is_alive()
    assert writer.stop() == got and writer.error is None          # again (a cleanup path): the same, no error


def test_a_given_payload_is_written_instead_of_the_sources(tmp_path):
    writer = IngestWriter(tmp_path / "w", [], mb_per_s=1.0, procs_files=[], payload=b"x" * 1000)
    writer.start()
    deadline = time.monotonic() + 60
    while _size(tmp_path / "w" / "ingest-000.tfrecord") < 2000 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (tmp_path / "w" / "ingest-000.tfrecord").read_bytes()[:1000] == b"x" * 1000
    assert writer.stop()["ingest_bytes"] >= 2000


def test_kill_ends_a_running_writer_at_once_and_is_a_no_op_after_stop(tmp_path):
    writer = IngestWriter(tmp_path / "k", [], mb_per_s=1.0, procs_files=[], payload=b"y" * 1000)
    writer.kill()                                                  # never started: nothing to do
    writer.start()
    proc = writer.launch.procs[0]
    writer.kill()
    assert not proc.is_alive() and writer.stop() == {"ingest_bytes": 0, "ingest_mb_per_s": 0.0}
    assert not (tmp_path / "k").exists()
