"""kit.checkpoint: checkpoints counted done only when their bytes are fsync'ed; bytes nothing can shrink.
(Named test_kit_checkpoint: the checkpoint study's tests hold a test_checkpoint.py.)"""
from __future__ import annotations

import zlib

from storagebrief.kit import checkpoint as ck


def test_incompressible_bytes_have_the_size_asked_differ_per_call_and_do_not_compress():
    a, b = ck.incompressible(1 << 20), ck.incompressible(1 << 20)
    assert len(a) == 1 << 20 and len(ck.incompressible(13)) == 13
    assert bytes(a) != bytes(b)
    assert len(zlib.compress(bytes(a), 6)) > 0.99 * len(a)


def test_write_file_writes_exactly_the_bytes_by_repeating_the_chunk(tmp_path):
    w = ck.write_file(tmp_path / "new" / "ckpt.bin", 10_000, b"abc" * 1000)
    assert w.bytes == 10_000 and w.files == (tmp_path / "new" / "ckpt.bin",) and w.seconds > 0
    data = (tmp_path / "new" / "ckpt.bin").read_bytes()
    assert len(data) == 10_000 and data[:6] == b"abcabc"
    assert ck.write_file(tmp_path / "new" / "ckpt.bin", 5, b"xyz").bytes == 5            # truncated, not appended
    assert (tmp_path / "new" / "ckpt.bin").read_bytes() == b"xyzxy"


def test_save_fsyncs_what_a_foreign_writer_wrote_and_tally_adds_up(tmp_path, monkeypatch):
    synced = []
    real_fsync = ck.os.fsync
    monkeypatch.setattr(ck.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))

    def writer():
        (tmp_path / "a.index").write_bytes(b"1" * 10)
        (tmp_path / "a.data").write_bytes(b"2" * 90)
        return [tmp_path / "a.index", tmp_path / "a.data", tmp_path / "never-written"]
    tally = ck.Tally()
    w = tally.add(ck.save(writer))
    assert w.bytes == 100 and len(synced) == 2                   # the missing file is neither counted nor synced
    tally.add(ck.write_file(tmp_path / "b", 50, b"z"))
    assert (tally.count, tally.bytes) == (2, 150) and tally.seconds >= w.seconds
    ck.fsync_dir(tmp_path)
    assert len(synced) == 4


def test_incompressible_with_a_seed_repeats_and_a_refill_writes_every_byte():
    assert bytes(ck.incompressible(3 << 20 | 5, seed=7)) == bytes(ck.incompressible(3 << 20 | 5, seed=7))
    assert bytes(ck.incompressible(4096, seed=7)) != bytes(ck.incompressible(4096, seed=8))
    assert len(ck.incompressible(0)) == 0
    buf = bytearray(2 << 20 | 3)                       # a tail below the generator's chunk is filled too
    ck.incompressible_into(buf)
    assert buf.count(0) < len(buf) / 128 and len(zlib.compress(bytes(buf[-1000:]), 6)) > 990
