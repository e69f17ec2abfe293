"""Reading a params file (core/paramsfile.py, issue 57's minor cases): a FIFO named as --params is refused without
waiting on it, /dev/zero and an oversized file are refused at the limit instead of read without end, and YAML nested
past what the parser follows is one line naming the file, never a RecursionError reported as "a bug"."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from storagebrief.core import config, paramsfile
from conftest import REPO


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "storagebrief.cli", "validate", "--params", str(fifo)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "not a regular file" in res.stderr and str(fifo) in res.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_not_read_without_end(path):
    with pytest.raises(config.ParamsError, match="not a regular file"):
        config.read_yaml(path)


def test_a_file_over_the_limit_is_refused_after_reading_no_more_than_the_limit(tmp_path):
    big = tmp_path / "params.yaml"
    big.write_bytes(b"# " + b"x" * paramsfile.MAX_PARAMS_BYTES)
    with pytest.raises(config.ParamsError, match="is over 1,048,576 bytes"):
        config.read_yaml(big)


@pytest.mark.parametrize("text", ["[" * 50_000, "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000))])
def test_yaml_nested_past_the_parser_is_one_line(tmp_path, text):
    f = tmp_path / "params.yaml"
    f.write_text(text)
    with pytest.raises(config.ParamsError) as err:
        config.read_yaml(f)
    assert "\n" not in str(err.value) and str(f) in str(err.value)


def test_not_utf8_is_one_line(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_bytes(b"scale: \xff\xfe\n")
    with pytest.raises(config.ParamsError, match="not UTF-8"):
        config.read_yaml(f)
