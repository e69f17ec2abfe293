"""The one sweep engine every study runs on.

    plan (configurations x repeats, targets interleaved inside each point)
      -> for each run: cold cache, throttle / cgroups, monitor, the study's run_one,
         one atomic row in runs.csv, cleanup (even on an exception or a signal)
      -> notes.json, metrics.json, the study's finish()

A study's `run` room supplies the hooks (module-level functions; typed once in core/contract.py, where
an optional hook the study has not is declared None):
  prepare(sweep)            datasets and prechecks, before any measured work; may narrow
                            sweep.targets and keep anything it needs in sweep.state
  plan(sweep) -> [Point]    configurations and repeats in run order, or an adaptive plan whose next
                            run depends on earlier rows (core/plans.py: e.g. emulate's search)
  run_id(config, target, repeat) -> str
  configure(sweep, config, target) -> config   optional: settle a configuration that depends on
                            earlier runs (e.g. "the best process count") just before it runs
  run_one(run, config) -> Measurement      measure one configuration on run.target
  skip(sweep, point, target) -> bool       optional: leave a run of a fixed plan out (e.g. below threshold)
  finish(sweep, frame)      optional: study-wide outputs after the last run
  close(sweep)              optional: always runs last, also after an exception or a signal: stop
                            what prepare or run_one left running for later runs (servers, clusters)
The engine owns what every study shares: the run table, common columns, the
monitor and its time series, block traces (run.trace) and characterization.csv, cgroups
created through the Run (run.cgroup, run.throttle, run.confine_cpus) or the sweep (sweep.cgroup: a
server's, for several runs), `emulated` (set whenever it applied a profile), disturbed runs re-run
(core/reruns.py: `run.rerun_disturbed` times at most; `rerun_of`), a section's `targets`
(config.OnSomeTargets), the run order (sweep.runs_after), long-lived jobs (sweep.jobs, their limits per
run: core/longjob.py, core/run_limits.py), progress, notes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import (cgroups, characterize, columns, config, contract, folders, inventory, leftovers, longjob, machine_fit,
               outdir, plans, results, reruns, stores, targets as targets_mod)
from .config import check_name
from .contract import Measurement, Point
from .engine_outputs import CHARACTERIZATION, TRACES
from .lock import TargetLocks
from .measured_run import Run, limits_set
from .progress import Progress


class Sweep:
    """State of one study run, handed to every hook."""

    def __init__(self, study, params, out_dir: Path, log=print):
        self.study, self.params, self.out_dir, self.log = study, params, Path(out_dir), log
        self.p = params.section(study.name)
        self.targets: list[targets_mod.Target] = targets_mod.resolve_all(params, create=True)
        self.state: Any = {}            # the study's own state (a dataclass its prepare() sets)
        self.notes: list[str] = []
        self.table: results.RunTable | None = None
        self.tables: dict[str, list[dict]] = {}
        self.trace_off: str | None = None     # why block tracing is unavailable, once known
        self.progress: Progress | None = None
        self.hosts: dict[str, dict] = {}      # client hosts of multi-host runs: name -> role, facts
        self.jobs = longjob.Jobs()            # processes that outlive a run: ended by the engine (core/longjob.py)
        self._throttles: dict[str, list[cgroups.Cgroup]] = {}   # target -> held cgroups holding its profile
        self._plan = None                     # what the engine runs (set_plan)
        self.left_out = 0                     # runs of the plan its skip hook left out (said with the count run)
        self._stores = stores.Stores(self)    # one store per target for the whole run (core/stores.py)
        self._only_the_section_targets()
        self._leave_out_object_targets()
        check = getattr(self.p, "check_s3_targets", None)     # what the section refuses on S3 targets (validate too)
        if check is not None:
            check([t.name for t in self.targets if t.s3 is not None])
        for t in self.targets:
            t.study_dir(study.name)          # a symlinked study folder is refused before any work (core.outdir)

    def _only_the_section_targets(self) -> None:
        """A section with `targets` (config.OnSomeTargets) runs on those only; an unknown name is a ParamsError."""
        if isinstance(self.p, config.OnSomeTargets) and self.p.targets:
            for name in self.p.targets:
                self.params.target(name)      # unknown -> ParamsError naming the allowed ones
            self.targets = [t for t in self.targets if t.name in self.p.targets]

    def cgroup(self, name: str, target=None, io=None, kill_on_remove: bool = False) -> cgroups.Cgroup:
        """A cgroup for processes that serve several runs (an S3 gateway, brokers): removed when the sweep ends, or
        earlier by the study (group.remove()). With io limits of `target`'s profile, every run on that target is
        recorded `emulated` while it lives. Raises CgroupUnavailable with the reason."""
        group = cgroups.Cgroup(name, io=io).create()
        group.kill_on_remove = kill_on_remove
        return self.hold(group, target if limits_set(io) else None)

    def hold(self, group: cgroups.Cgroup, target=None) -> cgroups.Cgroup:
        """Own a cgroup that outlives a run (sweep.cgroup, run.lasting_throttle); `target`: it holds that target's
        emulated profile."""
        self.jobs.hold(group)
        if target is not None:
            self._throttles.setdefault(target.name, []).append(group)
        return group

    def store(self, target, pool: int = stores.DEFAULT_POOL):
        """The target's store (core.store.Store), opened on first use and closed when the run ends."""
        return self._stores.get(target, pool)

    def close_stores(self) -> None:
        """Every store closed (the engine's, after the study's close hook); a failure is a note."""
        errors = self._stores.close()
        if errors:
            self.note(f"{self.study.name}: closing a target's store failed: " + "; ".join(errors))

    def throttled(self, target_name: str) -> bool:
        """A cgroup the sweep holds throttles this target's processes (its runs are emulated)."""
        return any(g.dirs for g in self._throttles.get(target_name, []))

    def _leave_out_object_targets(self) -> None:
        """A study that measures directories only runs without S3 targets (noted); with nothing else, refuses."""
        if self.study.object_targets or all(t.s3 is None for t in self.targets):
            return
        left = [t.name for t in self.targets if t.s3 is not None]
        self.targets = [t for t in self.targets if t.s3 is None]
        if not self.targets:
            raise targets_mod.TargetError(f"every target ({', '.join(left)}) is an S3 target; {self.study.name} "
                                          "measures directories only (S3 targets: the object sweep)")
        for name in left:
            self.note(f"target '{name}' is an S3 target; {self.study.name} measures directories only, so it ran "
                      "without it")

    # -- the plan, as far as it is known -------------------------------------------------------
    def set_plan(self, planned):
        """The plan hook's answer as the plan the engine walks (core/plans.py); a test sets one as the engine does."""
        self._plan = plans.as_plan(planned, self.target_names, self.params.run.rerun_disturbed)
        return self._plan

    def planned(self) -> list[plans.PlannedRun]:
        """A fixed plan's runs in the engine's order, each with its run id; [] before the plan, or for an adaptive
        plan (its next run depends on rows not measured yet)."""
        if not isinstance(self._plan, plans.FixedPlan):
            return []
        by_name, run_id = {t.name: t for t in self.targets}, self.study.room("run").run_id
        return [plans.PlannedRun(pt.config, by_name[n], pt.repeat,
                                 reruns.run_id(run_id(pt.config, by_name[n], pt.repeat), pt.rerun))
                for pt, n in self._plan.todo]

    def runs_after(self, run_id: str) -> list[plans.PlannedRun]:
        """The runs the engine starts after `run_id`, in order (a skip hook may still leave one out)."""
        runs = self.planned()
        ids = [r.run_id for r in runs]
        return runs[ids.index(run_id) + 1:] if run_id in ids else []

    def ahead(self, planned: plans.PlannedRun) -> Run:
        """A Run for work started ahead of a later run (its jobs, their cgroups and limits); the caller closes it."""
        return Run(self, planned.target, planned.repeat, planned.run_id)

    def add_host(self, name: str, role: str, facts: dict | None = None) -> None:
        """A host that took part (e.g. MPI ranks on another client): inventory.json lists it with its
        role(s) and its own facts (inventory.host_facts, gathered there)."""
        h = self.hosts.setdefault(name, {"name": name, "roles": []})
        if role not in h["roles"]:
            h["roles"].append(role)
        if facts:
            h.update({k: v for k, v in facts.items() if k not in ("name", "roles")})

    def status(self, text: str) -> None:
        """What the study is doing now (dataset generation, start-up): shown on the progress bar,
        or as one line where there is no bar."""
        if self.progress is not None and self.progress.mode == "bar":
            self.progress.message(text)
        else:
            self.log(text)

    @property
    def target_names(self) -> list[str]:
        return [t.name for t in self.targets]

    def note(self, text: str) -> None:
        """A warning for notes.json and the brief, said once however often it happens."""
        if text not in self.notes:
            self.notes.append(text)

    def frame(self):
        """The rows so far, less the disturbed runs a later row re-ran (core/reruns.kept)."""
        return reruns.kept(self.table.frame())

    def all_notes(self) -> list[str]:
        return list(dict.fromkeys([w for t in self.targets for w in t.warnings] + self.notes))


def _common(run: Run) -> dict:
    t = run.target
    return {"study": run.sweep.study.name, "run_id": run.run_id, "target": t.name,
            "profile": t.profile_name or "", "repeat": run.repeat, "started_at": run.started_at,
            "cache_method": run.cache_method, "emulated": run.emulated, reruns.RERUN_OF: run.rerun_of}


def outcome_columns(m: Measurement) -> dict:
    """status and failure_reason: the engine writes them for every study (columns.ENGINE_COLUMNS)."""
    if m.ok and m.failure_reason:
        raise ValueError(f"a run measured ok cannot have a failure_reason ({m.failure_reason!r})")
    return {"status": "ok" if m.ok else "failed", "failure_reason": m.failure_reason}


CHARACTERIZATION_KEYS = ("study", "run_id", "target", "source", "trace_file")


def _characterization(sweep: Sweep, run: Run) -> dict | None:
    """The run's row of characterization.csv: its block trace characterized, or (no trace) what
    diskstats gives; None when there is neither."""
    t = run.target
    keys = {"study": sweep.study.name, "run_id": run.run_id, "target": t.name}
    if run.trace is not None and run.trace.path.exists():
        # the capacity comes from the trace's own header (capacity_source=header)
        row, _, _ = characterize.characterize(run.trace.path, "tracefs-raw", sample_points=0,
                                              require_requests=False)
        row["lost_events"] = max(row.get("lost_events", 0), run.trace.lost_events)
        if row["lost_events"]:
            sweep.note(f"run {run.run_id}: {row['lost_events']:,} block events lost (tracefs buffer "
                       f"{sweep.params.run.trace_buffer_kib} KiB per CPU); raise run.trace_buffer_kib")
        rel = run.trace.path.relative_to(sweep.out_dir)
        return {**keys, "source": "tracefs", "trace_file": str(rel), **row}
    if not run.monitored or not run.monitor.device:
        return None
    span = run.monitor.snapshots[-1].t - run.monitor.snapshots[0].t
    return {**keys, "source": "diskstats", "trace_file": "",
            **characterize.from_diskstats(run.monitor.summary(), span)}


def _write_characterization(sweep: Sweep) -> None:
    import pandas as pd

    cols = [*CHARACTERIZATION_KEYS, *characterize.CSV_COLUMNS]
    rows = sweep.tables.get(CHARACTERIZATION, [])
    results.write_csv(sweep.out_dir / CHARACTERIZATION,
                      pd.DataFrame([{k: r.get(k) for k in cols} for r in rows], columns=cols))


def _record(sweep: Sweep, run: Run, m: Measurement) -> dict:
    """Append the run's row (atomically) and write what goes beside it; returns the row."""
    import pandas as pd

    row = {**_common(run), **outcome_columns(m), **m.row}
    ch = _characterization(sweep, run)
    if ch is not None:
        sweep.tables.setdefault(CHARACTERIZATION, []).append(ch)
        _write_characterization(sweep)
    if m.ok and run.monitored:
        summary = run.monitor.summary()
        row.update({**summary, **run.disturbance(summary)})
        results.write_csv(sweep.out_dir / "timeseries" / f"{run.run_id}.csv", pd.DataFrame(run.monitor.timeseries()))
    for suffix, rows in m.series.items():
        if len(rows):
            results.write_csv(sweep.out_dir / "timeseries" / f"{run.run_id}{suffix}.csv", pd.DataFrame(rows))
    sweep.table.append(row)
    for name, rows in m.tables.items():
        sweep.tables.setdefault(name, []).extend(rows)
        results.write_csv(sweep.out_dir / name, pd.DataFrame(sweep.tables[name]))
    return row


def check_out_dir(out_dir: str | Path) -> Path:
    """Refuse an output folder that is a file or a system directory, before any work."""
    path = targets_mod.check_target_path(str(out_dir))
    if path.exists() and not path.is_dir():
        raise targets_mod.TargetError(f"output folder '{out_dir}' is a file, not a directory")
    return path


def _default_out_dir(study, params) -> Path:
    root = Path(params.root) if getattr(params, "root", "") else Path.cwd()
    return outdir.new_run_folder(root / "reports", study.name)


def run(study, params, out_dir: str | Path | None, log=print, progress: str = "auto"):
    """Run `study` on every target; runs.csv and friends go to out_dir. Returns the runs.

    out_dir None: a fresh reports/runs/<time>/<study>/ beside the params file. Before any work:
    the output folder is checked (ours or empty: core.outdir) and the targets; leftovers of killed
    runs (storagebrief cgroups of dead processes) are removed and noted, and every target is
    locked for the whole run (a second run on it waits or refuses: run.on_busy_target). Earlier
    results in out_dir are replaced only when the study completes."""
    bar = Progress(None, study.name, mode=progress)      # from the first second: imports, datasets
    say = bar.note if bar.mode == "bar" else log        # lines that stay: where the results are
    folder, final, give_back = None, None, False
    try:
        bar.message("starting: checking the output folder and targets")
        machine_fit.check_machine(params, [study.name])     # its processes and memory fit, before anything is made
        machine_fit.check_tools(params, [study.name])       # the gateway, Kafka's jars: before anything is made
        final = check_out_dir(out_dir if out_dir is not None else _default_out_dir(study, params))
        folders.refuse_out_in_target_data(final, [(t.name, t.path) for t in params.targets])   # a rebuild deletes it
        folder = outdir.OutputFolder(final, study.name, study.stage_outputs, params.run.on_busy_target,
                                     say).check()      # locks it (one writer), writes nothing in it yet
        hooks: contract.RunRoom = contract.checked(study.room("run"), contract.RunRoom, f"{study.package}.run")
        cgroups.install_handlers()
        sweep = Sweep(study, params, folder.work, log if bar.mode != "bar" else bar.message)
        sweep.progress = bar
        for line in leftovers.remove_leftovers():
            sweep.log(line)
            sweep.note(line)
        with TargetLocks(sweep.targets, params.run.on_busy_target, sweep.log) as locks:
            folder.create()
            where = f"results go to {final}" + (f" (written in {folder.work} until the study completes)"
                                                 if folder.work != final else "")
            say(where)
            try:
                bar.message("preparing datasets and start-up")
                hooks.prepare(sweep)                 # raises before any measured work on bad input
                locks.keep_only(sweep.targets)
                frame = _sweep(sweep, hooks, bar, folder)
            finally:
                try:
                    if hooks.close is not None:
                        hooks.close(sweep)
                finally:
                    try:
                        sweep.close_stores()     # gateways stopped, what the study wrote on S3 removed
                    finally:
                        sweep.jobs.end_all()     # however the sweep ended: no long-lived job outlives it
        folder.complete()
        frame.attrs["out_dir"] = str(final)
        if folder.kept is not None:
            say(
                f"the earlier results are kept in {folder.kept}: they held '{folder.kept_because}', which no run "
                "listed, so storagebrief did not delete them")
        left = getattr(sweep, "left_out", 0)
        # the bar's first total counted them (issue 62: "18 runs" planned, then "15 runs complete")
        say(f"{len(frame)} runs complete" + (f" ({left} of the {len(frame) + left} planned left out by the study's "
                                             "plan, as its docs say)" if left else "") + f": {final}")
        return frame
    except BaseException as exc:
        if folder is None or not folder.status.get("runs_done"):
            started = folder is not None and bool(folder.status)
            if folder is not None:
                folder.abandon()      # refused or stopped before its first row: nothing it wrote is left
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):     # the one-line message says so
                exc.add_note(_nothing_kept(folder if started else None))
            give_back = final is not None and out_dir is None    # no empty reports/runs/<time>/ left behind
        elif folder is not None:
            folder.stopped(_why_stopped(exc))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):   # the one-line messages say where
                exc.add_note(f"the partial run is in {folder.work} (status.json: complete false)"
                             + (f"; {folder.final} keeps the earlier results" if folder.work != folder.final else ""))
        raise
    finally:
        if folder is not None:
            folder.release()
        if give_back:
            outdir.unclaim(final)
        bar.close()


def _nothing_kept(folder: outdir.OutputFolder | None) -> str:
    left = folder.left_behind if folder is not None else []
    more = f" and {len(left) - 1} more" if len(left) > 1 else ""
    return ("no run had finished, so nothing was kept" + (": the output folder holds only what storagebrief did not "
                                                           f"write ({left[0]}{more}, in {folder.work})" if left else ""))


def _why_stopped(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(exc, SystemExit):
        return f"signal (exit {exc.code})"
    return f"{type(exc).__name__}: {exc}"


def _sweep(sweep: Sweep, hooks: contract.RunRoom, bar: Progress, folder: outdir.OutputFolder):
    study, log = sweep.study, sweep.log
    sweep.out_dir.mkdir(parents=True, exist_ok=True)
    (sweep.out_dir / "timeseries").mkdir(exist_ok=True)
    (sweep.out_dir / TRACES).mkdir(exist_ok=True)   # a fresh folder: only this run's traces
    _write_characterization(sweep)           # header only until the first run: the stage's out exists
    results.write_json(sweep.out_dir / "inventory.json", inventory.collect(sweep.params, sweep.targets))
    sweep.table = results.RunTable(sweep.out_dir / "runs.csv")
    results.write_json(sweep.out_dir / columns.SCHEMA_FILE,
                       columns.schema(study.name, study.room("metrics").COLUMNS))
    plan = sweep.set_plan(hooks.plan(sweep))
    by_name = {t.name: t for t in sweep.targets}
    bar.start(plan.runs_left(), plan.kind)
    folder.progress(0, plan.runs_left())
    while (item := plan.next()) is not None:
        pt, target = item[0], by_name[item[1]]
        if hooks.skip is not None and plan.kind == "plan" and hooks.skip(sweep, pt, target):
            bar.skip()
            sweep.left_out += 1
            continue
        cfg = hooks.configure(sweep, pt.config, target) if hooks.configure is not None else pt.config
        base = hooks.run_id(cfg, target, pt.repeat)
        run_id = check_name(reruns.run_id(base, pt.rerun), "run id", 200)   # timeseries/<run_id>.csv
        label = pt.label + (f" (re-run {pt.rerun}: the run before it was disturbed)" if pt.rerun else "")
        bar.begin(target.name, label, pt.repeat)
        if bar.mode != "bar":
            log(f"[{run_id}] {label}")
        one = Run(sweep, target, pt.repeat, run_id)
        one.rerun_of = reruns.rerun_of(base, pt.rerun)
        try:
            m = hooks.run_one(one, cfg)
        except BaseException:
            one.discard_trace()
            cgroups.raise_pending_signal()   # a SIGTERM/SIGHUP explains whatever failed after it
            raise
        finally:
            one.close()
        cgroups.raise_pending_signal()
        plan.done(pt, target.name, _record(sweep, one, m))
        bar.end("ok" if m.ok else "failed", runs_left=plan.runs_left())
        folder.progress(len(sweep.table.rows), bar.total)   # a search's total: done + at most what is left
    frame = sweep.frame()
    try:
        if hooks.finish is not None:
            hooks.finish(sweep, frame)
    finally:
        results.write_json(sweep.out_dir / "notes.json", {"warnings": sweep.all_notes()})
        results.write_json(sweep.out_dir / "metrics.json", study.metrics(frame, sweep.target_names))
        if sweep.hosts:
            _add_hosts_to_inventory(sweep)
    return frame


def _add_hosts_to_inventory(sweep: Sweep) -> None:
    """inventory.json gains `hosts`: this (launching) host and every client host that took part."""
    path = sweep.out_dir / "inventory.json"
    inv = json.loads(path.read_text()) if path.exists() else {}
    here = inventory.host_facts()
    launcher = {"name": here["hostname"], "roles": ["launcher"], **here}
    hosts = {launcher["name"]: launcher}
    for name, h in sweep.hosts.items():
        hosts[name] = {**h, "roles": sorted(set(h["roles"]) | set(hosts.get(name, {}).get("roles", [])))}
    results.write_json(path, {**inv, "hosts": list(hosts.values())})
