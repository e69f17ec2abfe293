"""The notebooks as files (`storagebrief notebooks`): each study's tracked Jupytext script
(notebooks/NN_<study>.py) and the .ipynb a researcher opens beside it (generated, git-ignored, never
paired with the script). notebook.py is what runs inside a notebook; this module manages the files.

- The script's parameters cell is generated from params.yaml (`knobs_cell`, `sync_knobs`): it always
  says "params.yaml as it is", so a knob edited in JupyterLab lands only in the ignored .ipynb and git,
  DVC and the tests never see it (docs/notebooks.md says why this design).
- `refresh` makes the .ipynb from the script, or brings an existing one up to the script's code, merged
  cell by cell (notebook_merge: your edits and parameters cell stay, a cell changed on both sides is kept
  twice, yours marked; the earlier file goes to notebooks/before-refresh/<time>/): `make notebooks`.
- `save_code` is the way code edits made in JupyterLab go into git: the .ipynb's cells into the script,
  the parameters cell still params.yaml's: `storagebrief notebooks --save-code notebooks/NN_<study>.ipynb`.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

from . import notebook_merge as merging
from . import studies
from .core import config

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
# **Run All** runs it with `params.yaml`'s knobs; change any of them in the parameters cell below. Your edits stay in this notebook's `.ipynb` (git ignores it); the tracked `.py` beside it keeps params.yaml's values (docs/notebooks.md). Results go to a new folder `reports/runs/<time>/{name}/` (the pipeline's `reports/{name}/` belongs to `dvc repro`).

# %% tags=["parameters"]
# This study's knobs: params.yaml's `{name}:` section. A value changed here applies to this notebook's
# runs (merged over params.yaml, validated before any work) and is saved in this .ipynb only, never in
# the tracked .py; change params.yaml for `dvc repro` too.
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
    declared = [c for c in study.room("metrics").COLUMNS if "*" not in c.name]      # MetricsRoom: every study has them
    # what identifies a run, then what was measured (columns with a unit): a reader came for the latter
    columns = ["target", "repeat", *[c.name for c in declared if not c.unit][:3],
               *[c.name for c in declared if c.unit][:6], "cache_method"]
    about = (importlib.import_module(study.package).__doc__ or study.title).strip().replace("\n", "\n# ")
    return NOTEBOOK_TEMPLATE.format(number=Path(study.notebook).name[:2], title=study.title, about=about,
                                    command=study.command, name=study.name,
                                    knobs=knobs_cell(study.name, params_file),
                                    columns=columns)


def knobs_cell(name: str, params_file: str | Path) -> str:
    """The parameters cell of a study's notebook, written from params.yaml's section with its
    comments, one key per line at every depth (`storagebrief notebooks --write` keeps the notebooks
    equal to params.yaml)."""
    lines = _section_lines(Path(params_file).read_text(), name)
    return f"{name} = {{\n" + "\n".join(_to_python(lines, 2, 4)) + "\n}"


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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _to_python(lines: list[str], indent: int, pad: int) -> list[str]:
    """YAML mapping lines at `indent` as Python dict items at `pad`: one key per line at every depth,
    each key's YAML comment beside it, comment lines kept."""
    import yaml

    out, i = [], 0
    key_line = re.compile(rf"^ {{{indent}}}([A-Za-z0-9_][A-Za-z0-9_.+-]*):(.*)$")   # YAML plain keys: quick-1, llama3.1-8b
    while i < len(lines):
        m = key_line.match(lines[i])
        if not m:
            if lines[i].strip().startswith("#"):
                out.append(" " * pad + _python_words(lines[i].strip()))
            i += 1
            continue
        key, (value_text, comment) = m.group(1), _split_comment(m.group(2))
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
            j += 1
        block, i = lines[i:j], j
        note = f"  {_python_words(comment)}" if comment else ""
        children = [line for line in block[1:] if line.strip() and not line.strip().startswith("#")]
        if not value_text and children and not children[0].lstrip().startswith("-"):
            out.append(" " * pad + f"{key!r}: {{{note}")          # a nested mapping: its own lines
            out += _to_python(block[1:], _indent(children[0]), pad + 4)
            out.append(" " * pad + "},")
            continue
        value = yaml.safe_load("\n".join(line for line in block if not line.strip().startswith("#")))[key]
        literal = _literal_lines(value, pad)
        out.append(" " * pad + f"{key!r}: {literal[0]}" + ("," + note if len(literal) == 1 else note))
        out += literal[1:-1] + ([literal[-1] + ","] if len(literal) > 1 else [])
        out += [" " * pad + _python_words(line.strip()) for line in block[1:] if line.strip().startswith("#")]
    return out


def _literal_lines(value, pad: int) -> list[str]:
    """A value as Python source lines: a non-empty dict one key per line (the closing brace at `pad`)."""
    if isinstance(value, dict) and value:
        lines = ["{"]
        for k, v in value.items():
            inner = _literal_lines(v, pad + 4)
            lines.append(" " * (pad + 4) + f"{k!r}: {inner[0]}" + ("," if len(inner) == 1 else ""))
            lines += inner[1:-1] + ([inner[-1] + ","] if len(inner) > 1 else [])
        return lines + [" " * pad + "}"]
    if isinstance(value, list) and any(isinstance(v, dict) and v for v in value):
        lines = ["["]                                             # a list of mappings: an item per line too
        for v in value:
            inner = _literal_lines(v, pad + 4)
            lines.append(" " * (pad + 4) + inner[0] + ("," if len(inner) == 1 else ""))
            lines += inner[1:-1] + ([inner[-1] + ","] if len(inner) > 1 else [])
        return lines + [" " * pad + "]"]
    return [_literal(value)]


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


# -- the .ipynb beside each script ----------------------------------------------------------------
def _is_parameters(cell) -> bool:
    return "parameters" in cell.get("metadata", {}).get("tags", [])


def _code(nb) -> list[tuple[str, str]]:
    """What a notebook runs and says, parameters cell aside (its values are the researcher's)."""
    return [(c["cell_type"], c["source"].strip()) for c in nb["cells"] if not _is_parameters(c)]


def scripts(root: str | Path | None = None) -> list[Path]:
    root = Path(root) if root is not None else config.project_root()
    return sorted(p for p in (root / "notebooks").glob("*.py") if re.match(r"(\d+_\w+|brief)\.py$", p.name))


def stale(root: str | Path | None = None) -> list[Path]:
    """The .ipynb files whose code or text differs from their script (parameters cells aside)."""
    import jupytext
    import nbformat

    return [s.with_suffix(".ipynb") for s in scripts(root) if s.with_suffix(".ipynb").exists()
            and _code(read_ipynb(s.with_suffix(".ipynb"))) != _code(jupytext.read(s))]


def read_ipynb(path: Path):
    """A notebook file as nbformat reads it; one that is not a notebook (cut short, hand-edited, not JSON) is one
    line naming it and the way back, never nbformat's message alone."""
    import nbformat
    try:
        return nbformat.read(path, as_version=4)
    except (ValueError, KeyError, TypeError, OSError) as exc:       # nbformat's NotJSONError is a ValueError
        from .core.causes import untrusted
        cause = untrusted(str(exc), 120)          # it quotes the file's own text
        raise config.ParamsError(f"{path} is not a readable notebook ({cause}); move it aside and run `make notebooks`"
                                 " to make it again from its tracked script") from None


class NotebookOpen(ValueError):
    """A notebook to refresh is open in a running JupyterLab: its next save would undo the refresh (one line)."""


def _server_answers(api: str):
    """(root folder, url, answer) of `api` from every running Jupyter server of this user (`jupyter server list`);
    a server that does not answer it is skipped (it may have just stopped, or not be a JupyterLab)."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return
    for server in list_running_servers():
        url = server["url"].rstrip("/")
        req = urllib.request.Request(f"{url}/{api}", headers={"Authorization": f"token {server.get('token', '')}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as answer:
                body = json.loads(answer.read())
        except (OSError, ValueError):
            continue
        yield Path(server.get("root_dir") or server.get("notebook_dir") or "/"), url, body


def open_in_jupyterlab(paths: list[Path]) -> dict[Path, str]:
    """Which of `paths` a running Jupyter server of this user has open, each with where: "at <url>" for a notebook
    with a kernel (a session), "at <url> with no kernel" for one open in a JupyterLab tab without a session (its
    kernel shut down, or opened with "No Kernel": issue 48), which the server knows only from the tabs JupyterLab
    saves in its workspaces. A workspace keeps its tabs after the browser is closed: such a notebook is reported
    until its tab is closed (conservative: the refusal costs a click, an overwrite costs the refresh)."""
    wanted = {Path(p).resolve(): Path(p) for p in paths}
    found = {}
    for root, url, sessions in _server_answers("api/sessions"):
        for session in sessions if isinstance(sessions, list) else []:
            if (where := wanted.get((root / session.get("path", "")).resolve())) is not None:
                found[where] = f"at {url}/"
    for root, url, answer in _server_answers("lab/api/workspaces"):
        spaces = answer.get("workspaces", {}).get("values", []) if isinstance(answer, dict) else []
        for entry in (e for space in spaces for e in (space.get("data") or {}).values() if isinstance(e, dict)):
            tab = entry.get("data")      # a document's tab: {"path": ..., "factory": "Notebook"}
            if isinstance(tab, dict) and isinstance(tab.get("path"), str):
                where = wanted.get((root / tab["path"]).resolve())
                if where is not None and where not in found:
                    found[where] = f"at {url}/ with no kernel"
    return found


def refresh(root: str | Path | None = None, log=print, only_missing: bool = False) -> list[Path]:
    """Each script's .ipynb made when missing, or (unless `only_missing`) brought up to the script's code when it
    differs, merged cell by cell (notebook_merge): your parameters cell, your edits and the outputs of unchanged
    cells stay; a cell both you and the script changed is kept twice, yours marked. The earlier .ipynb is kept in
    notebooks/before-refresh/<time>/ (git ignores it). A notebook open in a running Jupyter server is refused
    before anything is written. Returns the notebooks written."""
    import jupytext
    import nbformat

    todo = []
    for script in scripts(root):
        path, new = script.with_suffix(".ipynb"), jupytext.read(script)
        new.metadata.pop("jupytext", None)         # no pairing: saving the .ipynb never writes the script
        old = read_ipynb(path) if path.exists() else None
        if old is not None and merging.base_of(old) == [merging.key(c) for c in new.cells]:
            continue                               # the script is as it was made from: the differences are yours
        if old is None or (not only_missing and _code(old) != _code(new)):
            todo.append((script, path, new, old))
    busy = open_in_jupyterlab([path for _, path, _, old in todo if old is not None])
    if busy:
        named = ", ".join(f"{p.parent.name}/{p.name} ({where})" for p, where in busy.items())
        raise NotebookOpen(f"{named} open in JupyterLab: its next save would put the old code back over the refresh; "
                           "save it, close it there (File → Close and Shut Down Notebook; with no kernel: File → "
                           "Close Tab) and run `make notebooks` again")
    when, written = time.strftime("%Y-%m-%d_%H.%M.%S"), []
    for script, path, new, old in todo:
        merged = copy.deepcopy(new)
        merging.record_base(merged, new)
        merged.metadata["language_info"] = _language_info()
        if old is not None:
            cells, said = merging.merge(old.cells, new.cells, merging.base_of(old), when.replace("_", " "),
                                        script.name)
            mine = next((c for c in old.cells if _is_parameters(c)), None)
            outputs = {(c.cell_type, c.source.strip()): c for c in old.cells if c.cell_type == "code"}
            for i, cell in enumerate(cells):
                if _is_parameters(cell) and mine is not None:
                    cells[i] = copy.deepcopy(mine)
                elif cell.cell_type == "code" and not cell.get("outputs") and (cell.cell_type, cell.source.strip()) \
                        in outputs:
                    kept = outputs[(cell.cell_type, cell.source.strip())]
                    cell.outputs, cell.execution_count = kept.get("outputs", []), kept.get("execution_count")
            merged.cells = cells
            backup = path.parent / "before-refresh" / when / path.name
            backup.parent.mkdir(parents=True, exist_ok=True)
            path.rename(backup)
            log(f"{path.relative_to(script.parent.parent)}: brought up to {script.name}; "
                + "; ".join(said or ["none of your cells differed from the earlier .py"])
                + f"; your parameters cell kept; the earlier file: {backup.relative_to(script.parent.parent)}")
        nbformat.write(merged, path)
        written.append(path)
    return written


def _language_info() -> dict:
    """What JupyterLab writes into an opened notebook from its kernel's info: written beforehand, a notebook opens
    without the unsaved dot (issue 48: every notebook opened "changed"). The kernel is this environment's ipykernel."""
    try:
        from ipykernel.ipkernel import IPythonKernel
        return dict(IPythonKernel.language_info)
    except ImportError:
        return {"name": "python"}


def drift(ipynb: Path) -> list[str]:
    """The cells of a notebook whose code or text differs from its script's (the drift note names them)."""
    import jupytext
    import nbformat

    nb, script = read_ipynb(ipynb), jupytext.read(ipynb.with_suffix(".py"))
    return merging.differing([c for c in nb.cells if not _is_parameters(c)],
                             [c for c in script.cells if not _is_parameters(c)])


def save_code(ipynb: str | Path) -> Path:
    """The way a code edit made in JupyterLab goes into git: the notebook's cells (no outputs) into its
    tracked script; the script's parameters cell stays params.yaml's (the notebook's knob values do not go)."""
    import jupytext
    import nbformat

    ipynb = Path(ipynb).resolve()
    script = ipynb.with_suffix(".py")
    if ipynb.suffix != ".ipynb" or not script.exists():
        raise config.ParamsError(f"--save-code {ipynb}: expected a notebook beside its tracked script "
                                 f"(notebooks/NN_<study>.ipynb with its .py); {script} does not exist")
    tracked = jupytext.read(script)
    nb = read_ipynb(ipynb)
    params = next((c for c in tracked.cells if _is_parameters(c)), None)
    cells = []
    for cell in nb.cells:
        cell = copy.deepcopy(params) if _is_parameters(cell) and params is not None else copy.deepcopy(cell)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    tracked.cells = cells
    from jupytext.config import load_jupytext_config    # jupytext.toml's metadata filters, as the CLI applies them
    jupytext.write(tracked, script, fmt="py:percent", config=load_jupytext_config(str(script.parent)))
    if not open_in_jupyterlab([ipynb]):       # (an open one would ask "File Changed" at its next save)
        merging.record_base(nb, tracked)      # the notebook and its script agree now: the next refresh's base
        nbformat.write(nb, ipynb)
    return script


# -- JupyterLab on the project (`make lab` = `storagebrief lab`) ------------------------------------------------
TERMINAL_RC = Path(__file__).resolve().parent / "templates" / "lab-terminal.bashrc"


def lab_command(extra=(), bin_dir: str | Path | None = None) -> tuple[list[str], dict]:
    """`jupyter lab` with the server settings the notebooks' printed commands need, and its environment: this
    environment's bin folder first on PATH (kernels and consoles find `storagebrief`), and terminals that run bash
    with TERMINAL_RC instead of a login shell, whose profile rebuilt PATH without it (issue 48)."""
    bin_dir = str(bin_dir or Path(sys.executable).parent)
    env = {**os.environ, "STORAGEBRIEF_BIN": bin_dir, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    shell = json.dumps(["bash", "--rcfile", str(TERMINAL_RC), "-i"])
    command = [str(Path(bin_dir) / "jupyter"), "lab", f"--ServerApp.terminado_settings=shell_command={shell}"]
    if os.geteuid() == 0 and "--allow-root" not in extra:
        command.append("--allow-root")       # Jupyter refuses root without it; a user needs nothing extra
    return command + list(extra) + _first_notebook(extra), env


START_HERE = Path("notebooks") / "00_start_here.ipynb"


def _first_notebook(extra) -> list[str]:
    """JupyterLab opens on notebooks/00_start_here.ipynb (which study answers which question), not its Launcher
    (issue 62: a new user met a Launcher and a file list), when run from the project's root and told no other file
    or root folder."""
    chosen = any(a.endswith(".ipynb") or "root_dir" in a or "notebook_dir" in a for a in extra)
    if chosen or not (Path.cwd() / START_HERE).is_file():
        return []
    # Jupyter serves a named file's own folder unless told the root: the project's root stays the root (its
    # terminals, file browser and the notebooks' printed commands)
    return [f"--ServerApp.root_dir={Path.cwd()}", START_HERE.as_posix()]
