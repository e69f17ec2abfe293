"""Round 4 (issue 44), folders and liveness: a symlink never leads a study out of its folder (every registered
study, through the one accessor Target.study_dir), a run folder that is a symlink is one line, and two runs on a
shared S3 store never take each other for dead (a lease by the store's clock, or this machine + boot + PID
namespace), against a real store (a second local versitygw standing in for the user's)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storagebrief import studies
from storagebrief.core import outdir, targets
from storagebrief.studies.kv_cache import dataset as kv_dataset
from conftest import REPO


def _victim(tmp: Path) -> tuple[Path, dict]:
    """A user's folder holding files named like a study's (every study's folder and run-folder shapes)."""
    victim = tmp / "victim"
    files = {victim / "precious.txt": b"the user's"}
    for s in studies.REGISTRY:
        files[victim / s / f"{s}-run" / "mine.txt"] = b"theirs: " + s.encode()
        files[victim / f"{s}-run" / "mine.txt"] = b"theirs too"
        files[victim / "data" / "obj-00000"] = b"not random bytes"
    for f, body in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(body)
    return victim, files


def _unchanged(victim: Path, files: dict) -> None:
    now = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert now == files, sorted(set(now) ^ set(files))


def _cli(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})


# --------------------------------------------------------------------------- 2. a symlink never leads a study out
@pytest.mark.parametrize("where", ["storagebrief", "study"])
@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
def test_a_symlinked_study_folder_is_refused_in_one_line_by_every_study(study, where, tmp_path):
    """<target>/storagebrief, or <target>/storagebrief/<study>, a symlink to a user's folder: every registered
    study refuses before any work, exit 2, one line naming the symlink; the user's folder is byte for byte as it
    was. Before: kv_cache deleted the user's kv_cache-* folders, the object sweep overwrote their files."""
    victim, files = _victim(tmp_path)
    target = tmp_path / "t"
    if where == "storagebrief":
        target.mkdir()
        (target / "storagebrief").symlink_to(victim)
        link = target / "storagebrief"
    else:
        (target / "storagebrief").mkdir(parents=True)
        (target / "storagebrief" / study.name).symlink_to(victim / study.name)
        link = target / "storagebrief" / study.name
    params = tmp_path / "params.yaml"
    params.write_text(f"targets: [{{name: t, path: {target}}}]\nrun: {{trace: false}}\n{study.name}: {{}}\n")
    res = _cli(study.command, "--params", str(params), "--out", str(tmp_path / "out"), "--progress", "off")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-3000:]
    assert f"{link} is a symlink" in lines[0] and "remove the symlink" in lines[0], lines
    _unchanged(victim, files)
    assert link.is_symlink()


def test_every_access_to_a_study_folder_goes_through_the_guard(tmp_path):
    """Target.study_dir, the one accessor, refuses a symlink at storagebrief/ or storagebrief/<study>, even one
    staying inside the target, and a file where a folder belongs."""
    t = targets.Target("t", tmp_path / "t")
    (tmp_path / "t" / "elsewhere").mkdir(parents=True)
    assert t.study_dir("kv_cache") == tmp_path / "t" / "storagebrief" / "kv_cache"      # nothing there yet: fine
    (tmp_path / "t" / "storagebrief").mkdir()
    (tmp_path / "t" / "storagebrief" / "kv_cache").symlink_to(tmp_path / "t" / "elsewhere")
    with pytest.raises(outdir.UnsafeFolder, match="is a symlink .*remove the symlink"):
        t.study_dir("kv_cache")
    (tmp_path / "t" / "storagebrief" / "object_sweep").write_text("a file")
    with pytest.raises(outdir.UnsafeFolder, match="is not a folder"):
        t.study_dir("object_sweep")


def test_a_kv_run_folder_that_is_a_symlink_is_one_line_and_nothing_is_deleted(tmp_path):
    """The run folder <study>/<run id> a symlink: refused with one line (UnsafeFolder, exit 2), the user's
    folder kept. Before: shutil.rmtree's OSError, a traceback ('a bug')."""
    victim, files = _victim(tmp_path)
    t = targets.Target("t", tmp_path / "t")
    root = tmp_path / "t" / "storagebrief" / "kv_cache"
    root.mkdir(parents=True)
    (root / "kv_cache-t-r0").symlink_to(victim)
    with pytest.raises(outdir.UnsafeFolder, match="kv_cache-t-r0 is a symlink"):
        kv_dataset.fresh(t, "kv_cache-t-r0")
    _unchanged(victim, files)


def test_kv_leftovers_delete_only_real_run_folders_below_the_guarded_folder(tmp_path):
    """A killed run's folder goes; a symlink named like one (to a user's folder) is neither followed nor
    removed: it is not ours."""
    victim, files = _victim(tmp_path)
    t = targets.Target("t", tmp_path / "t")
    root = tmp_path / "t" / "storagebrief" / "kv_cache"
    (root / "kv_cache-t-r1" / "c0").mkdir(parents=True)
    (root / "kv_cache-t-r1" / "c0" / "u-t0-0.kv").write_bytes(b"kv")
    (root / "kv_cache-link").symlink_to(victim / "kv_cache")
    assert kv_dataset.remove_leftovers(t) == [root / "kv_cache-t-r1"]
    assert not (root / "kv_cache-t-r1").exists() and (root / "kv_cache-link").is_symlink()
    _unchanged(victim, files)


def test_a_directory_store_never_writes_through_a_symlinked_folder_or_file(tmp_path):
    """The object sweep's files on a directory target (core.store.DirStore): a folder below the store's root
    that is a symlink is refused, and a file that is one is never opened through it."""
    from storagebrief.core.store import DirStore
    victim, files = _victim(tmp_path)
    root = tmp_path / "t" / "storagebrief" / "object_sweep"
    root.mkdir(parents=True)
    (root / "data").symlink_to(victim / "data")
    st = DirStore(root)
    with pytest.raises(outdir.UnsafeFolder, match="data is a symlink"):
        st.put("data/obj-00000", b"random")
    (root / "put").mkdir()
    (root / "put" / "obj-00000").symlink_to(victim / "precious.txt")
    with pytest.raises(OSError):
        st.put_parts("put/obj-00000", [b"x" * 10], 10)
    st.put("put/obj-00000", b"ours")           # whole-object put: the link alone is replaced by our file
    assert (root / "put" / "obj-00000").read_bytes() == b"ours"
    _unchanged(victim, files)


# --------------------------------------------------------------------------- minor: a killed run's own trace
def _killed_runs_trace(path: Path) -> None:
    """What the trace reader leaves when killed -9 mid-run: the gzip stream up to its first flush (magic and
    header line, core.blocktrace), no end."""
    import gzip
    import io
    from storagebrief.core.traceformat import file_start
    buf = io.BytesIO()
    gz = gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1)
    gz.write(file_start({"page_size": 4096, "cpus": [0]}))
    gz.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("users_file", [False, True])
def test_a_killed_runs_own_raw_trace_is_ours_not_a_users_file(tmp_path, users_file):
    """An earlier result holding a raw trace its status.json does not list (the run was killed while tracing):
    the next complete run replaces it whole, no `.previous-` folder. A user's file named like a trace but not
    one (and any other unlisted file) still keeps it. Before: the trace counted as the user's, kept whole."""
    out = tmp_path / "out"
    first = outdir.OutputFolder(out, "kv_cache").check().create()
    (out / "runs.csv").write_text("run_id\nr0\n")
    first.progress(1, 3)
    first.release()
    _killed_runs_trace(out / "traces" / "kv_cache-t-r1.tracefs-raw.gz")
    if users_file:
        (out / "traces" / "notes.tracefs-raw.gz").write_bytes(b"\x1f\x8b not a trace of ours")
    second = outdir.OutputFolder(out, "kv_cache").check().create()
    (second.work / "runs.csv").write_text("run_id\nr0\nr1\n")
    second.complete()
    second.release()
    kept = [p.name for p in tmp_path.iterdir() if ".previous-" in p.name]
    assert (kept != []) == users_file, kept
    assert (out / "runs.csv").read_text().count("\n") == 3
