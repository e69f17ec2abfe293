"""Render the brief: execute notebooks/brief.py (Jupytext), export HTML without code, print it to PDF."""
from __future__ import annotations

from pathlib import Path

from ..core import results
from .brief import all_headlines

CSS = Path(__file__).resolve().parents[1] / "templates" / "brief.css"


def render(reports_dir: str | Path = "reports", params_file: str | Path = "params.yaml",
           notebook: str | Path | None = None, pdf: bool = True, log=print) -> dict:
    """Execute the brief notebook, export HTML without code, print it to PDF."""
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    import jupytext

    reports_dir = Path(reports_dir)
    # the brief notebook of the project whose params these are (any working directory)
    notebook = Path(notebook or Path(params_file).resolve().parent / "notebooks" / "brief.py")
    executed = reports_dir / "brief.ipynb"
    source = jupytext.read(notebook) if notebook.suffix == ".py" else str(notebook)
    papermill.execute_notebook(source, str(executed), progress_bar=False,
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
