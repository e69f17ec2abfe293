"""kit.files: optional side files give their data, or nothing when absent or empty."""
from __future__ import annotations

import pytest

from storagebrief.kit.files import read_csv_or_none, read_json_or


def test_json_absent_gives_the_default_and_present_gives_its_data(tmp_path):
    assert read_json_or(tmp_path / "none.json") == {}
    assert read_json_or(tmp_path / "none.json", default=[]) == []
    (tmp_path / "a.json").write_text('{"x": [1, 2]}')
    assert read_json_or(tmp_path / "a.json") == {"x": [1, 2]}


def test_a_corrupt_json_side_file_is_an_error_not_a_silent_default(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError):
        read_json_or(tmp_path / "bad.json")


@pytest.mark.parametrize("text", [None, "", "\n", "a,b\n"])
def test_csv_absent_empty_or_header_only_is_none(tmp_path, text):
    path = tmp_path / "t.csv"
    if text is not None:
        path.write_text(text)
    assert read_csv_or_none(path) is None


def test_csv_with_rows_is_a_frame(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,x\n2,y\n")
    frame = read_csv_or_none(tmp_path / "t.csv")
    assert list(frame.columns) == ["a", "b"] and frame.a.tolist() == [1, 2]
