"""Small shared pieces every brief section is built from: HTML, markdown, tables, figures, analysis."""
from __future__ import annotations

import html

import pandas as pd


def show_html(text: str) -> None:
    from IPython.display import HTML, display
    display(HTML(text))


def show_md(text: str) -> None:
    from IPython.display import Markdown, display
    display(Markdown(text))


LONG_TABLE_ROWS = 25


def show_table(frame: pd.DataFrame, caption: str = "", floatfmt: str = "{:,.1f}") -> None:
    # numbers in the columns after the first: keep each on one line (long text elsewhere may wrap anywhere)
    numeric = len(frame.columns) > 1 and all(pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns[1:])
    body = frame.to_html(index=False, classes="brief-table numeric" if numeric else "brief-table", border=0,
                         na_rep="–", float_format=lambda v: floatfmt.format(v))
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    # a table longer than a page may break across pages (else it leaves its heading alone on a page)
    wrap = "table-wrap long" if len(frame) > LONG_TABLE_ROWS else "table-wrap"
    show_html(f'<div class="{wrap}">{body}{cap}</div>')


VECTOR_MAX_POINTS = 20_000   # a figure drawing more marks than this stays raster (an SVG of it is slow and huge)


def _marks(fig) -> int:
    """Points and vertices the figure draws (scatter offsets, line vertices, image pixels count as many)."""
    n = 0
    for ax in fig.axes:
        n += sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
        n += sum(len(line.get_xdata()) for line in ax.lines)
        n += sum(VECTOR_MAX_POINTS for _ in ax.images)
    return n


def figure_html(fig, caption: str = "") -> str:
    """The figure as an inline image: SVG (vector: sharp when zoomed, in the HTML and the PDF; text as
    paths, so no font is needed), or PNG at 150 dpi when it draws more than VECTOR_MAX_POINTS marks."""
    import base64
    import io
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    vector = _marks(fig) <= VECTOR_MAX_POINTS
    with plt.rc_context({"svg.fonttype": "path", "svg.hashsalt": "storagebrief"}):   # reproducible ids
        fig.savefig(buf, format="svg" if vector else "png", dpi=150, bbox_inches="tight",
                    metadata={"Date": None} if vector else None)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    mime = "image/svg+xml" if vector else "image/png"
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return f'<figure><img src="data:{mime};base64,{data}" alt="{html.escape(caption)}"/>{cap}</figure>'


def show_figure(fig, caption: str = "") -> None:
    show_html(figure_html(fig, caption))


_TARGET_ORDER: list[str] = []      # every target of the brief, in params order (set by the cover)


def set_target_order(names: list[str]) -> None:
    """The brief's targets in params order: each keeps its colour in every study's figures, also where a
    study ran only some of them."""
    _TARGET_ORDER[:] = list(dict.fromkeys(names))


def target_colors(names: list[str]) -> dict:
    """One colour per target (seaborn's colour-blind-safe palette), the same in every figure of the
    brief: by position in the brief's target order, then in `names`."""
    import seaborn as sns
    order = _TARGET_ORDER + [n for n in names if n not in _TARGET_ORDER]
    palette = sns.color_palette("colorblind", max(len(order), 3))
    return {n: palette[order.index(n) % len(palette)] for n in names}


def _decade_ticks_in(lo: float, hi: float) -> int:
    """How many of 1, 2, 5 × 10^k fall in [lo, hi]."""
    import math
    if lo <= 0 or hi <= lo:
        return 0
    return sum(1 for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
               for m in (1, 2, 5) if lo <= m * 10 ** k <= hi)


def log_axis_ticks(ax, which: str = "both") -> None:
    """Log axes with a few labelled ticks as plain numbers (1, 2, 5 × 10^k; on an axis spanning less than
    that, evenly spaced values), minor ticks unlabelled: matplotlib labels minors on a short log axis,
    and they print on top of each other ("6.1 × 10⁻¹6.2 × 10⁻¹…")."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    from .formatting import significant
    plain = FuncFormatter(lambda v, _: significant(v))
    for name in ("x", "y") if which == "both" else (which,):
        axis = ax.xaxis if name == "x" else ax.yaxis
        lo, hi = sorted(ax.get_xlim() if name == "x" else ax.get_ylim())
        if _decade_ticks_in(lo, hi) < 2:
            axis.set_major_locator(MaxNLocator(nbins=4))
        else:      # 1, 2, 5 per decade over two decades or less; beyond, the decades alone
            wide = lo > 0 and hi / lo > 100
            axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0), numticks=10))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())


def style() -> None:
    import matplotlib
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    matplotlib.rcParams.update({"figure.figsize": (7.2, 3.4), "axes.titlesize": 11})


def fmt_s(seconds: float) -> str:
    """A duration in the unit a reader takes in at a glance."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def analysis(lines: list[str], title: str = "Analysis", tail: str = "") -> None:
    """The generated analysis paragraph: a bold title, one bullet per finding, closing text."""
    body = "\n".join(lines)
    show_md(f"**{title}.**\n\n{body}" + (f"\n\n{tail}" if tail else ""))


def limits_box(warnings: list[str]) -> None:
    """'Limits of this run': everything that was degraded or not applied, said once each."""
    items = list(dict.fromkeys(warnings))
    if items:
        show_html('<div class="warn"><b>Limits of this run</b><ul>' +
                  "".join(f"<li>{html.escape(w)}</li>" for w in items) + "</ul></div>")
