"""The study's data on a target, made once and kept (a folder per data set and shape, built beside its place
and renamed in: core.results.staged_dir): seeded vectors, queries, brute-force ground truth and the DiskANN disk
index over the vectors.

clustered: Gaussian clusters around random centres; a query is a database vector plus small noise (v3.0's
`query_mode: planted`), so its true neighbours are a real neighbourhood and recall can tell settings apart.
uniform: uniform random vectors and uniform random queries, v3.0's data: every vector is nearly equidistant
from a query in high dimension, so recall at a given L is low whatever the storage (mlcommons/storage#625).
Ground truth: exact L2 k-nearest neighbours, computed in blocks of queries (numpy only).
The index is built in a worker of its own (kit.ranks): the search library's threads never live in this process,
which forks the search workers later.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ...core import results
from ...core.causes import EnvironmentFailure
from ...core.folders import folder_below
from ...kit.launch import open_launch
from ...kit.ranks import Worker
from . import STUDY, fit, pq
from .params import VectorSearchParams

SETS = ("clustered", "uniform")
INDEX = "index"                 # the index folder inside a data set's folder
MANIFEST = "dataset.json"


def shape(p: VectorSearchParams, kind: str) -> dict:
    """What makes a data set: a folder holding another shape is rebuilt. The engine's version and the build's
    threads are part of it (one build thread: the same graph from the same vectors; more: another graph each time),
    and `pq` the seeded product quantizer (pq.py): a set kept from a build with the engine's own is made again."""
    keys = ("num_vectors", "dimension", "queries", "k", "graph_degree", "build_complexity", "pq_chunks",
            "build_threads", "seed")
    extra = ("clusters", "cluster_spread", "query_noise") if kind == "clustered" else ()
    return {"set": kind, **{k: getattr(p, k) for k in keys + extra}, "engine": engine_version(), "pq": "seeded"}


def engine_version() -> str:
    """The search engine's package and version, read without loading it (none: not installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"diskannpy-rust {version('diskannpy-rust')}"
    except PackageNotFoundError:
        return "diskannpy-rust (not installed)"


def pq_seed(p: VectorSearchParams, kind: str) -> int:
    """The product quantizer's seed: the data set's, one per set."""
    return int(np.random.SeedSequence([p.seed, SETS.index(kind)]).generate_state(1)[0])


def folder(target, kind: str) -> Path:
    return folder_below(target.study_dir(STUDY.name), kind, create=False)


def index_files(directory: Path) -> list[Path]:
    return sorted((directory / INDEX).glob("*"))


def disk_index(directory: Path) -> Path:
    return directory / INDEX / "ann_disk.index"


def generate(p: VectorSearchParams, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, queries), float32, from the `seed` parameter alone."""
    rng = np.random.default_rng([p.seed, SETS.index(kind)])
    n, d = p.num_vectors, p.dimension
    if kind == "uniform":
        return rng.random((n, d), dtype=np.float32), rng.random((p.queries, d), dtype=np.float32)
    centres = rng.standard_normal((p.clusters, d), dtype=np.float32)
    which = rng.integers(0, p.clusters, n)
    vectors = centres[which] + p.cluster_spread * rng.standard_normal((n, d), dtype=np.float32)
    planted = rng.choice(n, p.queries, replace=False)
    queries = vectors[planted] + p.query_noise * rng.standard_normal((p.queries, d), dtype=np.float32)
    return vectors.astype(np.float32), queries.astype(np.float32)


def ground_truth(vectors: np.ndarray, queries: np.ndarray, k: int, block: int = 64) -> np.ndarray:
    """Exact k nearest neighbours (L2) of every query, ids ordered by distance."""
    norms = np.einsum("ij,ij->i", vectors, vectors)
    out = np.empty((len(queries), k), dtype=np.int64)
    for i in range(0, len(queries), block):
        q = queries[i:i + block]
        dist = norms[None, :] - 2.0 * (q @ vectors.T)          # + |q|² is the same for every candidate
        part = np.argpartition(dist, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(dist, part, axis=1).argsort(axis=1)
        out[i:i + block] = np.take_along_axis(part, order, axis=1)
    return out


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found ∩ true k nearest| / k."""
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k].tolist()) & set(t.tolist())) / k for f, t in zip(found, truth)]))


# -- the index build, in a worker of its own -------------------------------------------------------------
def _build_setup(rank: int, n: int, cfg: dict) -> dict:
    return cfg


def engine():
    """diskannpy with its Rust log held to errors: its INFO lines (thousands a study) would fill the notebook's
    cells and the DVC log. The level is read once, at the first import in a process, so every import goes here."""
    os.environ.setdefault("RUST_LOG", "error")
    import diskannpy
    return diskannpy


@contextmanager
def _stdout_to(log: str | None):
    """The process's stdout (fd 1, where DiskANN's Rust build prints "Starting index build …", "Indexing time: …")
    appended to `log` while the build runs: the run's log keeps it, the notebook's cell and the DVC log do not
    (issue 62). None: stdout as it is."""
    if not log:
        yield
        return
    import sys
    sys.stdout.flush()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(1)
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _build_work(cfg: dict, rank: int, msg, line) -> dict:
    import time

    diskannpy = engine()

    vectors = np.load(cfg["vectors"], mmap_mode="r")
    t0 = time.perf_counter()
    with _stdout_to(cfg.get("log")):
        diskannpy.build_disk_index(np.ascontiguousarray(vectors), "l2", cfg["index_dir"],
                                   complexity=cfg["build_complexity"], graph_degree=cfg["graph_degree"],
                                   build_memory_maximum=cfg["build_memory_gib"], num_threads=cfg["build_threads"],
                                   num_of_pq_chunks=cfg["pq_chunks"])
        info = pq.reseed(cfg["index_dir"], vectors, cfg["pq_seed"], diskannpy)
    return {"build_seconds": time.perf_counter() - t0, **info}


BUILD_LOG = "index-build-{target}-{kind}.log"      # in the run's logs/ folder

BUILDER = Worker("index build", _build_setup, _build_work, setup_in_cgroup=False)


def _build(p: VectorSearchParams, kind: str, tmp: Path, log: Path | None = None) -> dict:
    """The build worker's report: build_seconds and the product quantizer's (pq.reseed); what DiskANN prints goes
    to `log` when given."""
    (tmp / INDEX).mkdir()
    cfg = {"vectors": str(tmp / "vectors.npy"), "index_dir": str(tmp / INDEX), "graph_degree": p.graph_degree,
           "build_complexity": p.build_complexity, "pq_chunks": p.pq_chunks, "build_threads": p.build_threads,
           "build_memory_gib": fit.build_memory_gib(p), "pq_seed": pq_seed(p, kind),
           "log": str(log) if log is not None else None}
    with open_launch(BUILDER, [0], cfg, start_timeout_s=120) as launch:
        _, done = launch.operate(timeout_s=24 * 3600)
    return dict(done[0].result)


HASH_UP_TO = 256 * 2**20         # files up to this size get a checksum in the manifest (cheap); larger: size only


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def kept_files(directory: Path) -> dict:
    """Every file a data set keeps, by its path inside the folder: its size, and its sha256 where cheap."""
    out = {}
    for f in [directory / "queries.npy", directory / "truth.npy", *index_files(directory)]:
        size = f.stat().st_size
        out[str(f.relative_to(directory))] = {"bytes": size, **({"sha256": _sha256(f)} if size <= HASH_UP_TO else {})}
    return out


def damage(directory: Path, have: dict) -> str | None:
    """What is wrong with a kept data set against its manifest (a missing, truncated or changed file), or None.
    A manifest of before the checksums (index_files: sizes only) is held to its sizes and the queries and truth
    files it must have."""
    files = have.get("files")
    if files is None:
        files = {f"{INDEX}/{n}": {"bytes": b} for n, b in (have.get("index_files") or {}).items()}
        files.update({n: {} for n in ("queries.npy", "truth.npy")})
    if f"{INDEX}/{disk_index(directory).name}" not in files:
        return "its manifest lists no disk index"
    for name, want in files.items():
        f = directory / name
        try:
            st = f.lstat() if f.is_file() and not f.is_symlink() else None
        except OSError:
            st = None
        if st is None:
            return f"{name} is missing"
        if st.st_uid != os.geteuid():
            return f"{name} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
        size = st.st_size
        if "bytes" in want and size != want["bytes"]:
            return f"{name} is {size:,} bytes, its manifest says {want['bytes']:,}"
        if "sha256" in want and _sha256(f) != want["sha256"]:
            return f"{name} does not match its manifest's checksum"
    return None


def _have(directory: Path, want: dict, status=None) -> dict | None:
    """The kept data set's manifest when it is of this shape and whole; None (saying why when `status`) when it
    must be made again."""
    man = directory / MANIFEST
    if not man.is_file():
        return None
    try:
        have = json.loads(man.read_text())
    except (OSError, ValueError) as exc:
        why = f"its {MANIFEST} cannot be read ({exc.__class__.__name__})"
    else:
        if not isinstance(have, dict) or have.get("shape") != want:
            return None
        why = damage(directory, have)
        if why is None:
            return have
    if status is not None:
        status(f"vector_search: the kept data set in {directory} is damaged ({why}): building it again")
    return None


def space_needed(p: VectorSearchParams, target, builds: bool) -> int:
    """Bytes `target` needs for the sets it lacks (a kept set counts only when it holds this shape): each finished
    set, and where they are built (`builds`: not copied from another target) the last at its build's peak."""
    kinds = SETS if p.uniform_control else SETS[:1]
    missing = [k for k in kinds if _have(folder(target, k), shape(p, k)) is None]
    if not missing:
        return 0
    finished = p.dataset_bytes() // (2 if p.uniform_control else 1)
    last = fit.build_peak_bytes(p)[0] if builds else finished
    return finished * (len(missing) - 1) + last


def _copy(source: Path, tmp: Path) -> dict:
    """The data set of another target, byte for byte (the index is the same wherever it lives)."""
    (tmp / INDEX).mkdir()
    for name in ("queries.npy", "truth.npy", *(f"{INDEX}/{f.name}" for f in index_files(source))):
        shutil.copyfile(source / name, tmp / name)
    manifest = {**json.loads((source / MANIFEST).read_text()), "copied_from": str(source)}
    why = damage(tmp, {**manifest, "files": manifest.get("files") or kept_files(source)})
    if why is not None:
        raise ValueError(f"vector_search: the copy of {source} is not whole ({why}); free space on the target and "
                         "run again")
    return {**manifest, "files": kept_files(tmp)}


@contextmanager
def _full_is_one_line(target, kind: str, tmp: Path, p: VectorSearchParams):
    """A target that fills during a build (DiskANN's Rust error, or a write of ours): one line naming the folder
    and the bytes its build needs, not the worker's traceback (the staging folder goes: results.staged_dir)."""
    try:
        yield
    except Exception as exc:
        if not fit.full_during_build(exc):
            raise
        need, how = fit.build_peak_bytes(p)
        raise EnvironmentFailure(
            f"vector_search: target '{target.name}' filled while building the {kind} set in {tmp}: No space left "
            f"on device; its build needs about {need:,} bytes ({need / 2**30:,.2f} GiB) there at its peak ({how}): "
            "free space on the target or lower vector_search.num_vectors") from None


def ready(target, p: VectorSearchParams, kind: str, status=print, source_target=None,
          log_dir: Path | None = None) -> dict:
    """The data set's folder on `target`, made when missing or of another shape (copied from `source_target`'s
    when that holds it); its manifest. What the index build prints goes to `log_dir`/BUILD_LOG when given."""
    directory = folder(target, kind)
    want = shape(p, kind)
    have = _have(directory, want, status)
    if have is not None:
        return {**have, "reused": True}
    source = folder(source_target, kind) if source_target is not None else None
    if source is not None and _have(source, want) is not None:
        status(f"vector_search: copying the {kind} set to '{target.name}'")
        with results.staged_dir(directory) as tmp:
            manifest = _copy(source, tmp)
            (tmp / MANIFEST).write_text(results.json_text(manifest, indent=1))
        return {**manifest, "reused": False}
    log = Path(log_dir) / BUILD_LOG.format(target=target.name, kind=kind) if log_dir is not None else None
    status(f"vector_search: generating the {kind} set ({p.num_vectors:,} x {p.dimension}) and building its index "
           f"on '{target.name}'" + (f" (DiskANN's messages: logs/{log.name})" if log is not None else ""))
    with results.staged_dir(directory) as tmp, _full_is_one_line(target, kind, tmp, p):
        vectors, queries = generate(p, kind)
        np.save(tmp / "vectors.npy", vectors)
        np.save(tmp / "queries.npy", queries)
        np.save(tmp / "truth.npy", ground_truth(vectors, queries, p.k))
        del vectors
        built = _build(p, kind, tmp, log)
        vectors_sha256 = _sha256(tmp / "vectors.npy")
        (tmp / "vectors.npy").unlink()          # the index holds the full vectors: no second copy kept
        files = {f.name: f.stat().st_size for f in index_files(tmp)}
        manifest = {"shape": want, **built, "vectors_sha256": vectors_sha256, "repeatable": p.build_threads == 1,
                    "index_files": files, "index_bytes": sum(files.values()), "files": kept_files(tmp)}
        (tmp / MANIFEST).write_text(results.json_text(manifest, indent=1))
    return {**manifest, "reused": False}
