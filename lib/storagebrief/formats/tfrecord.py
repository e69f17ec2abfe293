"""TFRecord files: one frame writer and reader for every study.

A frame is: uint64 length, uint32 masked CRC-32C of the length bytes, the payload,
uint32 masked CRC-32C of the payload (little endian), as TensorFlow writes and
checks them. CRC-32C comes from google-crc32c's C implementation, so framing GBs
of generated payloads costs about what writing them does.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import google_crc32c

FRAME_OVERHEAD = 16    # length (8) + length CRC (4) + data CRC (4)
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TensorFlow's masked CRC-32C: rotate right by 15 bits, add a constant."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return b"".join((header, struct.pack("<I", masked_crc(header)), payload,
                     struct.pack("<I", masked_crc(payload))))


def write_frames(path: Path, payloads) -> list[tuple[int, int]]:
    """Write payloads as one TFRecord file; returns (offset, frame length) of each record."""
    spans, pos = [], 0
    with open(path, "wb") as fh:
        for payload in payloads:
            data = frame(payload)
            fh.write(data)
            spans.append((pos, len(data)))
            pos += len(data)
    return spans


def record_lengths(path: Path) -> list[int]:
    """Payload lengths of a TFRecord file's frames, from the length headers (no TensorFlow)."""
    out = []
    with open(path, "rb") as fh:
        while True:
            header = fh.read(12)
            if not header:
                return out
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header")
            (length,) = struct.unpack("<Q", header[:8])
            fh.seek(length + 4, os.SEEK_CUR)
            out.append(length)


def count_records(path: Path) -> int:
    return len(record_lengths(path))


def read_frames(path: Path):
    """Yield each payload, checking both CRCs (ValueError names the record that is corrupt)."""
    with open(path, "rb") as fh:
        index = 0
        while True:
            header = fh.read(12)
            if not header:
                return
            if len(header) < 12 or struct.unpack("<I", header[8:])[0] != masked_crc(header[:8]):
                raise ValueError(f"{path}: record {index}: bad or truncated length header")
            (length,) = struct.unpack("<Q", header[:8])
            payload, tail = fh.read(length), fh.read(4)
            if len(payload) < length or len(tail) < 4 or struct.unpack("<I", tail)[0] != masked_crc(payload):
                raise ValueError(f"{path}: record {index}: data CRC mismatch or truncated payload")
            yield payload
            index += 1


def image_example(encoded: bytes, fmt: str, height: int, width: int, label: int, filename: str) -> bytes:
    """A serialized tf.train.Example with the ImageNet-style image/* features every study reads."""
    import tensorflow as tf     # its callers' processes imported it already (kit/tf_import.py: formats sits below kit)

    f = tf.train.Feature
    example = tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": f(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/format": f(bytes_list=tf.train.BytesList(value=[fmt.encode()])),
        "image/height": f(int64_list=tf.train.Int64List(value=[height])),
        "image/width": f(int64_list=tf.train.Int64List(value=[width])),
        "image/channels": f(int64_list=tf.train.Int64List(value=[3])),
        "image/class/label": f(int64_list=tf.train.Int64List(value=[label])),
        "image/filename": f(bytes_list=tf.train.BytesList(value=[filename.encode()])),
    }))
    return example.SerializeToString()
