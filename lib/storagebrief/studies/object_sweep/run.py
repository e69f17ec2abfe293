"""The object sweep on the shared engine (core.sweep): GET and PUT at object size x concurrency, idle
vs busy, on every S3 target and, with the same client code path, on every directory target.

Every target's store is the engine's (sweep.store, core/stores.py: one per target for the whole run) and every
call goes through it. S3 targets: an ObjectStore (core.s3store): the local gateway (versitygw) starts inside a
cgroup holding the target's throttle (or one that only counts), so the device I/O it does is the emulated
device's; an external endpoint gets its own run prefix. Directory targets: a DirStore on the study's folder; the
same batches read and write whole files, in a worker inside the cgroup the store names (store.client_group: the
target's throttle). The client is compiled (kit/s3worker: Go with minio-go; `make s3worker`): it opens the
target's store itself from its handle (core.store.StoreHandle) and moves every byte; Python starts it and reads
its counts. Each run is one worker process (worker.py: the client's CPU is its own), started before the clock; the busy load
(stress-ng at busy.cpu_percent of every CPU) runs beside it, outside every cgroup. GET reads the
objects dataset.py wrote in prepare, from a cold cache where the files are on this machine; PUT writes
a point's own keys, removed after the run (outside the clock). The engine closes the stores: the gateways stop
and everything the study wrote on object targets goes (external: only its run prefix).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass

from ...core import procs, results
from ...core.config import ParamsError
from ...core.s3store import S3Failed
from ...core.store import Store
from ...core.sweep import Measurement, Point
from ...kit import client_bound, s3ops, s3ref, s3worker, space
from ...kit.child import Child
from ...kit.client_bound import BOUND_FRACTION
from ...kit.s3study import CLIENT_LIMIT_PERCENT, judge_row
from ...kit.sizes import size_label
from . import STUDY, dataset
from .params import ObjectSweepParams
from .worker import GO, check_budget

READY_S = 120.0          # a worker's start-up (imports, client, a PUT's body) before the clock
BATCH_S = 3600.0         # one batch: the point's bytes at the slowest profile, with room



@dataclass(frozen=True)
class Config:
    load: str                 # idle | busy
    op: str                   # get | put
    object_bytes: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.load} {self.op.upper()} {size_label(self.object_bytes)} x{self.concurrency}"


# --------------------------------------------------------------------------- prepare
def _store(sweep, t) -> Store:
    return sweep.store(t, pool=max(sweep.p.concurrency))


def prepare(sweep) -> None:
    p: ObjectSweepParams = sweep.p
    if "busy" in p.loads and shutil.which("stress-ng") is None:
        raise ParamsError("object_sweep.loads has 'busy' but stress-ng is not installed (`make system-deps`); "
                          "install it or drop 'busy'")
    if p.reference_client and s3ref.missing():
        raise ParamsError(f"object_sweep.reference_client is true but {s3ref.missing()}; build it or set it false")
    check_budget(p)                 # the machine's limits now (validate too)
    local = [t for t in sweep.targets if t.on_this_machine]
    space.check_space(local, lambda t: dataset.needed_bytes(p, p.ops), "the object sweep's objects")
    for t in sweep.targets:
        dataset.write(t, _store(sweep, t), p, sweep.status)
    results.write_json(sweep.out_dir / "study.json", _study_json(sweep))


def _study_json(sweep) -> dict:
    p: ObjectSweepParams = sweep.p
    return {"client": p.client, "client_limit_percent": CLIENT_LIMIT_PERCENT, "cpus": os.cpu_count(),
            "client_bound_percent_of_usable_cores": round(100 * BOUND_FRACTION),
            "objects": {size_label(s): p.objects_for(s) for s in p.object_sizes},
            "busy_cpu_percent": p.busy.cpu_percent if "busy" in p.loads else None,
            "targets": {t.name: {"kind": t.kind, **_store(sweep, t).describe(),
                                 "device": t.device.name if t.device else None}
                        for t in sweep.targets}}


# --------------------------------------------------------------------------- plan
def plan(sweep) -> list[Point]:
    p: ObjectSweepParams = sweep.p
    return [Point(c, r, c.label) for r in range(1, p.repeats + 1) for ld in p.loads for size in p.object_sizes
            for conc in p.concurrency for op in p.ops for c in [Config(ld, op, size, conc)]]


def run_id(config: Config, target, repeat: int) -> str:
    c = config
    return f"{STUDY.name}-{target.name}-{c.load}-{c.op}-{size_label(c.object_bytes)}-c{c.concurrency}-r{repeat}"


# --------------------------------------------------------------------------- one run
def _worker_cfg(run, c: Config, keys: list[str], store: Store) -> tuple[dict, dict]:
    """The worker's configuration (stdin) and environment: credentials never go on stdin, argv or a file."""
    p = run.p
    handle, env = store.handle().without_secrets()
    return {"op": c.op, "size": c.object_bytes, "concurrency": c.concurrency, "seed": p.seed, "keys": keys,
            "store": asdict(handle)}, env


def _busy_load(run, scope: procs.Scope) -> subprocess.Popen:
    p = run.p
    proc = scope.popen(["stress-ng", "--cpu", str(os.cpu_count() or 1), "--cpu-load", f"{p.busy.cpu_percent:g}",
                        "--timeout", "3600s", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(p.busy.settle_s)
    if proc.poll() is not None:
        raise RuntimeError(f"the busy load (stress-ng) exited at once with status {proc.returncode}")
    return proc


def _keys(c: Config, run, store) -> list[str]:
    p = run.p
    n = p.objects_for(c.object_bytes)
    names = dataset.names(c.object_bytes, n) if c.op == "get" else \
        dataset.names(c.object_bytes, n, "put", f"c{c.concurrency}-r{run.repeat}")
    return [store.key(k) for k in names]


def run_one(run, config: Config) -> Measurement:
    t = run.target
    store: Store = _store(run.sweep, t)
    keys = _keys(config, run, store)
    group = store.client_group(run)
    cfg, env = _worker_cfg(run, config, keys, store)
    scope = procs.Scope(run.run_id, group)
    busy = procs.Scope(f"{run.run_id}-busy")
    try:
        return _measure(run, config, store, scope, busy, cfg, env, keys)
    except s3ref.ReferenceFailed as exc:
        store.check()                       # a gateway that died is the cause to name, not its client's death
        return _reference_failed(run, config, store, keys, str(exc))
    finally:
        busy.close()
        scope.close()


def _reference_failed(run, c: Config, store, keys: list[str], why: str) -> Measurement:
    """The point fails cleanly when the reference client dies or fails (kit/s3ref): a failed row naming the cause;
    a PUT's objects removed; the sweep goes on."""
    if c.op == "put":
        try:
            store.delete(keys)
        except Exception as exc:            # noqa: BLE001  (close() removes what the study wrote in any case)
            run.sweep.note(f"object_sweep: removing {c.label}'s objects after the reference client failed: {exc}")
    reason = f"reference client: {why}"
    row = {"load": c.load, "op": c.op, "object_bytes": c.object_bytes, "object_label": size_label(c.object_bytes),
           "concurrency": c.concurrency, "kind": run.target.kind, "access": store.access,
           "throttled": bool(run.emulated), "limited_by": "reference client failed", "limited_by_reason": reason}
    return Measurement(row, ok=False, failure_reason=reason)


def _cold_cache(run, c: Config, store) -> None:
    """The objects' own files evicted (after os.sync: earlier runs' dirty pages are not written back inside this
    one), not drop_caches: that would also drop the worker's code pages, and a worker in a throttled cgroup
    re-reading them at the profile's IOPS took 17-18 s per run under hdd_7200 (measured), none of it measured."""
    store.evict_cold(run, [store.key(n) for n in dataset.names(c.object_bytes, run.p.objects_for(c.object_bytes))],
                     "the objects' files")


def shares(keys: list[str], concurrency: int, processes: int) -> list[tuple[list[str], int]]:
    """The point split among `processes` client processes (no more than requests in flight or keys): every key once,
    the concurrency summing to the point's."""
    n = max(1, min(processes, concurrency, len(keys)))
    return [(keys[i::n], concurrency // n + (1 if i < concurrency % n else 0)) for i in range(n)]


def _start_workers(run, scope, store, cfg: dict, env: dict, parts: list[tuple[list[str], int]]) -> list[Child]:
    """Every worker started (its client, a PUT's body) and ready before the clock; none touches data before 'go'.
    Each is the compiled client (kit/s3worker) in the run's cgroup (a directory target's throttle), its log in
    logs/; a PUT's folders exist first, as a bucket does."""
    logs = run.sweep.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    join = list(scope.group.procs_files) if scope.group is not None else None
    if cfg["op"] == "put":
        store.prepare_puts([k for keys, _ in parts for k in keys])
    workers: list[Child] = []
    try:
        for i, (keys, conc) in enumerate(parts):
            w = s3worker.start({**cfg, "keys": keys, "concurrency": conc}, env,
                               logs / f"{run.run_id}-worker-{i}.log", f"object-sweep worker {i}", join)
            workers.append(w)
        for w in workers:
            _expect(store, w, "ready", READY_S)
    except BaseException:
        _stop(workers)
        raise
    return workers


def _expect(store, w: Child, event: str, timeout_s: float) -> dict:
    """The worker's next `event`; a worker that died or failed names a dead gateway first (store.check)."""
    try:
        return w.expect(event, timeout_s)
    except Exception:
        store.check()
        raise


def _stop(workers: list[Child]) -> None:
    for w in workers:
        w.stop()


def _measure(run, c: Config, store, scope, busy, cfg: dict, env: dict, keys: list[str]) -> Measurement:  # long: one point's workers, start to row
    reference = run.p.reference_client and c.load == "idle" and getattr(store, "gateway", None) is not None
    ref_first = reference and run.repeat % 2 == 0          # alternating: odd repeats ours first, even the reference
    ref = _reference(run, c, store, scope, keys) if ref_first else None
    parts = shares(keys, c.concurrency, run.p.client_processes)
    workers = _start_workers(run, scope, store, cfg, env, parts)
    try:
        _cold_cache(run, c, store)          # after the workers are ready: the objects' files go cold
        if c.load == "busy":
            _busy_load(run, busy)
        g0 = store.server_cpu_seconds()
        sched0 = [client_bound.thread_sched(w.pid) for w in workers]
        with client_bound.ReadySampler([w.pid for w in workers]) as ready:   # sampled from here, not in the worker
            run.start_clock()
            for w in workers:                   # one 'go' each, back to back: the shares start together
                w.send(GO)
            got = [_expect(store, w, "done", BATCH_S) for w in workers]
            run.stop_clock()
        sched1 = [client_bound.thread_sched(w.pid) for w in workers]
        g1 = store.server_cpu_seconds()
    finally:
        busy.kill()
        _stop(workers)
    failed = [r["error"] for r in got if "error" in r]
    if failed:
        store.check()
        raise S3Failed(f"target '{run.target.name}' {c.label}: {failed[0]}")
    parts = [s3worker.batch(r, w.pid, s0, s1).part() for r, w, s0, s1 in zip(got, workers, sched0, sched1)]
    parts = [{**b, "client_processes": client_bound.add_ready(b["client_processes"], ready.fractions())} for b in parts]
    row = s3ops.merged(parts).row()
    if c.op == "put":
        store.delete(keys)          # a PUT point's objects go after the run (outside the clock): space stays bounded
    if reference and not ref_first:
        ref = _reference(run, c, store, scope, keys)
    if ref is not None:
        row.update({"reference_mb_per_s": ref["mb_per_s"], "reference_client_cpu_s_per_gb": ref["cpu_s_per_gb"],
                    "reference_order": "before" if ref_first else "after",
                    "study_to_reference": row["bytes_moved"] / row["wall_seconds"] / 1e6 / ref["mb_per_s"]
                    if ref["mb_per_s"] and row["wall_seconds"] else None})
    gb = row["bytes_moved"] / 1e9
    row.update({"load": c.load, "op": c.op, "object_bytes": c.object_bytes, "object_label": size_label(c.object_bytes),
                "concurrency": c.concurrency, "kind": run.target.kind,
                "access": store.access,
                "gateway_cpu_seconds": None if g0 is None or g1 is None else g1 - g0,
                "gateway_cpu_s_per_gb": None if g0 is None or g1 is None or gb <= 0 else (g1 - g0) / gb,
                "throttled": bool(run.emulated)})
    return Measurement(_judged(row, run.monitor.summary().get("cpu_busy_percent") if run.monitored else None))


def _reference(run, c: Config, store, scope, keys: list[str]) -> dict:
    """The reference client (kit/s3ref) on the point's keys, from the state the study's client meets: a GET's
    objects evicted first, a PUT's keys absent (removed after its batch). Outside the run's clock."""
    if c.op == "get":
        _cold_cache(run, c, store)
    b = s3ref.Batch(store.handle(), c.op, c.object_bytes, c.concurrency, keys, scope, READY_S)
    b.go()
    got = b.result(BATCH_S)
    if c.op == "put":
        store.delete(keys)
    return got


def _judged(row: dict, machine_busy_percent: float | None) -> dict:
    """The row with what limited it (kit/s3study, per client process) and that evidence; the processes flattened
    into columns (runs.csv holds scalars)."""
    row["limited_by"], row["limited_by_reason"] = judge_row(row, machine_busy_percent)
    procs_ = row.pop("client_processes", None) or []
    row["client_processes"] = len(procs_)
    row["client_cores_used_max"] = max((p["cpu_seconds"] / p["wall_seconds"] for p in procs_
                                        if p["wall_seconds"] > 0), default=None)
    row["client_usable_cores"] = sum(p["usable_cores"] for p in procs_) if procs_ else None
    return row


# --------------------------------------------------------------------------- finish / close
def finish(sweep, frame) -> None:
    from . import metrics
    results.write_csv(sweep.out_dir / "points.csv", metrics.points(frame))
    results.write_csv(sweep.out_dir / "pairs.csv", metrics.pairs(frame, sweep.targets))


# The engine's optional hooks this study does not have (core/contract.py RunRoom); the stores are the engine's.
configure = skip = close = None
