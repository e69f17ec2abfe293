"""Figures in the brief are vector (SVG) unless they draw too many marks; an SVG figure stays vector in
the PDF (no raster image in it)."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from storagebrief.report import display  # noqa: E402


def _data(html: str) -> tuple[str, bytes]:
    mime, data = re.search(r'src="data:([^;]+);base64,([^"]+)"', html).groups()
    return mime, base64.b64decode(data)


def test_a_line_figure_is_svg_and_the_same_bytes_twice():
    def fig():
        f, ax = plt.subplots()
        ax.plot([1, 2, 4, 8], [10, 20, 15, 30], marker="o", label="local")
        ax.set_xscale("log")
        ax.legend()
        return f
    one, two = display.figure_html(fig(), "a"), display.figure_html(fig(), "a")
    mime, body = _data(one)
    assert mime == "image/svg+xml" and body.lstrip().startswith(b"<?xml") and b"<svg" in body
    assert one == two                                   # no date or random ids: a rerun diffs clean


def test_a_figure_with_many_marks_stays_raster():
    f, ax = plt.subplots()
    ax.scatter(np.arange(display.VECTOR_MAX_POINTS + 1), np.zeros(display.VECTOR_MAX_POINTS + 1), s=1)
    mime, body = _data(display.figure_html(f))
    assert mime == "image/png" and body.startswith(b"\x89PNG")


@pytest.mark.skipif(shutil.which("pdfimages") is None, reason="poppler-utils (pdfimages) not installed")
def test_an_svg_figure_is_vector_in_the_pdf(tmp_path):
    weasyprint = pytest.importorskip("weasyprint")
    f, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    page = f"<html><body>{display.figure_html(f, 'vector')}</body></html>"
    pdf = tmp_path / "f.pdf"
    weasyprint.HTML(string=page).write_pdf(str(pdf))
    images = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True).stdout
    assert len(images.strip().splitlines()) == 2, images    # the header lines only: no raster image
    assert pdf.stat().st_size > 1000
