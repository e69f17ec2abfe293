"""formats.tfrecord: TensorFlow's framing (masked CRC-32C known values), spans, round trips, corrupt input refused."""
from __future__ import annotations

import struct

import pytest

from storagebrief.formats import tfrecord


def test_masked_crc_known_values():
    # CRC-32C("") = 0: rotated 0, + 0xA282EAD8
    assert tfrecord.masked_crc(b"") == 0xA282EAD8
    # CRC-32C("123456789") = 0xE3069283 (the standard check value); rotate right 15:
    #   0xE3069283 >> 15 = 0x0001C60D; (0xE3069283 & 0x7FFF) << 17 = 0x1283 << 17 = 0x25060000; or: 0x2507C60D
    #   + 0xA282EAD8 = 0xC78AB0E5 (mod 2^32)
    assert tfrecord.masked_crc(b"123456789") == 0xC78AB0E5


def test_frame_layout():
    data = tfrecord.frame(b"abc")
    assert len(data) == 3 + tfrecord.FRAME_OVERHEAD == 19
    assert data[:8] == struct.pack("<Q", 3) == b"\x03" + b"\x00" * 7
    assert struct.unpack("<I", data[8:12])[0] == tfrecord.masked_crc(b"\x03" + b"\x00" * 7)
    assert data[12:15] == b"abc"
    assert struct.unpack("<I", data[15:])[0] == tfrecord.masked_crc(b"abc")


def test_write_read_round_trip_and_spans(tmp_path):
    f = tmp_path / "a.tfrecord"
    payloads = [b"a", b"bcd", b"", b"\x00" * 1000]
    spans = tfrecord.write_frames(f, payloads)
    # frame lengths 1+16=17, 3+16=19, 0+16=16, 1000+16=1016; offsets are the running sums
    assert spans == [(0, 17), (17, 19), (36, 16), (52, 1016)]
    assert f.stat().st_size == 52 + 1016 == 1068
    assert tfrecord.record_lengths(f) == [1, 3, 0, 1000]
    assert tfrecord.count_records(f) == 4
    assert list(tfrecord.read_frames(f)) == payloads


def test_an_empty_file_has_no_records(tmp_path):
    f = tmp_path / "empty.tfrecord"
    assert tfrecord.write_frames(f, []) == []
    assert tfrecord.count_records(f) == 0 and list(tfrecord.read_frames(f)) == []


def test_a_corrupt_payload_is_refused_naming_the_record(tmp_path):
    f = tmp_path / "a.tfrecord"
    tfrecord.write_frames(f, [b"first", b"second"])
    raw = bytearray(f.read_bytes())
    raw[21 + 12] ^= 0xFF            # first byte of record 1's payload (record 0 is 5 + 16 = 21 bytes)
    f.write_bytes(bytes(raw))
    it = tfrecord.read_frames(f)
    assert next(it) == b"first"
    with pytest.raises(ValueError, match="record 1: data CRC mismatch"):
        next(it)
    assert tfrecord.record_lengths(f) == [5, 6]      # the length headers alone do not check data


def test_a_corrupt_length_header_is_refused(tmp_path):
    f = tmp_path / "a.tfrecord"
    tfrecord.write_frames(f, [b"x"])
    raw = bytearray(f.read_bytes())
    raw[8] ^= 0x01                  # the length CRC
    f.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="record 0: bad or truncated length header"):
        list(tfrecord.read_frames(f))


def test_truncated_files_are_refused(tmp_path):
    f = tmp_path / "a.tfrecord"
    tfrecord.write_frames(f, [b"hello", b"world"])
    whole = f.read_bytes()
    f.write_bytes(whole[:21 + 5])       # record 1 cut inside its header
    with pytest.raises(ValueError, match="truncated TFRecord header"):
        tfrecord.record_lengths(f)
    with pytest.raises(ValueError, match="record 1: bad or truncated length header"):
        list(tfrecord.read_frames(f))
    f.write_bytes(whole[:-2])           # record 1's data CRC cut short
    with pytest.raises(ValueError, match="record 1: data CRC mismatch or truncated payload"):
        list(tfrecord.read_frames(f))
