"""Faults of the environment, injected for real (issue 20): a filesystem that fills while results are
written, an output folder on a read-only mount, and a bug, each ending in one line (exit 2 for the
environment, exit 1 with a --debug hint for a bug) with nothing left running. Root-only cases skip
with the reason elsewhere."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from storagebrief import cli
from storagebrief.core import config
from conftest import base_params

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounting a small or read-only filesystem needs root")


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture
def mount(tmp_path):
    """mount(kind, options) -> a folder: tmpfs of a given size, or a read-only bind of a folder."""
    made = []

    def make(name: str, *args: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", *args, str(where)], check=True)
        made.append(where)
        return where
    yield make
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], check=False)


def _params(tmp_path: Path, **pp) -> Path:
    data = base_params(tmp_path, **pp)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


@pytest.mark.slow
@pytest.mark.e2e
@needs_root
def test_output_filesystem_filling_mid_run_is_one_line_naming_the_file(tmp_path, mount):
    out_fs = mount("small", "-t", "tmpfs", "-o", "size=96k", "tmpfs")
    f = _params(tmp_path, repeats=4)
    res = _cli("preprocess", "--params", str(f), "--out", str(out_fs / "out"), "--progress", "off",
               "-S", "run.monitor_interval_s=0.02")
    line = _one_line(res)
    assert res.returncode == 2 and "No space left on device writing" in line and str(out_fs) in line
    assert "free space there or choose another" in line
    assert not [p for p in subprocess.run(["pgrep", "-f", str(out_fs)], capture_output=True, text=True).stdout.split()]


@needs_root
def test_output_folder_on_a_read_only_mount_is_refused_before_any_dataset(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    ro = mount("ro", "--bind", str(src))
    subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
    f = _params(tmp_path)
    res = _cli("preprocess", "--params", str(f), "--out", str(ro / "out"))
    line = _one_line(res)
    assert res.returncode == 2 and "Read-only file system" in line and "choose a writable folder" in line
    assert not list(Path(tmp_path / "fast").rglob("*.tif"))          # refused before the dataset


@needs_root
def test_ramfs_target_says_what_it_is_not_zero_bytes_free(tmp_path, mount):
    ram = mount("ram", "-t", "ramfs", "ramfs")
    data = base_params(tmp_path)
    data["targets"] = [{"name": "ram", "path": str(ram / "t")}]
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    res = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "out"))
    line = _one_line(res)
    assert res.returncode == 2 and "reports no size" in line and "ramfs" in line and "0 B" not in line


@needs_root
def test_tmpfs_target_is_named_as_memory_in_the_notes(tmp_path, mount):
    mem = mount("mem", "-t", "tmpfs", "-o", "size=64m", "tmpfs")
    data = base_params(tmp_path, image_counts=[], processes=[1])
    data["targets"] = [{"name": "mem", "path": str(mem / "t")}]
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    res = _cli("preprocess", "--params", str(f), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    notes = (tmp_path / "out" / "notes.json").read_text()
    assert "is on tmpfs, a filesystem in memory" in notes and "not a storage device" in notes


def test_a_bug_is_one_line_with_a_debug_hint_and_its_traceback_behind_debug(tmp_path, monkeypatch, capsys):
    def broken(*_a, **_k):
        raise RuntimeError("boom in the code")
    monkeypatch.setattr(config, "load", broken)
    monkeypatch.delenv("STORAGEBRIEF_DEBUG", raising=False)
    assert cli.main(["validate"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["storagebrief: internal error: RuntimeError: boom in the code (a bug: run again with --debug "
                   "for the traceback, and report it)"]
    with pytest.raises(RuntimeError, match="boom in the code"):
        cli.main(["--debug", "validate"])
