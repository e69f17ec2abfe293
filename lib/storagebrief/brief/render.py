"""Render the brief: execute notebooks/brief.py (Jupytext), export HTML without code, print it to PDF."""
from __future__ import annotations

import html
import os
import re
from pathlib import Path

from ..core import results
from .assemble import snapshot_headlines

CSS = Path(__file__).resolve().parents[1] / "templates" / "brief.css"
# The notebook beside this code (lib/storagebrief/brief -> repository root), for a project folder without one.
PACKAGE_NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "brief.py"


# The HTML's long tables sort by a click on a column's header: numbers as numbers ("1,234.5", "12 %"; a number
# with a unit is text), before text; a second click reverses. Inline, so the page still opens with no network.
SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      var key = function (r) { var t = r.cells[col] ? r.cells[col].textContent.trim() : '';
        var c = t.replace(/[,%\\s]/g, '').replace('\\u2212', '-'), n = Number(c);
        return (c === '' || isNaN(n)) ? t : n; };
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        if (typeof x === typeof y) { return (x < y ? -1 : x > y ? 1 : 0) * dir; }
        return (typeof x === 'number' ? -1 : 1) * dir; });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def brief_notebook(project_dir: str | Path) -> Path:
    """The project's notebooks/brief.py (Jupytext; what DVC tracks), else the one beside this code."""
    own = Path(project_dir) / "notebooks" / "brief.py"
    return own if own.is_file() else PACKAGE_NOTEBOOK


def _slug(text: str, seen: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", html.unescape(text).lower()).strip("-")[:60] or "section"
    slug, i = base, 2
    while slug in seen:
        slug, i = f"{base}-{i}", i + 1
    seen.add(slug)
    return slug


def with_contents(body: str) -> str:
    """The body with an id on every top-level heading (h2) and a table of contents linking them, below the title
    (in the HTML; the PDF has its bookmarks instead, so print hides it)."""
    seen = set(re.findall(r'<h2[^>]*\bid="([^"]+)"', body))
    entries = []

    def anchor(m: re.Match) -> str:
        attrs, text = m.group(1), m.group(2)
        found = re.search(r'\bid="([^"]+)"', attrs)
        ident = found.group(1) if found else _slug(re.sub(r"<[^>]+>", "", text), seen)
        entries.append((ident, re.sub(r"<[^>]+>", "", text).strip(), "appendix" in attrs))
        return m.group(0) if found else f'<h2{attrs} id="{ident}">{text}</h2>'
    body = re.sub(r"<h2([^>]*)>(.*?)</h2>", anchor, body, flags=re.S)
    items = "".join(f'<li class="{"toc-appendix" if app else "toc-section"}"><a href="#{i}">{t}</a></li>'
                    for i, t, app in entries)
    nav = f'<nav class="toc" id="contents"><p class="toc-title">Contents</p><ol>{items}</ol></nav>'
    title = body.find("</h1>")          # below the title (and the cover it opens), not above it
    at = body.find("<h2", title) if title >= 0 else -1
    return body[:at] + nav + body[at:] if at >= 0 else nav + body


def relinked(body: str, reports_dir: Path, out_dir: Path) -> str:
    """The body's relative links (an appendix's CSV files: `<study>/runs.csv`, beside the studies' folders) made
    relative to a brief written elsewhere (`storagebrief brief --out`)."""
    def fix(m: re.Match) -> str:
        target = html.unescape(m.group(1))
        if not target or target.startswith(("#", "/")) or re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            return m.group(0)
        return f'href="{html.escape(os.path.relpath(reports_dir / target, out_dir))}"'
    return re.sub(r'href="([^"]*)"', fix, body)


def check_layout(pdf_path: Path, html_path: Path, params_file: Path, log=print) -> dict:
    """The PDF's layout checks (report/layout.py), said on the terminal: a problem is a warning here,
    a failure in tests/brief/test_brief_layout.py."""
    from ..core import config as config_mod
    from ..report import layout
    targets = [t.name for t in config_mod.load(params_file, check_targets=False).targets]
    has_answer = "Accelerators supported" in html_path.read_text()     # only when the emulate study ran
    found = layout.check(pdf_path, html_path, targets if has_answer else [])
    if "pages" in found:
        log(f"brief.pdf: {found['pages']} pages, body {found['body_pages']} (before the first appendix)")
    from .scorecard import numbers_not_in_chapters
    found["page1_numbers"] = numbers_not_in_chapters(html_path.read_text())
    for problem in layout.problems(found) + found["page1_numbers"] + ([found["skipped"]] if "skipped" in found else []):
        log(f"brief layout: {problem}")
    return found


def render(reports_dir: str | Path = "reports", params_file: str | Path = "params.yaml",
           notebook: str | Path | None = None, pdf: bool = True, log=print, out_dir: str | Path | None = None) -> dict:
    """Execute the brief notebook, export HTML without code, print it to PDF.

    Relative paths are the caller's (current directory); the kernel gets absolute ones, so where it
    starts does not matter. The notebook defaults to the one of the project params_file lies in. The brief's files
    (brief.ipynb, brief.html, brief.pdf, headlines.json) go to out_dir (checked by the caller), else beside the
    results; the page-1 history is the results' project's either way."""
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    import jupytext

    reports_dir = Path(reports_dir).resolve()
    params_file = Path(params_file).resolve()
    if not reports_dir.is_dir():
        raise FileNotFoundError(f"no reports folder at {reports_dir}: run the studies first (dvc repro)")
    notebook = Path(notebook) if notebook else brief_notebook(params_file.parent)
    out_dir = Path(out_dir).resolve() if out_dir else reports_dir
    executed = out_dir / "brief.ipynb"
    source = jupytext.read(notebook) if notebook.suffix == ".py" else str(notebook)
    papermill.execute_notebook(source, str(executed), progress_bar=False,
                               parameters={"reports_dir": str(reports_dir), "params_file": str(params_file)})
    nb = nbformat.read(executed, as_version=4)
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb)
    body = with_contents(body)
    if out_dir != reports_dir:
        body = relinked(body, reports_dir, out_dir)
    from ..core import config as config_mod
    from ..report.words import reader_html
    names = frozenset(t.name for t in config_mod.load(params_file, check_targets=False).targets)
    body = reader_html(body, keep=names)          # reader words for internal keys (outside code and Appendix B)
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Storage performance brief</title>"
            f"<style>{CSS.read_text()}</style></head><body><main>{body}</main><script>{SORT_SCRIPT}</script>"
            "</body></html>")
    html_path = out_dir / "brief.html"
    results.atomic_write_text(html_path, page)
    out = {"html": str(html_path), "pdf": None, "pdf_error": None}
    if pdf:
        pdf_path = out_dir / "brief.pdf"
        try:
            from weasyprint import HTML
            HTML(string=page, base_url=str(out_dir)).write_pdf(str(pdf_path))
            out["pdf"] = str(pdf_path)
        except Exception as exc:  # missing system libraries: HTML still stands
            out["pdf_error"] = f"{type(exc).__name__}: {exc}"
            log(f"brief.pdf not rendered: {out['pdf_error']}")
        if out["pdf"]:
            out["layout"] = check_layout(pdf_path, html_path, params_file, log)
    try:        # after the render: this brief's ranges hold earlier studies, the next one's hold this one too
        from .pageone import record_history
        out["history_rows"] = record_history(reports_dir)
    except Exception as exc:  # noqa: BLE001 - the brief stands without its history
        from ..kit.history import UnsafeHistory, location
        why = str(exc) if isinstance(exc, UnsafeHistory) else f"{type(exc).__name__}: {exc}"
        log(f"brief: page-1 values not recorded in {location(reports_dir)}: {why}")
    headlines, left_out = snapshot_headlines(reports_dir, survive=True)
    results.write_json(out_dir / "headlines.json", headlines)
    # Said on the terminal too: a brief with a part that could not be read or rendered is still written.
    out["problems"] = [f"{title}: {why}" for title, why in left_out]
    out["problems"] += [html.unescape(f"{what} could not be rendered: {why}")
                        for what, why in re.findall(r"<b>([^<]*) could not be rendered</b>: ([^<]*)", body)]
    for p in out["problems"]:
        log(f"brief: {p}")
    return out
