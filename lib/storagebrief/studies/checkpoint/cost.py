"""The "cost" sweep: what a checkpoint costs training, sync vs async (kit.checkpoint_cost).

One measured run = one mode (none | sync | async) at one interval on one target: kit.checkpoint_cost's
run_training, `cost.steps` steps of `cost.compute_s` emulated compute (the documented sleep), a
checkpoint of cost.model's size at checkpoint.scale every `interval_steps` steps, written and fsync'ed
under <target>/storagebrief/checkpoint/cost/. It runs in one forked worker of kit.ranks, in the run's
cgroup (the target's throttle), as the rank pool's ranks do; the CostResult comes back from it. The baseline (mode none) runs first on every target, and
each sync / async row's overhead is against the same target's baseline at the same repeat.
"""
from __future__ import annotations

from pathlib import Path

from ...core.folders import folder_below, ours
from ...core.sweep import Point
from ...kit.ranks import Forked, Worker
from ...kit.checkpoint_cost import CostResult, overhead_percent, run_training
from . import dataset

CHILD_TIMEOUT_S = 3600.0
TABLE = "cost_checkpoints.csv"      # one row per checkpoint of every cost run
TABLE_COLUMNS = ("run_id", "target", "repeat", "save_mode", "interval_steps", "step", "bytes", "stall_s", "persist_s",
                 "snapshot_s", "wait_s")


def points(p, repeats: int, config) -> list[Point]:
    """After the protocol: per repeat, the baseline, then sync / async × intervals."""
    c = p.cost
    if not c.on:
        return []
    kinds = [("none", 0)] if ("none" in c.modes or c.checkpointing_modes) else []
    kinds += [(m, k) for m in c.checkpointing_modes for k in c.intervals_steps]
    return [Point(config("cost", c.model, m, k), r,
                  f"cost {m}" + (f" every {k} of {c.steps} steps" if k else f": {c.steps} steps, no checkpoint"))
            for r in range(1, repeats + 1) for m, k in kinds]


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(p) -> None:
    """Refuse before any work when the loop's state (+ the async snapshot) does not fit in memory."""
    c = p.cost
    if not (c.on and c.checkpointing_modes):
        return
    need = p.cost_bytes * (2 if "async" in c.modes else 1)
    have = _mem_available()
    if have is not None and need > 0.8 * have:
        raise ValueError(f"checkpoint.cost: the training loop holds {need / 2**30:.1f} GiB in memory (the "
                         f"state{' and the async snapshot' if 'async' in c.modes else ''} of {c.model} at "
                         f"checkpoint.scale = {p.scale:g}) and this host has {have / 2**30:.1f} GiB available: "
                         "raise checkpoint.scale or turn the cost sweep off (checkpoint.cost.modes: [])")


def folder(target) -> Path:
    return folder_below(target.study_dir("checkpoint"), "cost", create=False)


def _train(state: dict, rank: int, msg, line) -> CostResult:
    return run_training(Path(state["where"]), **state["kwargs"])


# SIGTERM raises SystemExit in the child, so run_training's own cleanup runs
WORKER = Worker("checkpoint cost run", lambda rank, n, cfg: cfg, _train, exit_on_term=True)


def train(run, where: Path, **kwargs) -> CostResult:
    """run_training in one launched worker inside the run's throttle cgroup; the clock runs around it."""
    group = run.throttle()
    with Forked(WORKER, [0], {"where": str(where), "kwargs": kwargs},
                procs_files=group.procs_files if group else None) as launch:
        try:
            _, done = launch.operate(on_start=run.start_clock, timeout_s=CHILD_TIMEOUT_S)
        finally:
            run.stop_clock()
    return done[0].result


def measure(run, p, config, baselines: dict) -> tuple[dict, list[dict]]:
    """One cost run: its row and its per-checkpoint records (cost_checkpoints.csv)."""
    c = p.cost
    where = folder(run.target)
    dataset.remove(where, run.target, "checkpoint")     # what a killed run left (the outdir delete guard checks it)
    ours(where)                 # made, each step below storagebrief/ proven ours (core.folders)
    run.cold_cache([where])     # os.sync first: earlier runs' dirty pages are not written back during this one
    res = train(run, where, mode=config.mode, steps=c.steps, interval_steps=config.interval_steps or c.steps,
                compute_s=c.compute_s, checkpoint_bytes=p.cost_bytes, files=c.files, staging=c.staging)
    key = (run.target.name, run.repeat)
    if config.mode == "none":
        baselines[key] = res
    base = baselines.get(key)
    if base is None:
        raise RuntimeError(f"no baseline (mode none) for target '{run.target.name}' repeat {run.repeat}")
    return row(p, config, res, base), [record(r, res) for r in res.records]


def row(p, config, res: CostResult, base: CostResult) -> dict:
    on = res.mode != "none"
    return {"sweep": "cost", "model": config.model, "save_mode": res.mode, "scale": p.scale,
            "checkpoint_bytes": p.cost_bytes, "files": p.cost.files,
            "interval_steps": config.interval_steps if on else None, "steps": res.steps,
            "compute_s": res.compute_s, "checkpoints": res.checkpoints, "training_time_s": res.training_time_s,
            "baseline_training_time_s": base.training_time_s, "overhead_percent": overhead_percent(res, base),
            "stall_s_total": res.stall_s_total,
            "stall_s_per_checkpoint": res.stall_s_per_checkpoint if on else None,
            "persist_s_mean": res.persist_s_mean if on else None,
            "write_gib_per_s": res.write_gib_per_s if on else None,
            "snapshot_s_mean": res.snapshot_s_mean if res.mode == "async" else None,
            "overlap_wait_s_total": res.overlap_wait_s_total, "final_wait_s": res.final_wait_s,
            "staging": res.staging if res.mode == "async" else ""}


def record(r, res: CostResult) -> dict:
    return {"save_mode": res.mode, "interval_steps": res.interval_steps, "step": r.step, "bytes": r.bytes,
            "stall_s": r.stall_s, "persist_s": r.persist_s, "snapshot_s": r.snapshot_s, "wait_s": r.wait_s}
