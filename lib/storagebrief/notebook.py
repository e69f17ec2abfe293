"""The notebooks' front door: a study's knobs in, one run, a readable table out.

Notebooks run as opened -- from JupyterLab (kernel in notebooks/), VS Code or papermill (kernel
wherever it was started): the project is found by walking up to params.yaml + dvc.yaml, and
relative paths in params resolve against that folder. A notebook's parameters cell holds its
study's section of params.yaml as a dict; keys whose values differ from params.yaml are this
run's changes (merged over params.yaml, after the paper overlay, validated before any work).
`dvc repro` injects `<study> = None` ("as params.yaml says") and out_dir = reports/<study>.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from . import studies
from .core import config, inventory

_PACKAGE_DIR = str(Path(__file__).resolve().parent)


def _through_us(tb) -> bool:
    """True when storagebrief's own code is on the traceback (a user's own cell keeps its traceback)."""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            return True
        tb = tb.tb_next
    return False


def _short_error(shell, etype, value, tb, tb_offset=None):
    from .errors import error_line, expected

    if issubclass(etype, KeyboardInterrupt) and _through_us(tb):
        notes = "; ".join(getattr(value, "__notes__", []))
        stb = ["\x1b[0;31mstoragebrief: interrupted (Ctrl-C): cgroups and child processes removed"
               + (f"; {notes}" if notes else "") + "\x1b[0m"]
    elif expected(value) and _through_us(tb):
        stb = [f"\x1b[0;31m{line}\x1b[0m" for line in error_line(value).splitlines()]
    else:
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    shell._showtraceback(etype, value, stb)
    return stb


def install_error_display() -> None:
    """In IPython: storagebrief's expected errors (bad parameter, target, output folder) show as the
    CLI's one message, not a library traceback; anything else keeps its full traceback."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:       # the handler decides per exception (cli.expected); others keep their traceback
        shell.set_custom_exc((Exception, KeyboardInterrupt), _short_error)


def _changes(name: str, knobs, section: dict) -> dict:
    """The knobs whose values differ from params.yaml's section: this notebook's changes."""
    if knobs is None:
        return {}
    if not isinstance(knobs, dict):
        raise config.ParamsError(
            f"{name} must be a dict of the {name} section's keys (as in params.yaml), got {type(knobs).__name__} "
            f"{knobs!r}; e.g. {name} = {{\"repeats\": 1}}")
    return {k: v for k, v in knobs.items() if k not in section or section[k] != v}


def project_path(path: str | Path) -> Path:
    """A path a notebook was given: as it is when absolute or present in the current folder, else relative to the
    project (JupyterLab starts the kernel in notebooks/, papermill and DVC at the root: the brief notebook's
    "reports" and "params.yaml" failed as opened in JupyterLab)."""
    path = Path(path).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return config.project_root() / path      # relative to the project, wherever the kernel runs


def _params_path(params_file) -> Path:
    return config.default_params_file() if params_file is None else project_path(params_file)


def run_study(name: str, knobs: dict | None = None, *, targets: list | None = None, out_dir=None,
              progress: str = "auto", overrides=(), params_file=None, show=print) -> pd.DataFrame:
    """Run study `name` with this notebook's knobs merged over params.yaml; returns its runs.

    out_dir None: a new reports/runs/<time>/<name>/ (the pipeline's reports/<name>/ is dvc repro's)."""
    install_error_display()
    with output_in_view():
        return _run_study(name, knobs, targets=targets, out_dir=out_dir, progress=progress, overrides=overrides,
                          params_file=params_file, show=show)


# Follows the running cell's newest output (the progress bar, then each note) until the user scrolls or types, and
# stops when the run ends (this output is replaced). `element` is this output's node in JupyterLab's JavaScript
# renderer, which runs the script before the node is on the page: it waits for that. One scroll when the bar appeared
# was not enough (seen): the browser's scroll anchoring and cells above it laid out again moved the view afterwards,
# so every scroll the user did not make is followed by another look at the newest output. A new output's own
# content (the progress widget) lays out after it is added, and once the bar sat above the view under load (CI,
# 9367d0d): its size changes are followed too (ResizeObserver), and the wait for the node lasts 60 s, not 5.
_FOLLOW_OUTPUT = """(function () {
  let area = null, scroller = null, observer = null, sizes = null, user = false;
  const follow = () => {
    if (user || !element.isConnected) {
      if (observer) observer.disconnect();
      if (sizes) sizes.disconnect();
      if (scroller) scroller.removeEventListener('scroll', follow);
      return;
    }
    const newest = area.lastElementChild;
    if (newest) newest.scrollIntoView({block: 'nearest'});
  };
  (function start(tries) {
    area = element.isConnected ? element.closest('.jp-OutputArea') : null;
    if (!area) { if (tries > 0) setTimeout(() => start(tries - 1), 50); return; }
    scroller = element.closest('.jp-WindowedPanel-outer') || document;
    for (const what of ['wheel', 'touchstart', 'keydown', 'mousedown']) {
      scroller.addEventListener(what, () => { user = true; }, {once: true});
    }
    scroller.addEventListener('scroll', follow);
    observer = new MutationObserver(follow);
    observer.observe(area, {childList: true});
    if (window.ResizeObserver) { sizes = new ResizeObserver(follow); sizes.observe(area); }
    follow();
  })(1200);
})();"""


@contextlib.contextmanager
def output_in_view():
    """While a study runs in a Jupyter kernel: the running cell's newest output kept in view. Run All leaves
    JupyterLab's view at the notebook's last cell, and on a laptop's screen the run cell's progress bar sat above it,
    off screen (issue 48; every study notebook at 1366 x 768). A script output (_FOLLOW_OUTPUT), emptied when the run
    ends so that a reopened notebook does not run it again, scrolls the notebook to the bar."""
    try:
        from IPython import get_ipython
        from IPython.display import Javascript, display
    except ImportError:
        yield
        return
    if getattr(get_ipython(), "kernel", None) is None:       # a terminal IPython or a script: nothing to scroll
        yield
        return
    handle = display(Javascript(_FOLLOW_OUTPUT), display_id=True)
    try:
        yield
    finally:
        handle.update({"text/plain": ""}, raw=True)


def _run_study(name: str, knobs, *, targets, out_dir, progress, overrides, params_file, show) -> pd.DataFrame:
    study = studies.get(name)
    path = _params_path(params_file)
    raw = config.read_yaml(path)
    changes = {}
    section_changes = _changes(study.name, knobs, raw.get(study.name) or {})
    if section_changes:
        changes[study.name] = section_changes
    if targets is not None and targets != raw.get("targets"):
        changes["targets"] = targets
    params = config.load(path, list(overrides or ()), changes=changes)   # validates before any work
    params.section(study.name)
    show(_describe_changes(study.name, section_changes, raw.get(study.name) or {}, "targets" in changes, path))
    root = Path(params.root)
    if out_dir is not None and not Path(out_dir).expanduser().is_absolute():
        out_dir = root / out_dir
    with quiet_library_logs(), inventory.entered("notebook"):
        frame = study.run(params, out_dir, progress=progress, log=show)
    final = Path(frame.attrs.get("out_dir", out_dir or ""))
    record_in_history(study.name, final, show)
    show(brief_hint(final, study.name, root, pipeline=out_dir is None))
    return frame


def record_in_history(name: str, study_dir: Path, show=print) -> None:
    """A finished run's page-1 values into its project's history (kit/history), so every later brief of the same
    knobs counts it; a history that cannot be written is one line, and the run's results stand."""
    from .brief.pageone import record_run
    try:
        record_run(name, study_dir)
    except Exception as exc:  # noqa: BLE001 - the run is done; its history row is not worth failing it
        why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        show(f"page-1 values not recorded in the project's history: {why}")


def brief_hint(study_dir: Path, name: str, root: Path, pipeline: bool = True) -> str:
    """How to render a brief of this run, as a command that works where the notebook runs: the brief
    reads <folder>/<study>/, and `storagebrief brief` resolves a relative --reports against the project. A
    console or cell runs Python, so it gets the line with IPython's `!` (issue 48: the bare line was a SyntaxError)."""
    study_dir = Path(study_dir).resolve()
    if study_dir.name != name:
        return (f"A brief reads <folder>/{name}/: for a brief of this run alone, run it with an out_dir "
                f"whose last folder is '{name}' (e.g. out_dir = \"{study_dir / name}\").")
    try:
        folder = str(study_dir.parent.relative_to(Path(root).resolve()))
    except ValueError:
        folder = str(study_dir.parent)
    command = f"storagebrief brief --reports {folder}"
    hint = (f"A brief of this run alone: {command}\n(in a terminal as it is; in a console or a cell: !{command})")
    if _in_reports(study_dir, root):     # where `brief --studies` looks: the project's reports/ and reports/runs/
        chosen = f"storagebrief brief --studies {name}"
        hint += (f"\nA brief of the studies you choose, each from its newest complete run: {chosen}\n(more with commas, "
                 f"e.g. --studies emulate,kv_cache,vector_search; in a console or a cell: !{chosen})")
    if pipeline:
        hint += ("\nThe pipeline's brief (reports/brief.html) shows what `dvc repro` ran: to put these knobs "
                 "there, set them in params.yaml and run `dvc repro`.")
    return hint


def _in_reports(study_dir: Path, root: Path) -> bool:
    """A study folder `storagebrief brief --studies` finds: reports/<study>/ or reports/runs/<time>/<study>/."""
    reports = (Path(root) / "reports").resolve()
    parent = Path(study_dir).resolve().parent
    return parent == reports or parent.parent == reports / "runs"


# The brief's own kernel (papermill's, a child of `storagebrief brief`) logs these to the shared stderr on every
# start and shutdown; in a notebook's `!storagebrief brief` they read as failures of a command that worked.
_KERNEL_LINES = (rb"\[IPKernelApp\] WARNING \| Kernel is running over TCP without encryption\..*"
                 rb"|\[IPKernelApp\] ERROR \| KeyboardInterrupt caught in kernel\.?")


# Info lines TensorFlow's C++ core writes to the process's stderr at import although TF_CPP_MIN_LOG_LEVEL=2
# asks it not to (TensorFlow 2.21: "All log messages before absl::InitializeLog() ..." and "I0000 ...
# port.cc:153] oneDNN custom operations are on ..."). Only absl *info* lines go; warnings and errors stay.
_LIBRARY_INFO = re.compile(rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written "
                           rb"to STDERR|I\d{4} \d+:\d+:\d+(?:\.\d+)?\s+\d+ \S+:\d+\] .*"
                           rb"|" + _KERNEL_LINES + rb")$")


_ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _may_be_library_info(partial: bytes) -> bool:
    return (_ABSL_NOTICE.startswith(partial[:len(_ABSL_NOTICE)]) or b"[IPKernelApp] ".startswith(partial[:14])
            or re.match(rb"^I\d{0,4}( |$)", partial) is not None)


@contextlib.contextmanager
def quiet_library_logs():
    """While a study runs (a notebook, or the CLI): the process's own stderr (fd 2, where C++ libraries write)
    passes through a filter that drops the info lines above; everything else, progress bars included, passes."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    read_end, write_end = os.pipe()

    def pump():
        # whole lines are filtered; a partial one (a progress bar redrawn with \r) passes at once unless it
        # could still become one of the info lines
        buf = b""
        while chunk := os.read(read_end, 1 << 16):
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                if not _LIBRARY_INFO.match(line.rstrip(b"\r")):
                    os.write(saved, line + b"\n")
            if buf and not _may_be_library_info(buf):
                os.write(saved, buf)
                buf = b""
        os.close(read_end)
        if buf and not _LIBRARY_INFO.match(buf.rstrip(b"\r")):
            os.write(saved, buf)

    thread = threading.Thread(target=pump, name="storagebrief-stderr-filter", daemon=True)
    thread.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        os.dup2(saved, 2)            # the pipe's last writer closes: the pump sees EOF and ends
        thread.join(timeout=5)
        if not thread.is_alive():
            os.close(saved)


_ABSENT = object()


def _changed_keys(key: str, value, was) -> list[str]:
    """One `a.b.c = new (params.yaml: old)` per changed leaf: a one-key change inside a nested group names that key,
    not the whole group twice (issue 48)."""
    if isinstance(value, dict) and isinstance(was, dict):
        return [part for k, v in value.items() if was.get(k, _ABSENT) != v      # merged deeply: the rest stays
                for part in _changed_keys(f"{key}.{k}", v, was.get(k, _ABSENT))]
    return [f"{key} = {value!r}" + ("" if was is _ABSENT else f" (params.yaml: {was!r})")]


def _describe_changes(name: str, changes: dict, section: dict, targets_changed: bool, path: Path) -> str:
    if not changes and not targets_changed:
        return f"Knobs: as in {path}."
    parts = [part for k, v in changes.items() for part in _changed_keys(k, v, section.get(k, _ABSENT))]
    if targets_changed:
        parts.append("targets as given here")
    return f"Knobs changed here over {path}: " + "; ".join(parts)


# -- the Runs table ------------------------------------------------------------------------------
_UNITS = [("_mb_per_s", " (MB/s)"), ("_mib_per_s", " (MiB/s)"), ("_gb_per_s", " (GB/s)"), ("_gib_per_s", " (GiB/s)"),
          ("_per_s", " /s"), ("_ratio", " (×)"), ("_gib", " (GiB)"), ("_percent", " (%)"),
          ("_us", " (µs)"), ("_ms", " (ms)"), ("_s", " (s)"), ("_mib", " (MiB)"), ("_kib", " (KiB)"),
          ("_bytes", " (B)")]


_STATISTIC = re.compile(r"_(avg|max|min|mean|median|stdev|p\d+(?:_\d+)?)$")


def column_title(column: str) -> str:
    """`completion_time_s` -> 'completion time (s)', `device_read_mb_per_s_avg` -> 'device read (MB/s, avg)',
    `read_latency_us_p99` -> 'read latency (µs, p99)': unit (and statistic) from the name's suffixes."""
    column = re.sub(r"^honest_", "measured_", column)        # a reader's word for our own rate (issue 62)
    per = re.match(r"^(.+)_(s|ms|us|mib|bytes)_per_([a-z]+)$", column)     # stall_s_per_checkpoint
    if per:
        return f"{column_title(per.group(1) + '_' + per.group(2)).replace(' (', f' per {per.group(3)} (', 1)}"
    stat = _STATISTIC.search(column)
    base = column[: stat.start()] if stat else column
    for suffix, unit in _UNITS:
        if base.endswith(suffix):
            inner = unit.strip(" ()") + (f", {stat.group(1)}" if stat else "")
            sep = " " if unit.startswith(" (") else ""
            return base[: -len(suffix)].replace("_", " ") + (f" ({inner})" if sep else f"{unit}" +
                                                             (f" ({stat.group(1)})" if stat else ""))
    return column.replace("_", " ")


def _fmt(value) -> str:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return "–" if value is None or (isinstance(value, float) and value != value) else str(value)
    if value != value:
        return "–"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{value:,.0f}"
    mag = abs(value)
    return f"{value:,.0f}" if mag >= 100 else f"{value:,.1f}" if mag >= 10 else f"{value:,.2f}" if mag >= 0.1 \
        else f"{value:.3g}"


PROSE_CHARS = 40     # a text column longer than this, the same in every row, is said once below the table


def _filled(rows: pd.DataFrame, column: str) -> bool:
    return bool(rows[column].map(lambda v: v is not None and v == v and v != "").any())


def show_runs(frame: pd.DataFrame, columns: list[str], caption: str = "") -> None:
    """The runs as the brief shows tables: units in readable headers, about 3 significant digits. Sweeps
    that fill different columns get a table each (no column of dashes); a long text that is the same in
    every row is said once, below its table."""
    from .report.display import show_md, show_table

    if frame is None or frame.empty:
        show_md("No measured runs.")
        return
    cols = [c for c in columns if c in frame.columns]
    groups = [("", frame)]
    if "sweep" in frame and frame["sweep"].nunique() > 1:
        by_sweep = list(frame.groupby("sweep", sort=False))
        if len({tuple(_filled(rows, c) for c in cols) for _, rows in by_sweep}) > 1:
            groups = by_sweep
    for sweep, rows in groups:
        shown = [c for c in cols if _filled(rows, c) and not (sweep and c == "sweep")]
        prose = [c for c in shown if len(rows) > 1 and not pd.api.types.is_numeric_dtype(rows[c])
                 and rows[c].nunique() == 1 and len(str(rows[c].iloc[0])) > PROSE_CHARS]
        shown = [c for c in shown if c not in prose]
        table = pd.DataFrame({column_title(c): [_fmt(v) for v in rows[c]] for c in shown})
        what = f"{len(rows)} measured runs (runs.csv)" + (f", {sweep} sweep" if sweep else "")
        show_table(table, caption=f"{caption}: {what}" if caption else what)
        if prose:
            show_md("\n\n".join(f"*{column_title(c)}* (every run above): {rows[c].iloc[0]}" for c in prose))


def start_here(reports_dir: str | Path = "reports") -> pd.DataFrame:
    """notebooks/00_start_here: every study with its notebook, its command and its newest complete results (the
    pipeline's or a notebook or CLI run's, as `storagebrief brief --studies` finds them), then the brief command of
    those that have results. Reads only: nothing runs, nothing is written."""
    from .brief import choose
    from .report.display import show_md, show_table

    reports = project_path(reports_dir)
    rows, ready = [], []
    for key, s in studies.REGISTRY.items():
        found = choose.complete_results(reports, key)
        newest = found[-1] if found else None
        if newest is not None:
            ready.append(key)
        rows.append({"study": s.title, "notebook": Path(s.notebook).with_suffix(".ipynb").name,
                     "command": f"storagebrief {s.command}",
                     "newest complete results": (f"{choose.shown(newest.dir)} ({newest.origin}, "
                                                 f"{newest.finished.strftime('%Y-%m-%d %H:%M UTC')})")
                     if newest else "none yet"})
    table = pd.DataFrame(rows)
    show_table(table, f"The studies and their newest complete results in {choose.shown(reports)}/")
    if ready:
        command = f"storagebrief brief --studies {','.join(ready)}"
        show_md(f"A brief of the studies that have results (each from its newest complete run; name fewer to "
                f"leave some out): `{command}` in a terminal, `!{command}` in a console or a cell, or set "
                f"`studies = \"{','.join(ready)}\"` in brief.ipynb and Run All.")
    else:
        show_md("No study has complete results yet: open a study's notebook above and Run All, then run this "
                "notebook again.")
    return table
