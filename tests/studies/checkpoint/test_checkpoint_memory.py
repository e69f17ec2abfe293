"""Issue 45: every buffered save starts from the same memory state (a scratch file written and deleted in its
folder right before it: core.memory_state), the row says so, each save's write() / fsync() phases are kept, and
checkpoint.save_io: direct writes with O_DIRECT (refused in one line where the target cannot)."""
from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.studies.checkpoint import rank_io
from storagebrief.studies.checkpoint import run as ck_run

from test_checkpoint import REPO, _run

STUDY = studies.get("checkpoint")
LIB = Path(studies.__file__).resolve().parents[2]      # the storagebrief this test imported


def _in_ramfs(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """`argv` run with a ramfs (a filesystem without O_DIRECT) mounted on `folder`, in a mount namespace of its
    own: the mount ends with the command."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("mounting a ramfs needs root and unshare")
    folder.mkdir(parents=True, exist_ok=True)
    script = 'mount -t ramfs ramfs "$0" && exec "$@"'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder), *argv],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(LIB)})


@pytest.mark.e2e
def test_each_buffered_save_is_prepared_in_its_folder_and_the_row_says_so(tmp_path, monkeypatch):
    seen = []
    real = ck_run.prefault

    def spy(folder, nbytes):
        seen.append((Path(folder), nbytes, sorted(p.name for p in Path(folder).iterdir())))
        return real(folder, nbytes)

    monkeypatch.setattr(ck_run, "prefault", spy)
    frame, out = _run(tmp_path, saves=3)
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.status == "ok"
    nbytes = int(row.checkpoint_bytes)
    # before every save, in that save's (still empty) folder, the save's bytes
    assert [(f.name, n, names) for f, n, names in seen] == [(f"global_epoch1_step{k}", nbytes, []) for k in (1, 2, 3)]
    assert row.save_io == "buffered"
    assert row.memory_prep.startswith(f"scratch file of {nbytes / 1e6:,.0f} MB written in the save's folder and "
                                      "deleted right before each save"), row.memory_prep
    assert row.memory_prep_s_mean > 0 and row.save_write_phase_s_mean > 0 and row.save_fsync_phase_s_mean > 0
    ck = pd.read_csv(out / "checkpoints.csv")
    saves, loads = ck[ck.op == "save"], ck[ck.op == "load"]
    assert (saves.write_phase_s > 0).all() and (saves.fsync_phase_s > 0).all()
    assert (saves.write_phase_s < saves.max_rank_s).all() and loads.write_phase_s.isna().all()
    rk = pd.read_csv(out / "ranks.csv")
    rs = rk[rk.op == "save"]
    assert (rs.write_s > 0).all() and (rs.write_s + rs.fsync_s <= rs.seconds + 1e-6).all()
    # the scratch files left nothing behind: each kept checkpoint holds its manifest and the ranks' files only
    root = tmp_path / "fast" / "storagebrief" / "checkpoint" / "llama3-8b"
    assert not [p for p in root.rglob("*") if p.name.startswith(".storagebrief-")]


@pytest.mark.e2e
def test_direct_saves_skip_the_preparation_and_write_every_byte(tmp_path, monkeypatch):
    monkeypatch.setattr(ck_run, "prefault", lambda *a: pytest.fail("a direct save was pre-faulted"))
    frame, out = _run(tmp_path, save_io="direct")
    row = pd.read_csv(out / "runs.csv").iloc[0]
    assert row.status == "ok" and row.save_io == "direct"
    assert row.memory_prep.startswith("none: O_DIRECT"), row.memory_prep
    ck = pd.read_csv(out / "checkpoints.csv")
    assert (ck.bytes == row.checkpoint_bytes).all()          # restores read back every byte written


def _aligned(data: bytes) -> memoryview:
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    return memoryview(buf)


SAVE_FILES = [("a.bin", 3 * 4096 + 100), ("b.bin", 100)]
RAMFS_SAVE = f"""
import errno, mmap, sys
from pathlib import Path
from storagebrief.studies.checkpoint import rank_io
folder, buf = Path(sys.argv[1]), memoryview(mmap.mmap(-1, 8192))
try:
    rank_io.save(folder, {SAVE_FILES!r}, buf, 8192, direct=True)
except OSError as exc:
    print("direct:", errno.errorcode[exc.errno])
rank_io.save(folder, {SAVE_FILES!r}, buf, 8192, direct=False)
print("buffered: ok", rank_io.direct_refusal(folder))
"""


def test_direct_save_uses_o_direct_and_writes_an_unaligned_tail(tmp_path):
    data = os.urandom(8192)
    total, fsyncs, _, (in_write, in_fsync) = rank_io.save(tmp_path, SAVE_FILES, _aligned(data), 8192, direct=True)
    assert total == sum(n for _, n in SAVE_FILES) and fsyncs == 3 and in_write > 0 and in_fsync > 0
    for name, n in SAVE_FILES:       # the same bytes a buffered save writes: the buffer from its start per block
        assert (tmp_path / name).read_bytes() == b"".join(data[:min(8192, n - off)] for off in range(0, n, 8192))
    assert rank_io.direct_refusal(tmp_path) is None and sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]
    # a filesystem without O_DIRECT: the direct save fails there, a buffered one does not (the flag is really passed)
    res = _in_ramfs(tmp_path / "ram", [sys.executable, "-c", RAMFS_SAVE, str(tmp_path / "ram")])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["direct: EINVAL", "buffered: ok Invalid argument (errno 22)"], res.stdout


RAMFS_CHECK = """
import sys
from pathlib import Path
from storagebrief.core.config import ParamsError
from storagebrief.studies.checkpoint import run
folder = Path(sys.argv[1])
run.check_direct([("disk", Path(sys.argv[2]))])          # O_DIRECT works there: no word
try:
    run.check_direct([("disk", Path(sys.argv[2])), ("ram", folder)])
except ParamsError as exc:
    print(exc)
print(sorted(p.name for p in folder.iterdir()))
"""


def test_direct_on_a_filesystem_without_o_direct_is_refused_in_one_line(tmp_path):
    # prepare() runs this on every directory target before any work (a ramfs target itself is refused earlier,
    # by the target checks: it reports no size)
    disk = tmp_path / "disk"
    disk.mkdir()
    res = _in_ramfs(tmp_path / "ram", [sys.executable, "-c", RAMFS_CHECK, str(tmp_path / "ram"), str(disk)])
    assert res.returncode == 0, res.stderr
    msg, left = res.stdout.splitlines()
    assert msg.startswith(f"checkpoint.save_io = direct: target 'ram' ({tmp_path / 'ram'}) refuses O_DIRECT writes "
                          "(Invalid argument (errno 22)); use save_io: buffered"), msg
    assert left == "[]" and list(disk.iterdir()) == []          # the probes left nothing behind
