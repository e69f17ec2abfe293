"""The performance brief: headline deltas, study sections, appendices, HTML + PDF.

The brief is a notebook (notebooks/brief.ipynb) executed by papermill; every
cell calls into this module, which reads the studies' runs.csv files. nbconvert
turns the executed notebook into HTML with all code hidden; WeasyPrint prints
that HTML to PDF. Each study module provides TITLE, headlines(frame, targets)
and brief_section(study_dir, frame, targets); this module knows the list.
"""
from __future__ import annotations

import html
import importlib
import json
import math
import os
from pathlib import Path

import pandas as pd

from . import config as config_mod, results

# (study key, module, section title): the order sections appear in the brief.
STUDIES = [
    ("preprocess", "storagebrief.preprocess", "Preprocessing ingest: TIFF → resize → TFRecord"),
    ("emulate", "storagebrief.emulate", "Emulated-accelerator training (DLIO / MLPerf Storage style)"),
    ("train_resnet50", "storagebrief.train_resnet50", "ResNet50 training under memory limits"),
]
CSS = Path(__file__).with_name("templates") / "brief.css"


# --------------------------------------------------------------------------- headline arithmetic
def compare(frame: pd.DataFrame, metric: str, better: str, keys: list[str], ref: str, other: str,
            label: str) -> dict:
    """How much better `ref` is than `other` on `metric`, at best, over matched configurations.

    Means over repeats per configuration; delta % = (ref/other - 1) * 100 when higher
    is better, (1 - ref/other) * 100 when lower is better. 'Up to' = the maximum.
    """
    means = frame.groupby(keys + ["target"], dropna=False)[metric].mean().unstack("target")
    hid = f"{metric}:{ref}_vs_{other}"
    base = {"id": hid, "label": label, "metric": metric, "better": better, "ref": ref, "other": other}
    if ref not in means or other not in means:
        return {**base, "delta_percent": None, "at": {}, "configurations": 0,
                "text": f"{ref} vs {other}: no matched runs"}
    pair = means[[ref, other]].dropna()
    pair = pair[(pair[other] > 0) & (pair[ref] > 0)]
    if pair.empty:
        return {**base, "delta_percent": None, "at": {}, "configurations": 0,
                "text": f"{ref} vs {other}: no matched runs"}
    ratio = pair[ref] / pair[other]
    delta = (ratio - 1) * 100 if better == "higher" else (1 - ratio) * 100
    at = delta.idxmax()
    value = float(delta.max())
    at_dict = dict(zip(keys, at if isinstance(at, tuple) else (at,)))
    word = "higher" if better == "higher" else "lower"
    if value > 0:
        text = f"up to {value:.1f}% {word}"
    else:
        text = f"never {word} (best case {value:+.1f}%)"
    return {**base, "delta_percent": round(value, 1), "at": {k: _plain(v) for k, v in at_dict.items()},
            "configurations": int(len(pair)), "text": text}


def versus_reference(frame: pd.DataFrame, target_names: list[str], keys: list[str],
                     metrics: list[tuple[str, str, str]]) -> list[dict]:
    """compare() of the first (reference) target with each other one, per (metric, better, label).

    Metrics missing from the frame are left out. Every study's headlines() is this call.
    """
    return [compare(frame, metric, better, keys, target_names[0], other, label)
            for other in target_names[1:] for metric, better, label in metrics if metric in frame]


def _plain(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    return v.item() if hasattr(v, "item") else v


def study_module(key: str):
    return importlib.import_module(dict((k, m) for k, m, _ in STUDIES)[key])


def available(reports_dir: str | Path) -> list[tuple[str, str, Path]]:
    out = []
    for key, _, title in STUDIES:
        d = Path(reports_dir) / key
        if (d / "runs.csv").exists():
            out.append((key, title, d))
    return out


def target_order(study_dir: Path, frame: pd.DataFrame) -> list[str]:
    """Targets in params order (the first is the reference), from the run's inventory."""
    inv = study_dir / "inventory.json"
    if inv.exists():
        names = [t["name"] for t in json.loads(inv.read_text()).get("targets", [])]
        names = [n for n in names if n in set(frame.target)]
        if names:
            return names
    return list(dict.fromkeys(frame.target))


def all_headlines(reports_dir: str | Path) -> list[dict]:
    out = []
    for key, title, d in available(reports_dir):
        frame = results.read_runs(d / "runs.csv")
        for h in study_module(key).headlines(frame, target_order(d, frame)):
            out.append({**h, "study": key, "study_title": title})
    return out


# --------------------------------------------------------------------------- notebook display helpers
def show_html(text: str) -> None:
    from IPython.display import HTML, display
    display(HTML(text))


def show_md(text: str) -> None:
    from IPython.display import Markdown, display
    display(Markdown(text))


def show_table(frame: pd.DataFrame, caption: str = "", floatfmt: str = "{:,.1f}") -> None:
    body = frame.to_html(index=False, classes="brief-table", border=0, na_rep="–",
                         float_format=lambda v: floatfmt.format(v))
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    show_html(f'<div class="table-wrap">{body}{cap}</div>')


def show_figure(fig, caption: str = "") -> None:
    import base64
    import io
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    show_html(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}"/>{cap}</figure>')


def style() -> None:
    import matplotlib
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="notebook", palette="deep")
    matplotlib.rcParams.update({"figure.figsize": (7.2, 3.4), "axes.titlesize": 11})


# --------------------------------------------------------------------------- brief sections
def title_block(reports_dir: str | Path, params_file: str | Path) -> None:
    params = config_mod.load(params_file)
    studies = [t for _, t, _ in available(reports_dir)]
    inv = _latest_inventory(reports_dir)
    targets = ", ".join(f"<b>{html.escape(t['name'])}</b>" + (f" (emulated {html.escape(t['profile_name'])})"
                                                             if t.get("profile_name") else "")
                        for t in inv.get("targets", []))
    show_html(
        '<div class="cover"><h1>Storage performance brief</h1>'
        f'<p class="subtitle">How storage shapes AI pipelines on <b>{html.escape(inv.get("cpu_model", "this machine"))}</b>'
        f' — scale <b>{params.scale}</b>, targets {targets}</p>'
        f'<p class="meta">Studies: {html.escape("; ".join(studies)) or "none"}. Commit {html.escape(inv.get("git_commit", "?"))},'
        f' params {html.escape(inv.get("params_hash", "?"))}. Every figure below is computed from the runs.csv '
        'files the studies wrote; the appendices list the system and the parameters that ran.</p></div>')
    rows = []
    for t in inv.get("targets", []):
        dev, prof = t.get("device") or {}, t.get("profile") or {}
        rows.append({"Target": t["name"], "Directory": t["path"],
                     "Device": f'{dev.get("name")} ({dev.get("model")}, {"rotational" if dev.get("rotational") else "non-rotational"})'
                     if dev.get("name") else "unresolved",
                     "Emulated device": (f'{t["profile_name"]}: read ≤ {prof.get("read_mb_per_s") or "∞"} MB/s, '
                                         f'≤ {prof.get("read_iops") or "∞"} IOPS') if prof else "none (as is)"})
    if rows:
        show_table(pd.DataFrame(rows), "Storage targets compared in this brief (details in Appendix A).")


def snapshot(reports_dir: str | Path) -> None:
    hs = all_headlines(reports_dir)
    if not hs:
        show_md("No study results yet: run `dvc repro` or `storagebrief <study>` first.")
        return
    groups: dict[str, list[str]] = {}
    for h in hs:
        word = h.get("hint") or ("higher is better" if h["better"] == "higher" else "lower is better")
        groups.setdefault(h["study_title"], []).append(
            f'<div class="card" data-study="{h["study"]}" data-headline="{html.escape(h["id"])}" '
            f'data-value="{h["delta_percent"]}">'
            f'<div class="card-label">{html.escape(h["label"])}<br/><span class="hint">({word})</span></div>'
            f'<div class="card-value">{html.escape(h["text"])}</div>'
            f'<div class="card-pair">{html.escape(h["ref"])} vs {html.escape(h["other"])}</div></div>')
    body = "".join(f'<h3 class="snap-study">{html.escape(title)}</h3><div class="cards">{"".join(cards)}</div>'
                   for title, cards in groups.items())
    show_html('<h2>Test results snapshot</h2><p>Reference target compared with each other target (for '
              'training, also each memory limit with no limit on the same target); "up to" is the largest '
              'difference over the configurations both ran (means over repeats).</p>' + body)


def study_section(key: str, study_dir: str | Path) -> None:
    """A study's brief section from its output directory (also used by its notebook)."""
    d = Path(study_dir)
    title = dict((k, t) for k, _, t in STUDIES)[key]
    show_html(f'<h2 class="section">{html.escape(title)}</h2>')
    frame = results.read_runs(d / "runs.csv")
    study_module(key).brief_section(d, frame, target_order(d, frame))
    notes = d / "notes.json"
    warnings = json.loads(notes.read_text()).get("warnings", []) if notes.exists() else []
    # Only cache.cold_cache's fallbacks are degradations; a study may choose a method by design.
    methods = sorted(m for m in set(frame.cache_method.astype(str)) if m == "fadvise_dontneed" or m.startswith("none"))
    if methods:
        warnings.append(f"cold cache by {', '.join(methods)} instead of drop_caches (needs root): files the "
                        "run reads were evicted, other cached data (metadata, libraries) was not")
    if warnings:
        show_html('<div class="warn"><b>Limits of this run</b><ul>' +
                  "".join(f"<li>{html.escape(w)}</li>" for w in warnings) + "</ul></div>")


def _latest_inventory(reports_dir) -> dict:
    found = sorted(Path(reports_dir).glob("*/inventory.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else {}


def appendix_configuration(reports_dir: str | Path) -> None:
    inv = _latest_inventory(reports_dir)
    if not inv:
        return
    gib = inv["memory_total_bytes"] / 2**30
    rows = [("CPU model", inv["cpu_model"]), ("Sockets", inv["cpu_sockets"]),
            ("Cores (physical / threads)", f'{inv["cpu_cores_physical"]} / {inv["cpu_threads"]}'),
            ("Memory", f"{gib:.1f} GiB"), ("Operating system", inv["os"]), ("Kernel", inv["kernel"]),
            ("Python", inv["python"]), ("Git commit", inv["git_commit"]), ("Params hash", inv["params_hash"])]
    rows += [(f"Privilege: {k}", v) for k, v in inv.get("privileges", {}).items()]
    show_html('<h2 class="appendix">Appendix A — System configuration</h2>')
    show_table(pd.DataFrame(rows, columns=["Item", "Value"]))
    trows = []
    for t in inv.get("targets", []):
        dev = t.get("device") or {}
        prof = t.get("profile") or {}
        caps = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in prof.items()
                         if k != "description" and v) if prof else "none (device as is)"
        trows.append({"Target": t["name"], "Path": t["path"],
                      "Device": f'{dev.get("name")} ({dev.get("model")})' if dev.get("name") else dev.get("reason", "?"),
                      "Rotational": dev.get("rotational"), "Interface": dev.get("interface"),
                      "Filesystem": t["filesystem"], "Mount options": t["mount_options"],
                      "Emulated profile": (t.get("profile_name") or "–") + (f": {caps}" if prof else "")})
    show_table(pd.DataFrame(trows), "Storage targets. Emulated profiles cap the device with cgroup blkio throttling.")
    pk = inv.get("packages", {})
    show_table(pd.DataFrame(sorted(pk.items()), columns=["Package", "Version"]), "Software versions")


def appendix_procedure(reports_dir: str | Path, params_file: str | Path) -> None:
    import yaml
    params = config_mod.load(params_file)
    show_html('<h2 class="appendix">Appendix B — Test procedure and parameters</h2>')
    show_md(
        "Each study ran from `params.yaml` through its DVC stage (papermill executes the numbered "
        "notebook, which calls `storagebrief`). Before every measured run the page cache was made cold "
        "(the method is the `cache_method` column of runs.csv); device counters and CPU were sampled "
        f"every {params.run.monitor_interval_s} s while the run was in flight. Runs repeat and "
        "interleave targets so drift affects all targets alike. The parameters that ran:")
    text = yaml.safe_dump(config_mod.raw_params(params), sort_keys=False)
    show_html(f"<pre class='params'>{html.escape(text)}</pre>")


# --------------------------------------------------------------------------- rendering
def render(reports_dir: str | Path = "reports", params_file: str | Path = "params.yaml",
           notebook: str | Path | None = None, pdf: bool = True, log=print) -> dict:
    """Execute the brief notebook, export HTML without code, print it to PDF."""
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    reports_dir = Path(reports_dir)
    notebook = Path(notebook or Path("notebooks") / "brief.ipynb")
    executed = reports_dir / "brief.ipynb"
    papermill.execute_notebook(str(notebook), str(executed), progress_bar=False,
                               parameters={"reports_dir": str(reports_dir), "params_file": str(params_file)})
    nb = nbformat.read(executed, as_version=4)
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb)
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Storage performance brief</title>"
            f"<style>{CSS.read_text()}</style></head><body><main>{body}</main></body></html>")
    html_path = reports_dir / "brief.html"
    results.atomic_write_text(html_path, page)
    out = {"html": str(html_path), "pdf": None, "pdf_error": None}
    if pdf:
        pdf_path = reports_dir / "brief.pdf"
        try:
            from weasyprint import HTML
            HTML(string=page, base_url=str(reports_dir.resolve())).write_pdf(str(pdf_path))
            out["pdf"] = str(pdf_path)
        except Exception as exc:  # missing system libraries: HTML still stands
            out["pdf_error"] = f"{type(exc).__name__}: {exc}"
            log(f"brief.pdf not rendered: {out['pdf_error']}")
    results.write_json(reports_dir / "headlines.json", all_headlines(reports_dir))
    return out
