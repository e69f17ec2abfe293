"""How a study makes each target's store (core.store: `store_for`, once per target; an S3 target's opened and
closed here), and what the object path costs (the `limited_by` rule, per client process through
kit/client_bound; same-device pairs): shared by the object sweep, emulate and checkpoint.

The local gateway (versitygw) starts inside a cgroup holding the target's throttle (or one that only
counts its I/O), so the device reads it does are the emulated device's and are counted per run; an
external endpoint gets its own run prefix (core.s3store). `close_all` stops every gateway and removes
everything the study wrote (external: only its run prefix), then the gateways' cgroups.
"""
from __future__ import annotations

import os

from ..core import cgroups, store as store_mod, targets as targets_mod
from ..core.s3store import ObjectStore
from . import client_bound

CLIENT_LIMIT_PERCENT = 80     # the client used this share of all CPUs or more: it, not the store, limited
MACHINE_BUSY_PERCENT = client_bound.MACHINE_BUSY_PERCENT


def gateway_group(sweep, t, study: str) -> cgroups.Cgroup | None:
    """The local gateway's cgroup: the target's throttle, or one that only counts its I/O; None if unavailable."""
    io = targets_mod.io_limits(t, accounting=True)
    if io is None:
        return None
    try:       # the engine's: removed when the sweep ends at the latest; its profile makes the target's runs emulated
        return sweep.cgroup(f"{study}-{t.name}-gateway", t, io=io, kill_on_remove=True)
    except cgroups.CgroupUnavailable as exc:
        if t.emulated:
            sweep.note(f"target '{t.name}': emulated profile not applied to its S3 gateway: {exc}")
        return None


def open_store(sweep, t, study: str, tag: str, pool: int) -> tuple[ObjectStore, cgroups.Cgroup | None]:
    """The target's store, open (gateway started, bucket or run prefix made), and its gateway's cgroup.
    The caller keeps both and hands them to close_all, also when this raises after the cgroup exists."""
    group = None if t.s3.external else gateway_group(sweep, t, study)
    store = ObjectStore(t, sweep.out_dir / "logs", procs_files=group.procs_files if group else None,
                        pool=pool, tag=tag)
    try:
        store.open()
    except BaseException:
        if group is not None:
            group.remove()
        raise
    store.group = group
    for line in store.removed_stale:
        sweep.log(line)
        sweep.note(line)
    where = f"versitygw at {store.endpoint} over {store.gateway.root}" if store.gateway else \
        f"{store.endpoint} s3://{store.bucket}/{store.prefix}"
    sweep.log(f"{study}: target '{t.name}' is S3: {where}")
    return store, group


def store_for(sweep, t, study: str, tag: str, pool: int, state, root) -> store_mod.Store:
    """The target's store (core.store), made once and kept in `state.stores` (a local gateway's cgroup in
    `state.groups`, for close_all): a DirStore at `root` on a directory target, else the S3 target's store, open."""
    if t.name not in state.stores:
        def open_s3() -> ObjectStore:
            store, group = open_store(sweep, t, study, tag, pool)
            if group is not None:
                state.groups[t.name] = group
            return store
        state.stores[t.name] = store_mod.for_target(t, root, open_s3)
    return state.stores[t.name]


def client_group(run, store: store_mod.Store):
    """The cgroup a run's client goes in: the target's throttle where the client reads the device itself (a
    directory); none where a server does (a local gateway, in its own cgroup holding the throttle: the engine
    records the run emulated while that cgroup is there), or the device is elsewhere (an external store)."""
    if store.client_reads_device:
        return run.throttle()
    return None         # a gateway's cgroup is the sweep's (sweep.cgroup): the engine records the run emulated


def close_all(stores, groups) -> list[str]:
    """Every store closed (an S3 store: its gateway stopped, what the study wrote removed; a DirStore: nothing to
    stop), then the cgroups; the failures."""
    errors = []
    for store in stores:
        try:
            store.close()
        except Exception as exc:   # noqa: BLE001 -- close every store, then say what failed
            errors.append(str(exc))
    for g in groups:
        g.remove()
    return errors


def same_device_pairs(targets) -> list[tuple[str, str]]:
    """(directory target, local-gateway S3 target) on one block device with one profile: the pairs whose
    difference is the object path's cost alone."""
    dirs = [t for t in targets if t.s3 is None and t.device and t.device.major is not None]
    out = []
    for s in targets:
        if s.s3 is None or s.s3.external or not s.device or s.device.major is None:
            continue
        for d in dirs:
            if d.device.majmin == s.device.majmin and d.profile_name == s.profile_name:
                out.append((d.name, s.name))
                break
    return out


def limited_by(row: dict, machine_busy_percent: float | None = None) -> str:
    """The label of `judge_row` alone (emulate and checkpoint read this)."""
    return judge_row(row, machine_busy_percent)[0]


def gateway_words(row: dict) -> str:
    """The gateway's CPU in words: measured for the local gateway, 'not measured (external)' for an external
    endpoint, nothing for a directory (no server)."""
    if row.get("access") == "S3 external":
        return "gateway CPU not measured (external)"
    gw, wall = row.get("gateway_cpu_seconds"), row.get("wall_seconds") or 0
    if gw is None or gw != gw or not wall:
        return "" if row.get("access") in (None, "files") else "gateway CPU not measured"
    return f"gateway {gw:.2f} CPU-s = {gw / wall:.2f} cores"


def judge_row(row: dict, machine_busy_percent: float | None = None) -> tuple[str, str]:
    """(limited_by, its evidence). 'client CPU' when a client process used, or was ready to use, ≥ 85 % of the
    cores it can use (kit/client_bound: `client_processes` in the row), or the client alone used
    CLIENT_LIMIT_PERCENT of all CPUs; 'client + gateway CPU' when the two together did (the client counted as it
    wanted the CPU: used or ready for); 'machine CPU' when every
    CPU was busy (MACHINE_BUSY_PERCENT: the busy load, or other work on the machine): then the figure is the
    CPU's, not the storage's. '' otherwise; the evidence names each process's share and the gateway's either way."""
    ncpu, wall = os.cpu_count() or 1, row.get("wall_seconds") or 0
    if not wall:
        return "", ""
    processes = client_bound.from_row(row)
    bound, words = client_bound.judge(processes)
    client = 100 * row["client_cpu_seconds"] / (wall * ncpu)
    # with the gateway: the client's CPU as it wanted it (used, or ready for: a share it did not get went to
    # the gateway or the kernel), so a client held back by the gateway's CPU on the same machine counts whole
    wanted = sum(p.cores_wanted * p.wall_seconds for p in processes) or row["client_cpu_seconds"]
    both = 100 * (max(wanted, row["client_cpu_seconds"]) + (row.get("gateway_cpu_seconds") or 0)) / (wall * ncpu)
    words = "; ".join(x for x in (words or f"client {client:.0f} % of {ncpu} CPUs", gateway_words(row)) if x)
    if bound:
        return "client CPU", words
    if client >= CLIENT_LIMIT_PERCENT:
        return "client CPU", f"{words}: the client ≥ {CLIENT_LIMIT_PERCENT} % of all {ncpu} CPUs"
    if both >= CLIENT_LIMIT_PERCENT:
        return "client + gateway CPU", f"{words}: together {both:.0f} % of all {ncpu} CPUs"
    if machine_busy_percent is not None and machine_busy_percent >= MACHINE_BUSY_PERCENT:
        return f"machine CPU ({machine_busy_percent:.0f} % busy)", f"{words}; every CPU {machine_busy_percent:.0f} % busy"
    return "", words
