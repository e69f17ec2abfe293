"""formats.npz: one uncompressed array of the generator's bytes, read back whole."""
from __future__ import annotations

import zipfile

import numpy as np

from storagebrief.formats import npz


def test_write_random_round_trip(tmp_path):
    f = tmp_path / "a.npz"
    offset, length = npz.write_random(f, 1000, np.random.default_rng(7))
    assert (offset, length) == (0, f.stat().st_size)
    x = np.load(f)["x"]
    assert x.dtype == np.uint8 and x.shape == (1000,)
    # the same seed gives the same bytes: the array is the generator's bytes as they are
    assert x.tobytes() == np.random.default_rng(7).bytes(1000)
    # uncompressed (stored): the file is the array plus the zip and .npy headers (a few hundred bytes)
    with zipfile.ZipFile(f) as z:
        assert [i.compress_type for i in z.infolist()] == [zipfile.ZIP_STORED]
    assert 1000 < length < 1000 + 1000


def test_a_float_size_is_taken_as_whole_bytes(tmp_path):
    f = tmp_path / "b.npz"
    npz.write_random(f, 64.0, np.random.default_rng(0))
    assert np.load(f)["x"].shape == (64,)
