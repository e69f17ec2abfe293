"""Sizes as params write them and tables label them (kit/sizes.py): k = 1,024 B, as fio and S3 tools."""
from __future__ import annotations

import pytest

from storagebrief.kit.sizes import parse_size, size_label


@pytest.mark.parametrize("text, n", [("4k", 4096), ("128KiB", 128 << 10), ("1m", 1 << 20), ("2G", 2 << 30),
                                     (4096, 4096), (" 64 kib ", 64 << 10)])
def test_sizes_parse_in_binary_units(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["4q", "-1k", "1.5m", "", True])
def test_a_bad_size_names_what_it_was_for(bad):
    with pytest.raises(ValueError, match="object size"):
        parse_size(bad, "object size")


@pytest.mark.parametrize("text", ["1 MB", "64kb", "2GB"])
def test_mb_is_refused_not_taken_as_mib(text):
    """Issue 48: '1 MB' was silently 1 MiB, where the object sweep's tables say MB = 10⁶ B: one line naming the
    value and what to write instead."""
    with pytest.raises(ValueError, match=f"object size '{text}' is ambiguous: .*1,024s.*iB for"):
        parse_size(text, "object size")


@pytest.mark.parametrize("n, label", [(4096, "4K"), (1 << 20, "1M"), (3 << 20, "3M"), (1536, "1536B"), (100, "100B")])
def test_labels_use_the_largest_whole_unit(n, label):
    assert size_label(n) == label
