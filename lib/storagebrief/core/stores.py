"""The engine's stores: one core.store.Store per target for a whole study run, opened on first use
(`sweep.store(target)`) and closed when the run ends however it ends (core/sweep.py), so no study keeps a
registry of its own or closes one.

A directory target's store is a DirStore on the study's folder there (`<target>/storagebrief/<study>/`). An S3
target's is a core.s3store.ObjectStore, open: on a local gateway (versitygw) started inside a cgroup the sweep
holds (sweep.cgroup) with the target's throttle, or one that only counts its I/O (targets.throttle_or_count),
so the device reads it does are the emulated device's and are counted per run (Store.io_group); on an external
endpoint, the run's own prefix. Closing stops every gateway and removes everything the study wrote (external:
only its run prefix); the engine removes the gateways' cgroups after.
"""
from __future__ import annotations

from . import store as store_mod, targets as targets_mod

DEFAULT_POOL = 16      # the study process's own connections (its dataset PUTs, lists, deletes); workers open their own


class Stores:
    """The targets' stores of one sweep (Sweep.store, Sweep.close_stores)."""

    def __init__(self, sweep):
        self.sweep = sweep
        self.open: dict[str, store_mod.Store] = {}

    def get(self, t, pool: int = DEFAULT_POOL) -> store_mod.Store:
        """The target's store, opened on first use."""
        if t.name not in self.open:
            root = t.study_dir(self.sweep.study.name)
            self.open[t.name] = store_mod.for_target(t, root, lambda: self._open_s3(t, pool))
        return self.open[t.name]

    def _gateway_group(self, t):
        """The local gateway's cgroup (the sweep's: removed when it ends): the target's throttle, or one that only
        counts its I/O; None if unavailable (said in a note for an emulated target)."""
        name = f"{self.sweep.study.name}-{t.name}-gateway"
        return targets_mod.throttle_or_count(
            t, lambda io: self.sweep.cgroup(name, t, io=io, kill_on_remove=True),
            lambda exc: self.sweep.note(f"target '{t.name}': emulated profile not applied to its S3 gateway: {exc}"))

    def _open_s3(self, t, pool: int):
        from .s3store import ObjectStore
        sweep = self.sweep
        group = None if t.s3.external else self._gateway_group(t)
        store = ObjectStore(t, sweep.out_dir / "logs", procs_files=group.procs_files if group else None,
                            pool=pool, tag=sweep.study.name)
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
        described = store.describe()
        where = (f"versitygw at {store.endpoint} over {store.gateway.root}" if described["gateway"] else
                 f"{store.endpoint} s3://{store.bucket}/{store.prefix}")
        sweep.log(f"{sweep.study.name}: target '{t.name}' is S3: {where}")
        return store

    def close(self) -> list[str]:
        """Every store closed (an S3 store: its gateway stopped, what the study wrote removed; a DirStore: nothing
        to stop); the failures, each one line."""
        errors = []
        for name, store in list(self.open.items()):
            try:
                store.close()
            except Exception as exc:   # noqa: BLE001 -- close every store, then say what failed
                errors.append(f"target '{name}': {exc}")
        self.open.clear()
        return errors
