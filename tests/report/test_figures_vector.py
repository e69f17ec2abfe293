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


def test_a_dense_scatter_is_one_image_inside_a_vector_figure():
    f, ax = plt.subplots()
    ax.scatter(np.arange(5000), np.sin(np.arange(5000)), s=1)
    ax.set_title("LBA vs time")
    mime, body = _data(display.figure_html(f))
    assert mime == "image/svg+xml" and body.count(b"<image") == 1     # the dots: one embedded raster
    assert b"<path" in body and len(body) < 200_000                    # axes and text: still vector paths


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


def test_a_target_keeps_its_colour_in_every_figure_also_where_a_study_ran_fewer_targets():
    display.set_target_order(["local", "hdd-emulated", "nvme"])
    try:
        all_three = display.target_colors(["local", "hdd-emulated", "nvme"])
        assert display.target_colors(["hdd-emulated"])["hdd-emulated"] == all_three["hdd-emulated"]
        assert display.target_colors(["nvme", "local"]) == {"nvme": all_three["nvme"], "local": all_three["local"]}
        assert len(set(all_three.values())) == 3
        assert display.target_colors(["elsewhere"])["elsewhere"] not in all_three.values()
    finally:
        display.set_target_order([])


def test_log_axes_label_only_major_ticks_as_plain_numbers():
    f, ax = plt.subplots()
    ax.plot([610, 630, 650], [0.61, 0.62, 0.63])       # less than a decade: matplotlib would label minors
    ax.set_xscale("log")
    ax.set_yscale("log")
    display.log_axis_ticks(ax)
    f.canvas.draw()
    minor = [t.get_text() for t in ax.yaxis.get_minorticklabels() + ax.xaxis.get_minorticklabels()]
    assert not any(minor), minor
    for axis in (ax.xaxis, ax.yaxis):                   # a short axis still gets a few plain labels
        lo, hi = sorted(ax.get_xlim() if axis is ax.xaxis else ax.get_ylim())
        major = [t.get_text() for t in axis.get_majorticklabels() if t.get_text() and lo <= t.get_position()[axis is ax.yaxis] <= hi]
        assert len(major) >= 2 and all("10^" not in m and "×" not in m and "$" not in m for m in major), major
    plt.close(f)


def test_a_chapters_key_figure_stays_vector_and_an_appendix_figure_is_an_image(monkeypatch):
    """The PDF printer draws an SVG figure glyph by glyph (half the quick brief's render time): the appendices'
    figures, printed small, go as 150-dpi images; the one figure a chapter keeps stays SVG."""
    import matplotlib.pyplot as plt

    def fig():
        f, ax = plt.subplots(figsize=(3, 2))
        ax.plot([1, 2, 3], [2, 1, 3])
        return f
    shown = []
    monkeypatch.setattr(display, "show_html", shown.append)
    a = display.Appendix("D", "x", "appendix-x")
    with display.details_to(a):
        display.show_figure(fig(), "key")
        display.show_figure(fig(), "second")
        display.show_figure(fig(), "detail", detail=True)
    assert _data(shown[0])[0] == "image/svg+xml"
    assert [_data(text)[0] for _, text in a.items] == ["image/png", "image/png"]
    display.show_figure(fig(), "a notebook's own")            # outside a brief: as before, vector
    assert _data(shown[-1])[0] == "image/svg+xml"
