"""Round 4 (issue 44), folders and liveness: a symlink never leads a study out of its folder (every registered
study, through the one accessor Target.study_dir), a run folder that is a symlink is one line, and two runs on a
shared S3 store never take each other for dead (a lease by the store's clock, or this machine + boot + PID
namespace), against a real store (a second local versitygw standing in for the user's)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storagebrief import studies
from storagebrief.core import config, outdir, runlease, s3store, targets
from storagebrief.studies.kv_cache import dataset as kv_dataset
from conftest import REPO, needs_gateway
from test_s3_targets import external  # noqa: F401  (the fixture: a second versitygw standing in for the user's store)


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


# A folder below the study folder reached by a plain join, not folder_below: allowed only where a symlink there loses
# just the link (round 3: a checkpoint model's folder is removed through remove_tree before it is made again).
PLAIN_JOINS = {("checkpoint", "dataset.py", "model_dir")}


@pytest.mark.parametrize("study", list(studies.REGISTRY.values()), ids=lambda s: s.name)
def test_every_study_reaches_its_run_folders_through_folder_below(study):
    """In each registered study's package, `study_dir(...) / name` (a run folder reached without the lstat check)
    appears only as the path a remove_tree deletes, or in PLAIN_JOINS: a new study cannot forget the guard."""
    import ast
    bad = []
    for f in sorted((REPO / "lib" / "storagebrief" / "studies" / study.name).glob("*.py")):
        tree = ast.parse(f.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "study_dir"):
                continue
            up = parents.get(node)
            if not (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div) and up.left is node):
                continue
            call, fn = parents.get(up), up
            while fn is not None and not isinstance(fn, ast.FunctionDef):
                fn = parents.get(fn)
            deleting = isinstance(call, ast.Call) and getattr(call.func, "id", "") == "remove_tree"
            if not deleting and (study.name, f.name, getattr(fn, "name", "")) not in PLAIN_JOINS:
                bad.append(f"{f.name}:{node.lineno}")
    assert not bad, f"{study.name}: run folders joined below study_dir without folder_below: {bad}"


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


# --------------------------------------------------------------------------- 3. liveness across hosts and namespaces
def _store(tmp: Path, gw) -> s3store.ObjectStore:
    data = {"targets": [{"name": "ext", "path": str(tmp / "ext"), "kind": "s3",
                         "s3": {"endpoint": gw.endpoint, "bucket": "theirs", "prefix": "bench"}}]}
    return s3store.ObjectStore(targets.resolve_all(config.validate(data, root=tmp), create=True)[0], tmp / "logs")


def _keys(c) -> set[str]:
    return {o["Key"] for o in c.list_objects_v2(Bucket="theirs").get("Contents", [])}


def _dead_pid() -> str:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"{proc.pid}:1"          # a PID that ran here and ended


def _plant(c, gw, run: str, doc: dict, age_s: float = 0) -> str:
    """A run folder with its marker and one object; an `age_s` old marker: its file's mtime on the store's disk
    (versitygw's posix backend reports it as LastModified), so the store itself says how old it is."""
    folder = f"bench/storagebrief-run-{run}/"
    c.put_object(Bucket="theirs", Key=folder + s3store.MARKER, Body=json.dumps(doc).encode())
    c.put_object(Bucket="theirs", Key=folder + "obj-0", Body=b"live bytes")
    if age_s:
        f = gw.root / "theirs" / folder / s3store.MARKER
        os.utime(f, (time.time() - age_s, time.time() - age_s))
    return folder


@needs_gateway
def test_a_live_run_in_another_pid_namespace_or_host_of_the_same_name_is_kept(tmp_path, external):
    """Markers with this hostname and a PID that is not running here, freshly renewed: another PID namespace
    (same machine and boot), another machine of the same name, and an old marker without identity. All kept.
    Before: each was taken for a killed run and its live objects deleted (the first run died with NoSuchKey)."""
    gw, c = external
    mine, dead = runlease.identity(), _dead_pid()
    folders = [_plant(c, gw, "other-ns", {**runlease.marker_doc(dead), "pid_ns": "0:1"}),
               _plant(c, gw, "other-host", {**runlease.marker_doc(dead), "machine_id": "f" * 32}),
               _plant(c, gw, "old", {"host": __import__("socket").gethostname(), "owner": dead})]
    assert mine["boot_id"] and mine["pid_ns"]
    st = _store(tmp_path, gw).open()
    try:
        assert st.removed_stale == []
        assert all(f + "obj-0" in _keys(c) for f in folders)
    finally:
        st.close()
    assert all(f + "obj-0" in _keys(c) for f in folders) and "datasets/keep.bin" in _keys(c)


SECOND_RUN = """
import sys
from pathlib import Path
from storagebrief.core import config, targets, s3store
data = {"targets": [{"name": "ext", "path": sys.argv[1], "kind": "s3",
                     "s3": {"endpoint": sys.argv[2], "bucket": "theirs", "prefix": "bench"}}]}
st = s3store.ObjectStore(targets.resolve_all(config.validate(data, root=Path(sys.argv[1]).parent), create=True)[0],
                         Path(sys.argv[3])).open()
print(len(st.removed_stale), flush=True)
st.close()
"""


@needs_gateway
@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of its own (unshare --pid) needs root")
def test_a_second_run_in_its_own_pid_namespace_keeps_the_first_runs_live_objects(tmp_path, external):
    """The case as found: a live run on the external store, a second run with the same hostname in a PID namespace
    of its own (its /proc shows none of ours). The first run's objects stay and it reads them after. Before: the
    second deleted them as a killed run's, the first died with NoSuchKey."""
    gw, c = external
    first = _store(tmp_path, gw).open()
    try:
        first.put(first.key("obj-0"), b"live bytes")
        res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", SECOND_RUN,
                              str(tmp_path / "ext2"), gw.endpoint, str(tmp_path / "logs2")],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
        if res.returncode and "unshare" in res.stderr and "Traceback" not in res.stderr:
            pytest.skip(f"no PID namespace here: {res.stderr.strip()}")
        assert res.returncode == 0 and res.stdout.strip() == "0", res.stderr[-2000:]
        assert first.get(first.key("obj-0")) == b"live bytes"
    finally:
        first.close()


@needs_gateway
def test_an_expired_lease_and_a_dead_run_of_this_namespace_are_removed(tmp_path, external):
    """A marker not renewed for longer than the lease (by the store's clock; from another host, even one whose
    process might run) goes; so does a fresh one written in this machine, boot and PID namespace whose process
    has ended. Their neighbours and the user's object stay."""
    gw, c = external
    alive_elsewhere = {**runlease.marker_doc(f"{os.getpid()}:1"), "machine_id": "f" * 32}
    expired = _plant(c, gw, "expired", alive_elsewhere, age_s=runlease.LEASE_S + 120)
    same_ns_dead = _plant(c, gw, "dead-here", runlease.marker_doc(_dead_pid()))
    fresh_elsewhere = _plant(c, gw, "fresh", alive_elsewhere, age_s=runlease.LEASE_S - 120)
    st = _store(tmp_path, gw).open()
    try:
        said = " ".join(st.removed_stale)
        assert "lease expired" in said and "on this machine has ended" in said, st.removed_stale
    finally:
        st.close()
    keys = _keys(c)
    assert not [k for k in keys if k.startswith((expired, same_ns_dead))]
    assert fresh_elsewhere + "obj-0" in keys and "datasets/keep.bin" in keys


@needs_gateway
def test_the_lease_is_renewed_while_the_run_lives_and_never_after_it_closed(tmp_path, external, monkeypatch):
    gw, c = external
    monkeypatch.setattr(runlease, "RENEW_S", 0.3)
    st = _store(tmp_path, gw).open()
    key = st.prefix + s3store.MARKER
    first = c.head_object(Bucket="theirs", Key=key)["LastModified"]
    time.sleep(2.2)                 # LastModified has one-second resolution
    assert c.head_object(Bucket="theirs", Key=key)["LastModified"] > first
    doc = json.loads(c.get_object(Bucket="theirs", Key=key)["Body"].read())
    assert doc["lease_s"] == runlease.LEASE_S and doc["pid_ns"] == runlease.identity()["pid_ns"]
    st.close()
    assert not st.lease.alive
    time.sleep(1)
    assert not [k for k in _keys(c) if k.startswith(st.prefix)]      # no renewal wrote it back


def test_liveness_rules_without_a_store():
    dead = _dead_pid()
    here = runlease.marker_doc(dead)
    assert runlease.why_dead(here, 5) and runlease.why_dead({**here, "pid_ns": "x"}, 5) is None
    assert runlease.why_dead(runlease.marker_doc(f"{os.getpid()}:999"), 5)         # the PID reused by a later one
    assert runlease.why_dead(runlease.marker_doc(f"{os.getpid()}:{runlease.start_ticks(os.getpid())}"), 5) is None
    assert runlease.why_dead({"owner": dead}, None) is None                       # old, age unknown: kept
    assert runlease.why_dead({"owner": dead}, runlease.LEASE_S + 1)
    assert runlease.why_dead({**here, "pid_ns": "x", "lease_s": 10 * runlease.LEASE_S}, 2 * runlease.LEASE_S) is None
    assert runlease.why_dead({"owner": "1:1", "machine_id": "", "boot_id": "", "pid_ns": ""}, 5) is None


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
