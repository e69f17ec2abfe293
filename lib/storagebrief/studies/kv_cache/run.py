"""The KV-cache sweep on the shared engine (core.sweep): one measured run = one workload on one target at one
repeat. The clients (clients.py, launched by kit.ranks: forked or under mpirun) join the run's cgroup (the target's throttle);
run.start_clock()/stop_clock() bracket them (monitor, block trace); every run writes below
<target>/storagebrief/kv_cache/<run_id>/ and removes that folder when it ends, whatever happened. A target
that fills up mid-run gives a failed row with the reason, and the study goes on with the next run.

finish(): the prefill rate of this machine (prefill.py, a subprocess), the break-even per target, model and
accelerator (breakeven.py) into breakeven.csv and study.json, and each run as mlpstorage writes a KV-cache run
(mlperf_tree.py) with MLPerf's report generator's verdicts.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from ...core import results
from ...core.sweep import Measurement, Point
from ...kit import client_check, mlpstorage_verdict
from ...kit.launch import check_launch, open_launch
from ...kit.space import check_space, out_of_space
from . import STUDY, breakeven, clients, dataset, metrics, mlperf_tree, prefill
from .params import KvCacheParams
from .workload import GIB, MIB, MLPERF

BREAKEVEN_COLUMNS = ["target", "model", "accelerator", "how", "tflops", "reload_read_gib_per_s", "reload_latency_s",
                     "break_even_tokens", "within_tokens", "need_at_tokens", "read_gib_per_s_needed", "runs",
                     "break_even_low", "break_even_high", "stable", "answer"]


@dataclass(frozen=True)
class Config:
    workload: str
    client_check: str = ""     # client_check.CHECK (confined) or REFERENCE (unconfined, beside it); "": the sweep


@dataclass
class KvState:
    removed: list[str] = field(default_factory=list)


def _capacity(p: KvCacheParams, folder) -> int:
    """The mlperf family's storage capacity per client: as set, or MLPerf's default, 95 % of the free space
    (cache.py:258-266 at 284ce72) shared among the clients."""
    if p.mlperf.storage_capacity_gib:
        return int(p.mlperf.storage_capacity_gib * GIB)
    st = os.statvfs(folder)
    return int(0.95 * st.f_bavail * st.f_frsize / p.clients)


def _spec(p: KvCacheParams, name: str, folder) -> dict:
    w = p.workload(name)
    shape = p.shape(w.model)
    m = p.mlperf
    mlperf = {"max_concurrent_allocs": w.max_concurrent_allocs, "templates": [t.model_dump() for t in m.templates],
              "decode_batch_tokens": m.decode_batch_tokens, "end_conversation_probability":
              m.end_conversation_probability, "max_turns": m.max_turns,
              "storage_capacity_bytes": _capacity(p, folder)} if w.family == MLPERF else {}
    return {"folder": str(folder), "family": w.family, **mlperf, "seed": p.seed, "users": w.users_per_client,
            "concurrency": w.concurrency,
            "cpu_tier_bytes": p.cpu_tier_bytes(name), "bytes_per_token": shape.kv_bytes_per_token,
            "contexts": [(c.tokens, c.weight) for c in p.contexts], "turns": [(t.tokens, t.weight) for t in p.turns],
            "turn_tokens": p.turn_tokens, "decode_reads": p.decode_reads, "prefill_only_tokens": p.prefill_only_tokens,
            "duration_s": p.duration_s, "write_block": p.write_block_mib * MIB,
            "largest_entry_bytes": p.largest_entry_bytes(name)}


def _space_needed(p: KvCacheParams) -> int:
    """Closed-loop: every user's largest cache on storage at once, plus a request in flight per thread, per client.
    mlperf: the writes in flight (its capacity LRU keeps the rest within the free space)."""
    most = 0
    for name in p.run:
        w = p.workload(name)
        n = ((w.max_concurrent_allocs or w.threads) if w.family == MLPERF else w.users_per_client + w.concurrency)
        most = max(most, p.clients * n * p.largest_entry_bytes(name))
    return most


def prepare(sweep) -> None:
    p: KvCacheParams = sweep.p
    sweep.state = state = KvState()
    clients.check_budget(p)         # the machine's limits now (validate too)
    check_launch(p, p.clients, sweep.out_dir, STUDY.name, "kv_cache.clients", sweep.status)
    check_space(sweep.targets, lambda t: _space_needed(p),
                f"every simulated user's largest KV cache at once ({p.longest_context:,} tokens at most)")
    for t in sweep.targets:
        for gone in dataset.remove_leftovers(t):
            state.removed.append(str(gone))
            sweep.note(f"removed {gone}: KV files of a run that did not end (killed)")


def plan(sweep) -> list[Point]:
    p: KvCacheParams = sweep.p
    return [Point(Config(n), r, f"{n}: {p.workload(n).model}, {p.clients} clients × "
                                f"{p.workload(n).users_per_client} users, {p.duration_s:g} s")
            for r in range(1, p.repeats + 1) for n in p.run] + _check_points(sweep, p)


def _check_points(sweep, p: KvCacheParams) -> list[Point]:
    """The client check (kv_cache.client_check): the first workload on the first target once more with the
    clients on half the CPUs, after the sweep; with one repeat, an unconfined re-run right before each confined
    one, so the point has a spread of its own (both left out of every scored figure)."""
    cpus = client_check.check_cpus(sweep.note, p.launcher) if p.client_check else []
    if not cpus:
        return []
    w, t, of = p.run[0], sweep.target_names[0], len(os.sched_getaffinity(0))
    kinds = ([client_check.REFERENCE] if p.repeats < 2 else []) + [client_check.CHECK]
    return [Point(Config(w, kind), r, f"{w}: client check, the clients on "
                                      + (f"{len(cpus)} of {of} CPUs" if kind == client_check.CHECK else "all CPUs"),
                  targets=(t,))
            for r in range(1, p.client_check_repeats + 1) for kind in kinds]


def run_id(config: Config, target, repeat: int) -> str:
    check = {client_check.CHECK: "-halfcpus", client_check.REFERENCE: "-allcpus"}.get(config.client_check, "")
    return f"{STUDY.name}-{config.workload}{check}-{target.name}-r{repeat}"


def _columns(p: KvCacheParams, name: str) -> dict:
    w = p.workload(name)
    return {"workload": name, "family": w.family, "model": w.model, "kv_bytes_per_token": p.shape(w.model).kv_bytes_per_token,
            "launcher": p.launcher, "clients": p.clients, "users_per_client": w.users_per_client,
            "concurrency": w.threads, "max_concurrent_allocs": w.max_concurrent_allocs if w.family == MLPERF else None,
            "cpu_tier_bytes": p.cpu_tier_bytes(name), "duration_s": p.duration_s}


def run_one(run, config: Config) -> Measurement:
    p: KvCacheParams = run.p
    folder = dataset.fresh(run.target, run.run_id)
    conf = None
    try:
        run.cold_cache([folder])
        group = run.throttle()
        spec = _spec(p, config.workload, folder)
        procs_files = group.procs_files if group else []
        if config.client_check == client_check.CHECK:
            conf = client_check.confine_run(run, group)
            procs_files = procs_files + conf.procs_files
        with open_launch(clients.WORKER, range(p.clients), spec, params=p, section=STUDY.name,
                               work_dir=dataset.mpi_dir(run.target), procs_files=procs_files,
                               affinity=conf.affinity if conf else None) as launch:
            # a nominal duration, then the requests in flight finish: allow generously for a slow target
            release, done = launch.operate(on_start=run.start_clock, timeout_s=spec["duration_s"] * 20 + 600)
        result = clients.result(launch, release, done)
        if launch.launcher == "mpi":
            for h in result["hosts"]:
                run.sweep.add_host(h, "kv_cache: MPI clients", launch.host_facts.get(h))
        run.stop_clock()
    except (OSError, RuntimeError) as exc:
        why = out_of_space(exc)
        if why is None:
            raise
        run.stop_clock()
        dataset.remove(folder)
        run.sweep.note(f"target '{run.target.name}' filled up during {run.run_id}: {why}")
        return Measurement({**_columns(p, config.workload), **client_check.row_columns(config.client_check, conf)},
                           ok=False,
                           failure_reason=f"target full mid-run: {why}; target '{run.target.name}' "
                                          f"({run.target.path}); this run's KV files were removed")
    finally:
        dataset.remove(folder)
        if conf:
            conf.remove()
    keys = {"run_id": run.run_id, "target": run.target.name, "workload": config.workload, "repeat": run.repeat,
            **({"client_check": config.client_check} if config.client_check else {})}
    row = {**_columns(p, config.workload), **metrics.run_row(spec, result),
           **client_check.row_columns(config.client_check, conf)}
    return Measurement(row, tables={"latency.csv": [{**keys, **r} for r in metrics.latency_rows(result)]})


def _prefill(sweep, p: KvCacheParams) -> tuple[float | None, dict]:
    """This machine's effective prefill TFLOP/s (None when not measured or failed: said in the notes)."""
    import pandas as pd

    if not p.prefill.measure:
        results.write_csv(sweep.out_dir / "prefill.csv", pd.DataFrame())
        sweep.note("prefill not measured on this machine (kv_cache.prefill.measure = false): no 'this-cpu' answer")
        return None, {}
    sweep.status("measuring this machine's prefill rate (Keras, a small llama-shaped decoder)")
    pp = p.prefill.model_dump()
    try:
        measured = prefill.run_subprocess(pp, sweep.out_dir / "prefill-work", p.prefill.timeout_s)
    except (RuntimeError, OSError, ValueError) as exc:
        sweep.note(f"prefill measurement failed, no 'this-cpu' answer: {exc}")
        results.write_csv(sweep.out_dir / "prefill.csv", pd.DataFrame())
        return None, {}
    finally:
        shutil.rmtree(sweep.out_dir / "prefill-work", ignore_errors=True)
    rows, summary = prefill.analyse(pp, measured)
    cpu = prefill.analyse(pp, measured, clock="cpu_seconds")[1]
    summary["cpu_clock"] = {"tflops": cpu["tflops"], "agreement": cpu["agreement"]}
    results.write_csv(sweep.out_dir / "prefill.csv", pd.DataFrame(rows))
    return summary["tflops"], summary


def breakeven_rows(frame, names: list[str], p: KvCacheParams, cpu_tflops: float | None) -> list[dict]:
    """Per target, model and accelerator: the break-even L and the read rate needed at need_at_tokens, from
    the target's median reload rate and latency over its ok runs of that model."""
    ok = metrics.runs.ok_runs(client_check.unchecked(frame)) if len(frame) else frame
    cat = breakeven.with_measured_cpu(cpu_tflops)
    b = p.breakeven
    out = []
    for t in names:
        for m in p.models:
            g = ok[(ok.target == t) & (ok.model == m)] if len(ok) else ok
            g = g[g.reload_read_gib_per_s.notna()] if len(g) else g
            if not len(g):
                continue
            rate, lat = float(g.reload_read_gib_per_s.median()) * GIB, float(g.reload_latency_ms.median()) / 1e3
            per_run = list(zip(g.reload_read_gib_per_s * GIB, g.reload_latency_ms / 1e3))
            for a in b.accelerators:
                acc = cat[a]
                tf = acc.tflops(m)
                if not tf:
                    continue
                ans = breakeven.answer(p.shape(m), tf, rate, lat, b.answer_within_tokens, b.need_at_tokens)
                spread = breakeven.spread([breakeven.answer(p.shape(m), tf, r, la, b.answer_within_tokens,
                                                            b.need_at_tokens)["break_even_tokens"] for r, la in per_run],
                                          b.answer_within_tokens)
                out.append({"target": t, "model": m, "accelerator": a, "how": acc.how, "tflops": tf,
                            "reload_read_gib_per_s": rate / GIB, "reload_latency_s": lat,
                            **{k: ans[k] for k in ("break_even_tokens", "within_tokens", "need_at_tokens",
                                                   "read_gib_per_s_needed")}, **spread,
                            "answer": breakeven.sentence(ans, spread)})
    return out


def finish(sweep, frame) -> None:
    import pandas as pd

    p: KvCacheParams = sweep.p
    if not sweep.tables.get("latency.csv"):
        results.write_csv(sweep.out_dir / "latency.csv", pd.DataFrame(columns=metrics.LATENCY_TABLE_COLUMNS))
    mlperf_tree.export(sweep.out_dir, frame, p.seed)
    mlpstorage_verdict.record(sweep.out_dir)
    cpu_tflops, prefill_summary = _prefill(sweep, p)
    rows = breakeven_rows(frame, sweep.target_names, p, cpu_tflops)
    results.write_csv(sweep.out_dir / "breakeven.csv", pd.DataFrame(rows, columns=BREAKEVEN_COLUMNS))
    shapes = {m: p.shape(m) for m in p.models}
    results.write_json(sweep.out_dir / "study.json", {
        "run": p.run, "workloads": {n: p.workload(n).model_dump() for n in p.run}, "clients": p.clients,
        "launcher": p.launcher, "contexts": [c.model_dump() for c in p.contexts],
        "turns": [t.model_dump() for t in p.turns], "turn_tokens": p.turn_tokens, "decode_reads": p.decode_reads,
        "prefill_only_tokens": p.prefill_only_tokens, "duration_s": p.duration_s, "mlperf": p.mlperf.model_dump(),
        "seed": p.seed, "repeats": p.repeats, "write_block_mib": p.write_block_mib,
        "longest_context": p.longest_context, "cores": os.cpu_count(),
        "models": {m: {**s.__dict__, "kv_bytes_per_token": s.kv_bytes_per_token, "formula": s.formula,
                       "dense_parameters": s.dense_parameters} for m, s in shapes.items()},
        "prefill": prefill_summary, "breakeven": p.breakeven.model_dump(),
        "catalogue": {k: {"source": a.source, "how": a.how, "tflops_by_model": a.tflops_by_model}
                      for k, a in breakeven.with_measured_cpu(cpu_tflops).items()},
        "h200_reproduction": breakeven.h200_reproduction(), "h200_tolerance": breakeven.H200_TOLERANCE,
        "removed_leftovers": sweep.state.removed if isinstance(sweep.state, KvState) else [],
        "client_check": p.client_check, "client_checks": metrics.client_checks(frame)})


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = skip = close = None
