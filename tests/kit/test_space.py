"""kit.space: will the data fit (targets on one filesystem added up), and was a failure a full disk."""
from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace

import pytest

from storagebrief.core import targets as targets_mod
from storagebrief.kit import space
from storagebrief.kit.space import out_of_space


def test_out_of_space_reads_an_oserror_and_a_ranks_traceback():
    assert out_of_space(OSError(28, "No space left on device", "/t/x")) == \
        "No space left on device (errno 28) writing /t/x"
    rank = RuntimeError("checkpoint rank 3 failed:\nTraceback ...\nOSError: [Errno 28] No space left on device\n")
    assert out_of_space(rank) == "No space left on device (errno 28), checkpoint rank 3 failed"
    assert out_of_space(OSError(5, "Input/output error")) is None
    assert out_of_space(RuntimeError("checkpoint rank 1 died: killed by signal 9")) is None


def test_out_of_space_follows_the_exception_chain_and_knows_quotas():
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError as inner:
            raise RuntimeError("the writer failed") from inner
    except RuntimeError as outer:
        assert out_of_space(outer) == f"Disk quota exceeded (errno {errno.EDQUOT})"


def test_targets_on_one_filesystem_add_up_and_others_count_alone(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(targets_mod, "check_free_space", lambda t, n, what: asked.append((t.name, n, what)))
    same = [SimpleNamespace(name=n, path=tmp_path / n / "not-yet") for n in ("a", "b")]   # folders not made yet
    other = SimpleNamespace(name="shm", path=Path("/dev/shm"))
    space.check_space(same + [other], lambda t: 100, "the dataset")
    assert asked[0] == ("a", 100, "the dataset")
    assert asked[1] == ("b", 200, "the dataset of this and earlier targets on the same filesystem")
    if space.filesystem_id(other) != space.filesystem_id(same[0]):
        assert asked[2] == ("shm", 100, "the dataset")


def test_a_dataset_that_does_not_fit_is_refused_naming_the_target(tmp_path):
    target = SimpleNamespace(name="t", path=tmp_path)
    with pytest.raises(targets_mod.TargetError) as exc:
        space.check_space([target], lambda t: 1 << 62, "the toy file")
    assert str(exc.value).startswith(f"target 't' ({tmp_path}): the toy file needs ") and "is free" in str(exc.value)


def test_existing_bytes_counts_the_files_of_a_kept_dataset(tmp_path):
    assert space.existing_bytes(tmp_path / "none") == 0
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "x").write_bytes(b"12345")
    (tmp_path / "d" / "sub" / "y").write_bytes(b"123")
    assert space.existing_bytes(tmp_path / "d") == 8
