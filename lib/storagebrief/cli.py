"""`storagebrief <study> [-S key=value ...] [--out DIR]`: the same functions the notebooks call.

One subcommand per registered study (storagebrief.studies), plus doctor, validate, brief,
notebooks, lab (JupyterLab), dvc-stages, docs and characterize (block-trace summary statistics of any tracefs or blkparse text trace).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from . import studies
from .core import config, machine_fit
from .core.characterize.model import FORMATS
from .core.progress import MODES
from .errors import error_line, expected  # noqa: F401  (cli.error_line: the old name stays)


PARAMS_HELP = ("params file (default: params.yaml of the project around the current directory; relative paths "
               "in it resolve against its folder)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="storagebrief", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debug", action="store_true", default=bool(os.environ.get("STORAGEBRIEF_DEBUG")),
                    help="show the traceback of an unexpected error (also STORAGEBRIEF_DEBUG=1)")
    sub = ap.add_subparsers(dest="command", required=True)
    dp = sub.add_parser("doctor", help="what this machine allows and what each missing piece disables")
    dp.add_argument("--clean", action="store_true",
                    help="remove storagebrief cgroups (and processes in them), tracefs instances, Open MPI "
                         "vader_segment files in /dev/shm and the targets' staging folders left by runs that were "
                         "killed")
    dp.add_argument("--params", default=None,
                    help="params file whose targets --clean looks at for staging folders (default: params.yaml of "
                         "the project around the current directory, when there is one)")
    for command, study in studies.by_command().items():
        sp = sub.add_parser(command, help=f"run the {study.name} study: {study.title}")
        sp.add_argument("--params", default=None, help=PARAMS_HELP)
        sp.add_argument("-S", "--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help=f"override a parameter, e.g. -S {study.name}.repeats=3")
        sp.add_argument("--out", default=None,
                        help=f"output directory (default: a new reports/runs/<time>/{study.name}/; `dvc repro` "
                             f"writes {study.reports_dir}). Earlier results there are replaced only when the "
                             "study completes")
        sp.add_argument("--progress", choices=MODES, default="auto",
                        help="progress on stderr: a bar on a terminal, one line per run otherwise (auto)")
    _add_brief(sub)
    _add_export(sub)
    cp = sub.add_parser("characterize", help="block-level I/O summary statistics of a trace (tracefs text or raw pages, blkparse text)")
    cp.add_argument("--trace", required=True, help="trace file (plain text or .gz)")
    cp.add_argument("--format", required=True, choices=FORMATS,
                    help="tracefs: block_rq_issue/complete event lines (trace_pipe text); tracefs-raw: the binary ring-buffer pages this package records (traces/*.tracefs-raw.gz); blkparse: its default text output")
    cp.add_argument("--capacity-sectors", type=int, default=None,
                    help="device capacity in 512-byte sectors for locality (default: a raw trace's header; sysfs "
                         "for a raw trace recorded on this machine in this boot; else the highest sector in the "
                         "trace, with a warning)")
    cp.add_argument("--out", required=True, help="folder for characterization.json and characterization.csv")
    np_ = sub.add_parser("notebooks", help="check (or --write) that each study notebook's parameters cell "
                                          "shows params.yaml's section; name the .ipynb files whose code "
                                          "differs from their tracked .py")
    np_.add_argument("--write", action="store_true", help="rewrite the cells from params.yaml")
    np_.add_argument("--refresh", action="store_true",
                     help="make each .ipynb from its .py, or bring it up to the .py's code merged cell by cell (your "
                          "parameters cell, edits and outputs kept; a cell changed on both sides kept twice, yours "
                          "marked; the earlier file in notebooks/before-refresh/): what `make notebooks` runs. "
                          "Refused while JupyterLab has the notebook open")
    np_.add_argument("--make-missing", action="store_true",
                     help="make only the .ipynb files that are missing (what `make env` runs)")
    np_.add_argument("--save-code", metavar="NOTEBOOK.ipynb",
                     help="put this notebook's code and text into its tracked .py (the parameters cell stays "
                          "params.yaml's): how a code edit made in JupyterLab goes into git")
    sub.add_parser("lab", help="JupyterLab on this project, as `make lab` starts it: its terminals and kernels have "
                               "this environment's commands (storagebrief, dvc) on PATH; any other option goes to "
                               "`jupyter lab` (e.g. --no-browser --port 8889)")
    dv = sub.add_parser("dvc-stages", help="check (or --write) that dvc.yaml holds the stages the studies "
                                           "registry implies")
    dv.add_argument("--write", action="store_true", help="rewrite dvc.yaml from the registry")
    ca = sub.add_parser("calibrate-accelerator", help="time a catalogue workload's training step on this machine's "
                        "accelerator and store it as a new accelerator_type (e.g. h200-measured, cpu-measured)")
    ca.add_argument("--workload", default="resnet50", help="catalogue workload to time (resnet50)")
    ca.add_argument("--batch-size", type=int, default=None, help="batch (default: the workload's catalogue batch)")
    ca.add_argument("--steps", type=int, default=10, help="timed steps (the median is stored)")
    ca.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ca.add_argument("--image-size", type=int, default=None,
                    help="smaller square input for a quick try (stored as reduced_input: not the workload's)")
    ca.add_argument("--framework", default="auto", help="auto | tensorflow | pytorch")
    ca.add_argument("--name", default=None, help="accelerator_type to write (default: <gpu>-measured or cpu-measured)")
    ca.add_argument("--store", default=None, help="file to write (default: $STORAGEBRIEF_ACCELERATORS or the "
                                                  "project's accelerators.yaml)")
    do = sub.add_parser("docs", help="check (or --write) the generated parts of README.md and docs/ (the studies "
                                     "table, every study's columns)")
    do.add_argument("--write", action="store_true", help="rewrite them from the registry and each study's COLUMNS")
    vp = sub.add_parser("validate", help="check params.yaml (and overrides) without running anything")
    vp.add_argument("--params", default=None, help=PARAMS_HELP)
    vp.add_argument("-S", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return ap


def _quiet_unraisable(unraisable) -> None:
    # A signal's SystemExit raised inside os.fork's callbacks is only "ignored" by Python; the
    # engine re-raises it (cgroups.raise_pending_signal), so its traceback would be noise.
    if not isinstance(unraisable.exc_value, (SystemExit, KeyboardInterrupt)):
        sys.__unraisablehook__(unraisable)


def _doctor(args) -> int:
    from .core.inventory import doctor_lines
    if args.clean:
        from .core.leftovers import remove_dead_staging, remove_leftovers, remove_mpi_segments
        from .kit.checkpoint_cost import FOLDER_PREFIX
        targets, note = _doctor_targets(args.params)
        print("\n".join(remove_leftovers() + remove_mpi_segments()
                        + remove_dead_staging(targets, (FOLDER_PREFIX,)) + note)
              or "no leftovers of killed storagebrief runs (cgroups, processes, tracefs instances, temporary and "
                 "staging folders)")
    print("\n".join(_runtime_lines()))
    from .studies.transfer_sweep.gpu import doctor_line as gpu_line
    print("\n".join(doctor_lines() + [f"{'GPU ':.<23} {gpu_line()}"]))
    return 0


def _doctor_targets(params: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, path) of the params file's targets for doctor --clean, and a note when there is no project
    params file (then no target is looked at). A params file named with --params must load."""
    if params is None:
        try:
            params = config.default_params_file()
        except config.ParamsError:
            return [], ["no project params.yaml here: no target's staging folders looked at (name one with --params)"]
    loaded = config.load(params, check_targets=False)
    return [(t.name, t.path) for t in loaded.targets], []


def _runtime_lines() -> list[str]:
    """Where registries and locks live, why a candidate folder was passed over, and old registry files ignored."""
    from .core import runtime_dir, s3gateway
    try:
        lines = [f"{'runtime folder ':.<23} {runtime_dir.path()} (registries, locks; private to this user)"]
    except runtime_dir.RuntimeDirError as exc:
        return [f"{'runtime folder ':.<23} {exc}"]
    lines += [f"{'':23} passed over: {why}" for why in runtime_dir.skipped()]
    old = s3gateway.legacy_entries()
    if old:
        lines.append(f"{'':23} ignored {len(old)} S3 gateway registry file(s) of an older storagebrief in "
                     f"{s3gateway.LEGACY_REGISTRY} (e.g. {old[0].name}): anyone could have written them, so the "
                     "sweep never reads them; remove yours by hand")
    return lines


def _characterize(args) -> int:
    from .core import characterize as ch
    res = ch.main_characterize(args.trace, args.format, args.capacity_sectors, args.out)
    row, counts = res["row"], res["counts"]
    print(f"{args.trace}: {row['read_ops'] + row['write_ops']:,} reads/writes, "
          f"{ch.describe(row)}; {row['flush_ops']:,} flushes, {row['discard_ops']:,} discards; "
          f"locality {row['locality_percent']:.1f} % in 10 % of the address space "
          f"({row['capacity_source'].replace('_', ' ')} capacity), "
          f"{row['locality_bands']} band(s); trace {row['trace_length_s']:.3f} s")
    if counts.malformed or counts.lost_events:
        examples = counts.malformed_examples + counts.impossible_examples
        print(f"note: {counts.malformed:,} malformed line(s) or record(s) skipped"
              + (f" (e.g. {examples[0]!r})" if examples else "")
              + f"; {counts.lost_events:,} lost event(s) reported in the trace")
    if row["warning"]:
        print(f"storagebrief: warning: {row['warning']}", file=sys.stderr)
    print(f"wrote {res['paths']['json']} and {res['paths']['csv']}")
    return 0


def _notebooks(args) -> int:
    from . import notebooks as files
    if args.save_code:
        print(f"wrote {files.save_code(args.save_code)} (its parameters cell: params.yaml's)")
        return 0
    if args.refresh or args.make_missing:
        written = files.refresh(only_missing=args.make_missing)
        print(f"notebooks up to date with their .py files ({len(written)} written)")
        return 0
    root = config.project_root()
    for nb in files.stale(root):
        cells = files.drift(nb)
        print(f"note: {nb.relative_to(root)}'s code differs from {nb.with_suffix('.py').name} in "
              f"{'; '.join(cells[:4])}{f' and {len(cells) - 4} more' if len(cells) > 4 else ''}: `make notebooks` "
              f"merges a changed .py in (your edits kept), `storagebrief notebooks --save-code "
              f"{nb.relative_to(root)}` puts the notebook's into the .py")
    differing = files.sync_knobs(write=args.write)
    if not differing:
        print("ok: every notebook's parameters cell equals params.yaml")
        return 0
    verb = "rewrote" if args.write else "differ from params.yaml (storagebrief notebooks --write)"
    print(f"{verb}: {', '.join(differing)}")
    return 0 if args.write else 1


def _dvc_stages(args) -> int:
    from .dvcstages import sync
    if not sync(write=args.write):
        print("ok: dvc.yaml holds the stages the studies registry implies")
        return 0
    print("rewrote dvc.yaml from the registry" if args.write
          else "dvc.yaml differs from the studies registry (storagebrief dvc-stages --write)")
    return 0 if args.write else 1


def _docs(args) -> int:
    from . import docs
    root = config.project_root()
    if args.write:
        changed = docs.write(root)
        print(f"rewrote: {', '.join(changed)}" if changed else "ok: nothing to rewrite")
    found = docs.differences(root)
    for line in found:
        print(line)
    if not found:
        print("ok: README.md and docs/ hold what the registry and the studies' COLUMNS imply")
    return 1 if found else 0


def _validate(args) -> int:
    params = config.load(args.params, args.overrides)
    config.check_section_targets(params)     # every section's targets, as each study's run checks its own
    machine_fit.check_machine(params)        # every section's processes, files and memory against this machine's limits
    machine_fit.check_tools(params)          # versitygw for local-gateway S3 targets, as the object studies' runs need
    shown = args.params or config.default_params_file()
    print(f"ok: {shown} is valid (sections: {', '.join(params.sections) or 'none'})")
    return 0


def _brief(args) -> int:
    from . import brief
    from .brief import choose
    keys = choose.parse(args.studies) if args.studies is not None else None    # a bad name: one line, before any work
    from .core.outdir import check_own_out
    out_dir = check_own_out(args.out) if args.out is not None else None        # a symlink, a file, not ours: likewise
    # Any directory works: defaults come from the project, not from where the command started.
    params_file = Path(args.params) if args.params else config.project_root() / "params.yaml"
    params = config.load(params_file, check_targets=False)   # a wrong params file: an error here, not in the kernel
    reports = Path(args.reports) if args.reports else params_file.resolve().parent / "reports"
    if not reports.is_absolute() and not reports.is_dir():   # a relative folder: here, else the project's
        reports = params_file.resolve().parent / reports
    if not reports.is_dir():
        raise FileNotFoundError(f"no reports folder at {reports} (a folder holding one results folder per study: "
                                "run a study first, from a notebook, `storagebrief <study>` or `dvc repro`)")
    if out_dir is not None:
        from .core.folders import refuse_out_in_target_data
        refuse_out_in_target_data(out_dir, [(t.name, t.path) for t in params.targets])    # a rebuild deletes it
    if keys is not None:         # each chosen study's newest complete results, linked into a brief folder of their own
        chosen = choose.choose(reports, keys)
        print("\n".join(choose.summary(chosen)), file=sys.stderr)
        reports = choose.prepare(reports, chosen)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        check_own_out(out_dir)                   # made meanwhile: still a real folder of ours
    from .notebook import quiet_library_logs     # the brief's kernel's start-up and shutdown log lines
    with quiet_library_logs():
        out = brief.render(reports, params_file, pdf=not args.no_pdf, log=lambda m: print(m, file=sys.stderr),
                           out_dir=out_dir)
    print(f"wrote {out['html']}" + (f" and {out['pdf']}" if out["pdf"] else ""))
    return 0 if (out["pdf"] or args.no_pdf) else 1


def _add_brief(sub) -> None:
    bp = sub.add_parser("brief", help="render reports/brief.html and reports/brief.pdf")
    bp.add_argument("--params", default=None,
                    help="params file (default: params.yaml of the project: the first folder at or above the "
                         "current one holding params.yaml and dvc.yaml)")
    bp.add_argument("--reports", default=None, help="results folder (default: reports/ beside the params file)")
    bp.add_argument("--studies", default=None, metavar="NAMES",
                    help="a brief of only these studies (comma-separated keys or command names, e.g. "
                         "emulate,kv_cache,vector_search), each from its newest complete results in the reports "
                         "folder: the pipeline's <study>/ or a notebook or CLI run's runs/<time>/<study>/; written to "
                         "<reports>/briefs/<study>+<study>/")
    bp.add_argument("--out", default=None, metavar="DIR",
                    help="write brief.html, brief.pdf (and brief.ipynb, headlines.json) into DIR instead of beside the "
                         "results; made when missing; refused when it is a symlink, a file or not your own folder")
    bp.add_argument("--no-pdf", action="store_true")


def _add_export(sub) -> None:
    ep = sub.add_parser("export", help="a submitter's folder of the MLPerf-named studies' runs, for MLPerf "
                                       "Storage's own tools (docs/mlperf-tools.md)")
    ep.add_argument("--mlperf", required=True, metavar="DIR", help="a new or empty folder for the submitter's folder")
    ep.add_argument("--reports", default=None, help="results folder (default: reports/ beside the params file)")
    ep.add_argument("--params", default=None, help=PARAMS_HELP)
    ep.add_argument("--division", default="open", help="open (default) or closed: the folder's division")
    ep.add_argument("--submitter", default="storagebrief", help="the submitter's folder name (default storagebrief)")


def _export(args) -> int:
    from .kit import mlpstorage_export
    params_file = Path(args.params) if args.params else config.project_root() / "params.yaml"
    dest = Path(args.mlperf).resolve()
    mlpstorage_export.check(dest, args.division, args.submitter)     # bad input: one line, before any work
    reports = Path(args.reports) if args.reports else params_file.resolve().parent / "reports"
    made = mlpstorage_export.export(reports, dest, args.division, args.submitter)
    print("\n".join(mlpstorage_export.summary_lines(made)))
    return 0


def _stdout_gone() -> None:
    """The reader of our stdout left (`storagebrief checkpoint … | head -1`): the rest of what we print
    goes nowhere, and the run goes on (its results are files), instead of failing on a BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _say(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_gone()


def _study(args) -> int:
    study = studies.get(args.command)
    params = config.load(args.params, args.overrides)
    params.section(study.name)
    from .core import inventory
    from .notebook import quiet_library_logs, record_in_history     # TensorFlow 2.21's start-up info lines ignore
    with quiet_library_logs(), inventory.entered("CLI"):                 # TF_CPP_MIN_LOG_LEVEL
        frame = study.run(params, Path(args.out) if args.out else None, progress=args.progress, log=_say)
    status = frame.attrs.get("out_dir") or args.out
    record_in_history(study.name, Path(status), _say)
    _say(f"wrote {len(frame)} runs to {Path(status) / 'runs.csv'}")
    return 0


def _calibrate(args) -> int:
    from .core import measured_accelerators as store
    from .core.workloads import WORKLOADS
    from .kit import calibrate
    batch = args.batch_size or WORKLOADS.get(args.workload, {}).get("batch_size", 1)
    calibrate.check(args.workload, batch, args.steps, args.warmup, args.image_size, args.framework)
    path = Path(args.store) if args.store else store.store_path()
    if path is None:
        raise config.ParamsError("calibrate-accelerator: no project here (params.yaml + dvc.yaml) and no --store or "
                                 f"${store.ENV}: say where to write the measured accelerator")
    entry = calibrate.measure(args.workload, batch, args.steps, args.warmup, args.image_size, args.framework)
    name = args.name or calibrate.default_name(entry["device"], entry["device_name"])
    store.save(entry, name, args.workload, path)
    print(f"{name}: {args.workload} {entry['compute_s']:.4f} s per batch of {batch} ({entry['samples_per_s']:,.1f} "
          f"samples/s; steps {entry['step_s_min']:.4f}-{entry['step_s_max']:.4f} s) on {entry['device_name']} "
          f"({entry['device']}) -> {path}; use accelerator_type: {name}")
    return 0


def _lab(args) -> int:
    from .notebooks import lab_command
    command, env = lab_command(args.jupyter_args)
    os.execvpe(command[0], command, env)      # JupyterLab in this process: Ctrl-C stops it as before


COMMANDS = {"calibrate-accelerator": _calibrate, "doctor": _doctor, "characterize": _characterize, "notebooks": _notebooks,
            "dvc-stages": _dvc_stages, "docs": _docs, "validate": _validate, "brief": _brief, "lab": _lab,
            "export": _export}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.jupyter_args = rest
    sys.unraisablehook = _quiet_unraisable
    try:
        return COMMANDS.get(args.command, _study)(args)
    except KeyboardInterrupt as exc:
        return _stopped(args, "interrupted (Ctrl-C)", 130, exc)
    except BrokenPipeError:      # a command's own output, read by a reader that left (| head -1)
        _stdout_gone()
        return 0
    except SystemExit as exc:   # SIGTERM / SIGHUP, raised by the cgroup signal handlers
        code = exc.code if isinstance(exc.code, int) else 1
        name = signal.Signals(code - 128).name if 128 < code < 160 else f"exit {code}"
        return _stopped(args, f"stopped by {name}", code, exc)
    except Exception as exc:
        if expected(exc):        # bad input or environment: one line (TraceError is a ValueError)
            print(error_line(exc), file=sys.stderr)
            return 2
        if args.debug:
            raise
        print(f"storagebrief: internal error: {type(exc).__name__}: {exc} (a bug: run again with --debug for "
              "the traceback, and report it)", file=sys.stderr)
        return 1


def _stopped(args, why: str, code: int, exc: BaseException | None = None) -> int:
    """One line instead of a traceback: what happened and what was kept."""
    notes = getattr(exc, "__notes__", None)
    if notes:      # the engine says where the partial run is
        print(f"storagebrief: {why}: cgroups and child processes removed, no partial row written; "
              + "; ".join(notes), file=sys.stderr)
        return code
    out = getattr(args, "out", None)
    kept = (f"; runs finished so far are in {Path(out) / 'runs.csv'} or its '.incomplete-' sibling (status.json: "
            "complete false)" if out else "; runs finished so far are in reports/runs/ (status.json: complete false)")
    print(f"storagebrief: {why}: cgroups and child processes removed, no partial row written{kept}",
          file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
