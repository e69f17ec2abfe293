"""Small shared pieces every brief section is built from: HTML, markdown, tables, figures, analysis.

Escaping is a rule here, not a habit of each caller: every string a user can name (targets, workloads, shapes,
videos, buckets, failure reasons quoting them) reaches the page through one of three doors, each of which escapes
it — show_md (markdown rendered with raw HTML escaped: markdown never carries HTML), show_table / table_html
(cells and captions escaped) and figure captions. show_html takes HTML this package builds itself (brief/
assemble.py, brief/characterization.py, here), every value in it through html.escape; no study calls it
(tests/brief/test_escaping.py holds both, and renders a brief whose every named knob is markup)."""
from __future__ import annotations

import html
import re
from contextlib import contextmanager

import pandas as pd

from . import words


def show_html(text: str, detail: bool = False) -> None:
    """HTML this package built, every value in it through html.escape; text from elsewhere goes through show_md.
    detail=True: to the open appendix inside details_to(), as show_md's."""
    if detail and _DETAILS:
        _DETAILS[-1].items.append(("html", text))
        return
    from IPython.display import HTML, display
    display(HTML(text))


_MARKDOWN = None


def markdown_html(text: str) -> str:
    """Markdown as HTML with any raw HTML in it escaped: a name holding `<script>` shows as text. The same
    markdown flavour nbconvert renders (tables, strikethrough, bare URLs); harmful link schemes are dropped."""
    global _MARKDOWN
    if _MARKDOWN is None:
        import mistune
        _MARKDOWN = mistune.create_markdown(escape=True, plugins=["strikethrough", "table", "url"])
    return _MARKDOWN(text)


def show_md(text: str, detail: bool = False) -> None:
    """Markdown on the page; detail=True: to the study's appendix inside details_to() (text that
    explains a detail table). In a brief's chapter the first paragraph stays (what the study measures), the
    others follow in its appendix (CHAPTER_KEEPS)."""
    if _DETAILS and (detail or not _chapter_keeps("text")):
        _DETAILS[-1].items.append(("md", text))
        return
    show_html(markdown_html(text))


LONG_TABLE_ROWS = 6    # more rows may break across pages (rows stay whole, the header repeats): a tall table
                      # pushed whole to the next page left the page before it mostly empty (layout test)


class Appendix:
    """Where a study's detail tables go in the brief: its own appendix section (letter, title, anchor),
    filled while the study's body section renders and shown after the shared appendices."""

    def __init__(self, letter: str, title: str, anchor: str):
        self.letter, self.title, self.anchor = letter, title, anchor
        self.items: list[tuple[str, str]] = []      # ("html" | "md", text), in order
        self.kept = {"figure": 0, "table": 0, "text": 0, "analysis": 0}   # what its chapter showed (CHAPTER_KEEPS)

    def show(self) -> None:
        show_html(f'<h2 class="appendix" id="{self.anchor}">{html.escape(self.heading())}</h2>')
        for kind, text in self.items:
            (show_md if kind == "md" else show_html)(text)

    def heading(self) -> str:
        return f"Appendix {self.letter} — {self.title}"

    def take_all(self) -> None:
        """Everything shown inside details_to(self) goes here: a section with no result of its own in the body
        moves to its appendix whole (issue 62: a heading whose section was only a pointer to its appendix)."""
        self.kept = {**CHAPTER_KEEPS, "analysis": 1}


_DETAILS: list[Appendix] = []       # the open appendix (at most one) while a body section renders


@contextmanager
def details_to(appendix: Appendix | None):
    """While open, show_table (and show_figure(..., detail=True)) add to `appendix` instead of the page:
    the brief's body keeps text, key figures and analysis; None (a study's own notebook) shows all inline."""
    if appendix is None:
        yield None
        return
    _DETAILS.append(appendix)
    try:
        yield appendix
    finally:
        _DETAILS.remove(appendix)


# A chapter of the brief keeps its first key figure and its first key table (issue 49: one short chapter per
# study, "the one figure that shows it, one compact table"); the others a study marks key go to its appendix.
CHAPTER_KEEPS = {"figure": 1, "table": 1, "text": 1}


def _chapter_keeps(kind: str) -> bool:
    """Count one more `kind` for the open chapter: whether it stays in the body."""
    a = _DETAILS[-1]
    a.kept[kind] += 1
    return a.kept[kind] <= CHAPTER_KEEPS[kind]


def _place(text: str, body: bool, kind: str = "") -> None:
    if _DETAILS and body and kind:
        body = _chapter_keeps(kind)
    if _DETAILS and not body:     # an appendix figure prints smaller (brief.css): the appendices' page budget
        _DETAILS[-1].items.append(("html", text.replace("<figure>", '<figure class="detail">', 1)))
    else:
        show_html(text)


_BREAKS_INSIDE = re.compile(r"[^\s<>]*[^\s<>][-/‐–][^\s<>]+")   # hdd-emulated, MB/s, llama3-8b


def wrap_at_spaces_only(table: str) -> str:
    """A cell's lines break at spaces only: a word a browser would break after its hyphen or slash
    ("hdd-" / "emulated", "MB/" / "s") is kept whole (span.nw: white-space: nowrap). Text is unchanged."""
    return re.sub(r">([^<]+)<", lambda m: ">" + _BREAKS_INSIDE.sub(lambda w: f'<span class="nw">{w.group(0)}</span>',
                                                                  m.group(1)) + "<", table)


# The printed page's width for a table (A4 less the margins: 182 mm) and what a column takes of it at the tables'
# 8 pt: ~4.3 pt a character of its longest unbreakable word (header or cell) plus 12 pt of padding. Fitted on the
# Kafka pipeline table, whose 11 first columns fit and whose 12th did not; a wider table lost its right-hand
# columns in the PDF without a word (report/layout.py's clipped-cells check now finds that).
PAGE_WIDTH_PT, CHAR_PT, PAD_PT = 500.0, 4.3, 12.0


def _column_pt(frame: pd.DataFrame, col, floatfmt: str) -> float:
    def text(v) -> str:
        if isinstance(v, float):
            return "–" if v != v else floatfmt.format(v)
        return str(v)
    words = str(col).split() + [w for v in frame[col] for w in (text(v).split() or [""])]
    return CHAR_PT * max(map(len, words), default=1) + PAD_PT


def column_parts(frame: pd.DataFrame, floatfmt: str = "{:,.1f}") -> list[pd.DataFrame]:
    """The table as page-wide parts: the leading columns that tell its rows apart (up to four, within half the
    page) repeat in each part, the others follow in order while they fit PAGE_WIDTH_PT. One part when the whole
    table fits."""
    cols = list(frame.columns)
    if len(cols) < 3:
        return [frame]
    width = {c: _column_pt(frame, c, floatfmt) for c in cols}
    if sum(width.values()) <= PAGE_WIDTH_PT:
        return [frame]
    keys = cols[:1]
    for k in range(1, min(4, len(cols) - 1) + 1):
        if sum(width[c] for c in cols[:k]) > PAGE_WIDTH_PT / 2:
            break
        keys = cols[:k]
        if not frame[keys].astype(str).duplicated().any():
            break
    key_pt = sum(width[c] for c in keys)
    parts, part = [], []
    for c in cols[len(keys):]:
        if part and key_pt + sum(width[x] for x in part) + width[c] > PAGE_WIDTH_PT:
            parts.append(part)
            part = []
        part.append(c)
    parts.append(part)
    return [frame[[*keys, *p]] for p in parts]


def table_html(frame: pd.DataFrame, caption: str = "", floatfmt: str = "{:,.1f}") -> str:
    parts = column_parts(frame, floatfmt)
    if len(parts) > 1:
        caption = (caption + " " if caption else "") + (f"(In {len(parts)} parts to fit the page; the columns that "
                                                         "name a row repeat.)")
    body = "".join(_one_table(p, floatfmt) for p in parts)
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    # a table longer than a page may break across pages (else it leaves its heading alone on a page)
    wrap = "table-wrap long" if len(frame) > LONG_TABLE_ROWS else "table-wrap"
    return f'<div class="{wrap}">{body}{cap}</div>'


def _one_table(frame: pd.DataFrame, floatfmt: str) -> str:
    # numbers in the columns after the first: keep each on one line (long text elsewhere may wrap at spaces)
    numeric = len(frame.columns) > 1 and all(pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns[1:])
    # headers in reader words here, not only in the rendered brief: a notebook shows the same tables (issue 48:
    # notebook 08's points table had raw column names)
    frame = frame.rename(columns=lambda c: words.display(c) if isinstance(c, str) else c)
    body = frame.to_html(index=False, classes="brief-table numeric" if numeric else "brief-table", border=0,
                         na_rep="–", float_format=lambda v: floatfmt.format(v))
    return wrap_at_spaces_only(body)


# An appendix table longer than this (rows × the page-wide parts it prints in) is one a reader would rather sort
# than read (issue 49): the HTML brief holds it in a collapsed section, sortable in the page; the PDF prints its
# caption and where it is, not its rows.
RAW_TABLE_ROWS = 8


def raw_table_html(frame: pd.DataFrame, caption: str = "", floatfmt: str = "{:,.1f}") -> str:
    """A long table for the HTML only: collapsed (<details>), sortable by a click on a column's header (the
    page's own script, no network); print shows one line saying where it is."""
    what = caption or "Table"
    one = _one_table(frame, floatfmt).replace('class="dataframe brief-table', 'class="dataframe brief-table sortable')
    return (f'<details class="raw html-only"><summary>{html.escape(what)} ({len(frame):,} rows; click a column '
            f'to sort)</summary>{one}</details><p class="print-only caption">{html.escape(what)} ({len(frame):,} '
            "rows): in the HTML brief (brief.html: collapsed, sortable), computed from the studies' CSV files.</p>")


def show_table(frame: pd.DataFrame, caption: str = "", floatfmt: str = "{:,.1f}", body: bool = False) -> None:
    """A table; inside details_to() it goes to the study's appendix unless body=True (a key table), and a
    long one there to the HTML only (raw_table_html)."""
    if _DETAILS and not body and len(frame) * len(column_parts(frame, floatfmt)) > RAW_TABLE_ROWS:
        _place(raw_table_html(frame, caption, floatfmt), False)
        return
    _place(table_html(frame, caption, floatfmt), body, "table")


VECTOR_MAX_POINTS = 20_000   # a figure drawing more marks than this stays raster (an SVG of it is slow and huge)
# In a vector figure, a scatter of more dots than this (or an axes of more bars) is drawn as one embedded
# image at the figure's dpi while axes, ticks and text stay vector: the LBA-vs-time grid was a 1.4 MB SVG
# and most of the 60 s the PDF took to render (weasyprint draws every dot).
DENSE_MARKS = 500
FIGURE_LAYOUT = "figure-layout:"     # marks a figure's text that does not fit (report/figurefit.py)
DENSE_PATCHES = 100


def _rasterize_dense(fig) -> None:
    for ax in fig.axes:
        for c in ax.collections:
            if hasattr(c, "get_offsets") and len(c.get_offsets()) > DENSE_MARKS:
                c.set_rasterized(True)
        if len(ax.patches) > DENSE_PATCHES:
            for patch in ax.patches:
                patch.set_rasterized(True)


def _marks(fig) -> int:
    """Points and vertices the figure draws (scatter offsets, line vertices, image pixels count as many)."""
    n = 0
    for ax in fig.axes:
        n += sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
        n += sum(len(line.get_xdata()) for line in ax.lines)
        n += sum(VECTOR_MAX_POINTS for _ in ax.images)
    return n


def figure_html(fig, caption: str = "", raster: bool = False) -> str:
    """The figure as an inline image: SVG (vector: sharp when zoomed, in the HTML and the PDF; text as
    paths, so no font is needed; dense scatters and bar sets embedded as one image), or PNG at 150 dpi when
    it draws more than VECTOR_MAX_POINTS marks."""
    import base64
    import io
    import matplotlib.pyplot as plt

    from . import figurefit
    figurefit.fit(fig)
    # what still does not fit goes to the layout check (report/layout.py) as a comment the reader never sees
    unfit = "".join(f"<!-- {FIGURE_LAYOUT} {html.escape(p).replace('--', '- -')} -->" for p in figurefit.problems(fig))
    buf = io.BytesIO()
    vector = not raster and _marks(fig) <= VECTOR_MAX_POINTS
    if vector:
        _rasterize_dense(fig)
    with plt.rc_context({"svg.fonttype": "path", "svg.hashsalt": "storagebrief"}):   # reproducible ids
        fig.savefig(buf, format="svg" if vector else "png", dpi=150, bbox_inches="tight",
                    metadata={"Date": None} if vector else None)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    mime = "image/svg+xml" if vector else "image/png"
    cap = f'<p class="caption">{html.escape(caption)}</p>' if caption else ""
    return f'<figure>{unfit}<img src="data:{mime};base64,{data}" alt="{html.escape(caption)}"/>{cap}</figure>'


def show_figure(fig, caption: str = "", detail: bool = False) -> None:
    """A figure on the page; detail=True: to the study's appendix inside details_to() (not a key figure). An
    appendix figure is a 150-dpi image, not SVG: it prints small, and the PDF printer took about half the quick
    brief's 52 s drawing SVG figures glyph by glyph (measured), most of them the appendices'."""
    body = not detail
    if _DETAILS and body:
        body = _chapter_keeps("figure")
    _place(figure_html(fig, caption, raster=bool(_DETAILS) and not body), body)


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


CHAPTER_BULLETS = 5     # a chapter's analysis: its first five bullets; the rest in its appendix


def analysis(lines: list[str], title: str = "Analysis", tail: str = "") -> None:
    """The generated analysis paragraph: a bold title, one bullet per finding, closing text. In a brief's
    chapter, its first analysis keeps CHAPTER_BULLETS bullets; the rest, the closing text and any later
    analysis continue in its appendix."""
    first = True
    if _DETAILS:
        _DETAILS[-1].kept["analysis"] += 1
        first = _DETAILS[-1].kept["analysis"] == 1
    if _DETAILS and not first:
        show_md(f"**{title}.**\n\n" + "\n".join(lines) + (f"\n\n{tail}" if tail else ""), detail=True)
        return
    keep = lines[:CHAPTER_BULLETS] if _DETAILS else lines
    rest = lines[len(keep):]
    show_html(markdown_html(f"**{title}.**\n\n" + "\n".join(keep) + (f"\n\n{tail}" if tail and not _DETAILS else "")))
    if rest or (tail and _DETAILS):
        show_md(f"**{title} (continued).**\n\n" + "\n".join(rest) + (f"\n\n{tail}" if tail else ""), detail=True)


def limits_box(warnings: list[str]) -> None:
    """'Limits of this run': everything that was degraded or not applied, said once each."""
    items = list(dict.fromkeys(warnings))
    if items:
        show_html('<div class="warn"><b>Limits of this run</b><ul>' +
                  "".join(f"<li>{html.escape(w)}</li>" for w in items) + "</ul></div>")
