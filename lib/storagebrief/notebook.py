"""The notebooks' front door: a study's knobs in, one run, a readable table out.

Notebooks run as opened -- from JupyterLab (kernel in notebooks/), VS Code or papermill (kernel
wherever it was started): the project is found by walking up to params.yaml + dvc.yaml, and
relative paths in params resolve against that folder. A notebook's parameters cell holds its
study's section of params.yaml as a dict; keys whose values differ from params.yaml are this
run's changes (merged over params.yaml, after the paper overlay, validated before any work).
`dvc repro` injects `<study> = None` ("as params.yaml says") and out_dir = reports/<study>.
"""
from __future__ import annotations

import importlib

import re
from pathlib import Path

import pandas as pd

from . import studies
from .core import config

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


def _params_path(params_file) -> Path:
    if params_file is None:
        return config.default_params_file()
    path = Path(params_file).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return config.project_root() / path      # relative to the project, wherever the kernel runs


def run_study(name: str, knobs: dict | None = None, *, targets: list | None = None, out_dir=None,
              progress: str = "auto", overrides=(), params_file=None, show=print) -> pd.DataFrame:
    """Run study `name` with this notebook's knobs merged over params.yaml; returns its runs.

    out_dir None: a new reports/runs/<time>/<name>/ (the pipeline's reports/<name>/ is dvc repro's)."""
    install_error_display()
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
    frame = study.run(params, out_dir, progress=progress, log=show)
    final = Path(frame.attrs.get("out_dir", out_dir or ""))
    if out_dir is None:
        show(f"A brief of this run alone: storagebrief brief --reports {_rel(final.parent, root)}\n"
             f"The pipeline's brief (reports/brief.html) shows what `dvc repro` ran: to put these knobs "
             f"there, set them in params.yaml and run `dvc repro`.")
    return frame


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def _describe_changes(name: str, changes: dict, section: dict, targets_changed: bool, path: Path) -> str:
    if not changes and not targets_changed:
        return f"Knobs: as in {path}."
    parts = [f"{k} = {v!r} (params.yaml: {section[k]!r})" if k in section else f"{k} = {v!r}"
             for k, v in changes.items()]
    if targets_changed:
        parts.append("targets as given here")
    return f"Knobs changed here over {path}: " + "; ".join(parts)


# -- the Runs table ------------------------------------------------------------------------------
_UNITS = [("_mb_per_s", " (MB/s)"), ("_mib_per_s", " (MiB/s)"), ("_per_s", " /s"), ("_percent", " (%)"),
          ("_us", " (µs)"), ("_ms", " (ms)"), ("_s", " (s)"), ("_mib", " (MiB)"), ("_kib", " (KiB)"),
          ("_bytes", " (B)")]


_STATISTIC = re.compile(r"_(avg|max|min|mean|median|stdev|p\d+(?:_\d+)?)$")


def column_title(column: str) -> str:
    """`completion_time_s` -> 'completion time (s)', `device_read_mb_per_s_avg` -> 'device read (MB/s, avg)',
    `read_latency_us_p99` -> 'read latency (µs, p99)': unit (and statistic) from the name's suffixes."""
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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None or (isinstance(value, float) and value != value) else str(value)
    if value != value:
        return "–"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{value:,.0f}"
    mag = abs(value)
    return f"{value:,.0f}" if mag >= 100 else f"{value:,.1f}" if mag >= 10 else f"{value:,.2f}" if mag >= 0.1 \
        else f"{value:.3g}"


def show_runs(frame: pd.DataFrame, columns: list[str], caption: str = "") -> None:
    """The runs as the brief shows tables: units in readable headers, sensible decimals."""
    from .report.display import show_table

    if frame is None or frame.empty:
        from .report.display import show_md
        show_md("No measured runs.")
        return
    cols = [c for c in columns if c in frame.columns]
    table = frame[cols].copy()
    for c in cols:
        table[c] = [_fmt(v) for v in table[c]]
    table.columns = [column_title(c) for c in cols]
    show_table(table, caption=caption or f"{len(frame)} measured runs (runs.csv)")


NOTEBOOK_TEMPLATE = """\
# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # {number} — {title}
#
# {about}
#
# The same study runs without Jupyter: `storagebrief {command} --out DIR`.
#
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Results go to a new folder `reports/runs/<time>/{name}/` (the pipeline's `reports/{name}/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `{name}:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work); change params.yaml for `dvc repro` too.
{knobs}
targets = None     # None: params.yaml's targets; or a list like params.yaml's (name, path, profile)
out_dir = None     # None: a new reports/runs/<time>/{name}/ (dvc repro passes reports/{name})
progress = "auto"  # a bar in JupyterLab; "lines": one line per run

# %%
from storagebrief import brief, notebook

runs = notebook.run_study("{name}", {name}, targets=targets, out_dir=out_dir, progress=progress)

# %% [markdown]
# ## Runs
# One row per measured run (`runs.csv`; every column is described in `runs.schema.json`).

# %%
notebook.show_runs(runs, {columns!r})

# %% [markdown]
# ## Results
# The same tables, figures and analysis that the brief shows.

# %%
brief.study_section("{name}", runs.attrs["out_dir"])
"""


def new_notebook(study, params_file: str | Path) -> str:
    """A new study's notebook (Jupytext percent), thin: parameters cell, run_study, the runs table
    (the first columns its metrics room declares), its brief section."""
    declared = [c.name for c in getattr(study.room("metrics"), "COLUMNS", ()) if "*" not in c.name]
    about = (importlib.import_module(study.package).__doc__ or study.title).strip().replace("\n", "\n# ")
    return NOTEBOOK_TEMPLATE.format(number=Path(study.notebook).name[:2], title=study.title, about=about,
                                    command=study.command, name=study.name,
                                    knobs=knobs_cell(study.name, params_file),
                                    columns=["target", "repeat", *declared[:6], "cache_method"])


def knobs_cell(name: str, params_file: str | Path) -> str:
    """The parameters cell of a study's notebook, written from params.yaml's section with its
    comments (`storagebrief notebooks --write` keeps the notebooks equal to params.yaml)."""
    lines = _section_lines(Path(params_file).read_text(), name)
    return f"{name} = {{\n{_to_python(lines)}\n}}"


def _section_lines(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(name)}:\s*(#.*)?$", line))
    out = []
    for line in lines[start + 1:]:
        if line and not line[0].isspace() and not line.startswith("#"):
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return [line for line in out if not (line.startswith("#") and not line.startswith(" "))]


def _to_python(lines: list[str]) -> str:
    import yaml

    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^  ([A-Za-z_][A-Za-z0-9_]*):(.*)$", line)
        if not m:
            if line.strip().startswith("#"):
                out.append("    " + _python_words(line.strip()))
            i += 1
            continue
        key, rest = m.group(1), m.group(2)
        value_text, comment = _split_comment(rest)
        block = [line]
        j = i + 1
        while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
            block.append(lines[j])
            j += 1
        value = yaml.safe_load("\n".join(block))[key]
        literal = _literal(value)
        out.append(f"    {key!r}: {literal}," + (f"  {_python_words(comment)}" if comment else ""))
        i = j
    return "\n".join(out)


def _split_comment(text: str) -> tuple[str, str]:
    in_quote = None
    for k, ch in enumerate(text):
        if ch in "\"'":
            in_quote = None if in_quote == ch else (in_quote or ch)
        if ch == "#" and in_quote is None and (k == 0 or text[k - 1].isspace()):
            return text[:k].strip(), text[k:].strip()
    return text.strip(), ""


def _literal(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _python_words(comment: str) -> str:
    # the same knobs in Python: YAML's null/true/false read as None/True/False
    for yaml_word, python_word in (("null", "None"), ("true", "True"), ("false", "False")):
        comment = re.sub(rf"\b{yaml_word}\b", python_word, comment)
    # "x = y" reads "x: y" here: papermill takes a line with a second '=' for a broken assignment
    return comment.replace(" = ", ": ")


def sync_knobs(root: str | Path | None = None, write: bool = False) -> list[str]:
    """Notebooks whose parameters cell differs from params.yaml's section (rewritten when `write`).

    The cell is the `<study> = {...}` block of notebooks/NN_<study>.py, made by knobs_cell."""
    root = Path(root) if root is not None else config.project_root()
    differing = []
    for study in studies.REGISTRY.values():
        path = root / study.notebook
        if not path.exists():          # a new study: its notebook starts from the template
            differing.append(str(path.relative_to(root)))
            if write:
                path.write_text(new_notebook(study, root / "params.yaml"))
            continue
        text = path.read_text()
        block = re.search(rf"^{study.name} = (dict\(|\{{)\n.*?^(\)|\}})$", text, flags=re.M | re.S)
        if block is None:
            raise config.ParamsError(f"{path}: no '{study.name} = {{' parameters block")
        wanted = knobs_cell(study.name, root / "params.yaml")
        if block.group(0) != wanted:
            differing.append(str(path.relative_to(root)))
            if write:
                path.write_text(text[:block.start()] + wanted + text[block.end():])
    return differing
