"""The checkpoint protocol on S3 targets: every rank's files as objects, in the run's own bucket / prefix.

prepare() opens every target's store (the engine's, core/stores.py: on an S3 target a core.s3store.ObjectStore,
the local gateway, versitygw, inside a cgroup holding the target's throttle, so the emulated profile caps the
device I/O it does; an external store gets its own run prefix); each rank opens its own from the store's handle. A protocol run then does what the directory run does, with keys for paths:
checkpoint/<model>/global_epoch1_step<k>/<file>, each saved by its rank as one multipart upload of
`write_block_mib` parts and, after the upload of every rank, a manifest object (off the ranks' clock);
retain's deletions delete the oldest step's keys (timed apart); restores drop the page cache of the
gateway's backing files (plain files under the target) and read the objects back in `read_block_mib`
ranged GETs, `readers_per_rank` in flight. The gateway's CPU seconds are read around every operation.
A store that fails mid-run (a gateway killed, a full device under it) gives a failed row with one line
and the run's objects removed; a rank killed from outside stops the study (exit 2), as on a directory.
The cost and framework sweeps measure directories only: an S3 target skips them (one note).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict

from ...core.causes import EnvironmentFailure, one_line
from ...core.checkpoint_workloads import checkpoint_folder
from ...core.s3gateway import GatewayDied
from ...core.store import Store
from ...core.sweep import Measurement
from ...core.targets import same_device_pairs
from . import dataset, metrics
from .ranks import RankPool

def target_store(sweep, t) -> Store:
    """The target's store (the engine's, opened on first use: an S3 target's local gateway in the target's cgroup;
    a directory's is its study folder, which the directory protocol's ranks write)."""
    p = sweep.p
    return sweep.store(t, pool=p.readers_per_rank * max(len(p.writers(m)) for m in p.models))


def open_stores(sweep) -> None:
    """Every target's store, opened before any measured work."""
    for t in sweep.targets:
        target_store(sweep, t)


_SKIP_NOTED: set = set()


def skip(sweep, which: str, target) -> bool:
    if target.name in sweep.state.directories or which == "protocol":
        return False
    key = (id(sweep), target.name, which)
    if key not in _SKIP_NOTED:
        _SKIP_NOTED.add(key)
        sweep.note(f"target '{target.name}' is an S3 target: checkpoint's {which} sweep measures directories only "
                   "and ran without it (the save / restore protocol ran on it)")
    return True


def targets_doc(sweep, state) -> dict:
    """study.json's targets (kind, access, device, profile, endpoint) and the (directory, local-gateway S3)
    pairs on one block device with one profile: the brief's "directory vs S3 on the same device"."""
    out = {}
    for t in sweep.targets:
        st = target_store(sweep, t)
        where = st.describe()
        out[t.name] = {"kind": t.kind, "access": st.access,
                       "device": t.device.name if t.device else None, "profile": t.profile_name,
                       **{k: where[k] for k in ("endpoint", "gateway") if k in where}}
    return {"targets": out, "same_device_pairs": same_device_pairs(sweep.targets)}


# --------------------------------------------------------------------------- one protocol run
def _complete(store, prefix: str, names: list[str]) -> bool:
    have = set(store.list(store.key(prefix + "/")))
    return all(store.key(f"{prefix}/{n}") in have for n in [*names, dataset.MANIFEST])


def _operate(pool, store, gw: dict, op: str, index: int, *args):
    g0 = store.server_cpu_seconds()
    release, got = pool.operate(op, *args)
    g1 = store.server_cpu_seconds()
    if g0 is not None and g1 is not None:
        gw[(op, index)] = g1 - g0
    return release, got


def _run(run, pool, store, p, model: str, files, gw: dict):
    root = f"checkpoint/{model}"
    plain = {r: (r, [(f.name, f.bytes) for f in fs]) for r, fs in files.items()}
    names = [f.name for fs in files.values() for f in fs]
    ops, kept, deletes = [], [], []
    for i in range(p.saves):
        step = i + 1
        where = f"{root}/{checkpoint_folder(step)}"
        pool.pause(p.pause_s)
        release, got = _operate(pool, store, gw, "save", i, store.key(where), plain, p.write_block)
        doc = {"model": model, "step": step, "scale": p.scale, "bytes": sum(f.bytes for fs in files.values() for f in fs),
               "files": [{"rank": f.rank, "name": f.name, "bytes": f.bytes} for fs in files.values() for f in fs]}
        store.put(store.key(f"{where}/{dataset.MANIFEST}"), json.dumps(doc).encode())
        ops.append(("save", i, step, release, got))
        kept.append(where)
        while len(kept) > p.retain:
            t = time.perf_counter()
            store.delete_under(store.key(kept.pop(0) + "/"))
            deletes.append(time.perf_counter() - t)
    ranks = sorted(files)
    shifted = {r: ranks[(i + p.rank_shift) % len(ranks)] for i, r in enumerate(ranks)}
    plan_ = {r: (shifted[r], [(f.name, f.bytes) for f in files[shifted[r]]]) for r in ranks}
    for j in range(p.restores):
        where = kept[j % len(kept)]
        if not _complete(store, where, names):
            raise RuntimeError(f"{store.url(store.key(where))}: not a complete checkpoint")
        pool.pause(p.pause_s)
        store.evict_cold(run, [store.key(where)], drop=True)
        release, got = _operate(pool, store, gw, "load", j, store.key(where), plan_, p.read_block, p.readers_per_rank)
        ops.append(("load", j, int(where.rsplit("step", 1)[1]), release, got))
    return ops, deletes


def protocol(run, config, files: dict, measurement, fault: dict | None) -> Measurement:
    """One protocol run on an S3 target; `measurement` (run._measurement) makes the row and tables; `fault` is
    run.FAULT (the test hook; {"kill_gateway": True} kills the local gateway after rank 0's first part)."""
    p, t = run.p, run.target
    store: Store = target_store(run.sweep, t)
    store.client_group(run)           # none: the ranks read no device; the gateway's cgroup holds the throttle
    root = f"checkpoint/{config.model}/"
    buf = min(p.write_block, max(f.bytes for fs in files.values() for f in fs))
    if fault and fault.get("kill_gateway"):      # the test hook: the local gateway's process
        fault = {**fault, "kill_gateway_pid": store.gateway.proc.pid, "kill_gateway_rank": min(files)}
    gw: dict = {}
    try:
        store.check()
        store.delete_under(store.key(root))
        with RankPool(sorted(files), buf, None, fault, store=asdict(store.handle()), readers=p.readers_per_rank) as pool:
            run.start_clock()
            ops, deletes = _run(run, pool, store, p, config.model, files, gw)
            run.stop_clock()
    except Exception as exc:   # noqa: BLE001 -- one line for the row; a killed rank still stops the study
        run.stop_clock()
        why = store.failure(exc)
        _remove_quietly(store, root)
        if isinstance(exc, EnvironmentFailure) and not isinstance(why, GatewayDied):
            raise
        reason = one_line(str(why).strip().splitlines()[-1] if str(why).strip() else type(why).__name__, 300)
        run.sweep.note(f"target '{t.name}': {run.run_id} failed: {reason}")
        row = metrics.run_row(p, config.model, [], [], run.sweep.state.generator_gb_per_s, pool=None)
        return Measurement({**row, "access": store.access}, ok=False,
                           failure_reason=f"{reason}; this run's objects were removed")
    _remove_quietly(store, root)      # space stays bounded: the next model starts from an empty prefix
    end = "upload completed" + (" (versitygw does not fsync)" if store.describe()["gateway"] else "")
    return measurement(run, config.model, ops, deletes, pool,
                       {"access": store.access, "save_ends_at": end, "gateway_cpu": gw, "save_io": "S3",
                        "memory_prep": "none: the saves are uploads (the store's writes are its own)"})


def _remove_quietly(store, prefix: str) -> None:
    try:
        store.delete_under(store.key(prefix))
    except Exception:   # noqa: BLE001 -- a dead gateway: close() removes the bucket's folder
        pass
