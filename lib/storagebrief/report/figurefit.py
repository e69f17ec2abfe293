"""Figures whose text fits: tick labels that never overlap, subplot titles that stay over their own plot.

`fit(fig)` lays the figure out (no pixels drawn), wraps every subplot title that is wider than its
subplot onto more lines (a word wider than it alone: a smaller font), lays it out again until every title
fits, and thins an axis's tick labels (every 2nd, 3rd, … kept) while two of them
overlap. `problems(fig)` says, in words, what still does not fit; figure_html embeds those as an HTML
comment the brief's layout check (report/layout.py) reads, so the layout test fails on them. Measured
in display units after layout, so any font, size or number of subplots is judged as drawn.
"""
from __future__ import annotations

import textwrap
import warnings

PAD_PX = 1.0            # a title may overrun its subplot by this much (rounding)
MIN_TITLE_PT = 5.0      # a title's font shrinks no further (a word wider than its subplot at this size stays marked)
FIT_ROUNDS = 4          # wrap, lay out again (the subplots move), wrap again: until nothing changes
GAP_EM = 0.5            # tick labels closer than half their font size read as one number ("128256512")


def _layout(fig) -> None:
    """Lay the figure out again, if anything changed since the last layout (matplotlib marks the figure stale on
    a change to a title, a legend, a formatter or the subplots' places; the tick labels' own changes it does not
    mark, so the steps below that change them mark it). A layout is a whole draw without pixels: skipping the ones
    that change nothing took the quick brief's sections from 161 to 109 draws (their 23 figures' savefig included),
    every figure byte for byte the same."""
    if fig.stale:
        fig.draw_without_rendering()


def _renderer(fig):
    return fig.canvas.get_renderer()


def _tick_labels(axis, renderer, minor: bool = False):
    """The visible, non-empty major tick labels of an axis with their extents, in axis order; with `minor`, the
    minor ones too (a log axis of under about two decades labels "2×10³ 3×10³ 4×10³" between its majors)."""
    ticks = [t for t in axis.get_major_ticks() + (axis.get_minor_ticks() if minor else [])
             if t.label1.get_visible() and t.label1.get_text()]
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in ticks if lo - 1e-9 * abs(hi - lo) <= t.get_loc() <= hi + 1e-9 * abs(hi - lo)]
    return [(t, t.label1.get_window_extent(renderer)) for t in sorted(ticks, key=lambda t: t.get_loc())]


def _gap_px(ticks, fig) -> float:
    """The least gap between neighbouring labels: GAP_EM of their font size, in display pixels."""
    size = max((t.label1.get_fontsize() for t in ticks), default=10.0)
    return GAP_EM * size * fig.dpi / 72


def _overlapping(extents, horizontal: bool, gap: float) -> list[tuple[int, int]]:
    out = []
    for i in range(len(extents) - 1):
        a, b = extents[i], extents[i + 1]
        if (b.x0 < a.x1 + gap) if horizontal else (b.y0 < a.y1 + gap):
            out.append((i, i + 1))
    return out


def _titles(fig):
    return [(ax, ax.title) for ax in fig.axes if ax.get_visible() and ax.title.get_text()]


def _wide(ax, title, renderer) -> bool:
    return title.get_window_extent(renderer).width > ax.get_window_extent(renderer).width


def _wrap_title(ax, title, renderer) -> None:
    """Re-wrap a title onto more lines until it is no wider than its subplot (words, hyphenated ones too, are never
    cut); when one word alone is wider (a narrow subplot, a long target name), its font shrinks, down to
    MIN_TITLE_PT, and at each size the title is wrapped again from one line."""
    words = " ".join(title.get_text().split())
    _wrapped(ax, title, renderer, words)
    while _wide(ax, title, renderer) and title.get_fontsize() > MIN_TITLE_PT:
        title.set_fontsize(max(MIN_TITLE_PT, title.get_fontsize() * 0.9))
        _wrapped(ax, title, renderer, words)


def _wrapped(ax, title, renderer, words: str) -> None:
    """`words` on as few lines as fit the subplot (lines of 80 % fewer characters each try, 8 at least)."""
    chars = len(words)
    title.set_text(words)
    while _wide(ax, title, renderer) and chars > 8:
        chars = int(chars * 0.8)
        title.set_text("\n".join(textwrap.wrap(words, chars, break_long_words=False, break_on_hyphens=False)))


def _thin(axis, renderer, fig) -> None:
    """Hide the minor tick labels when any label overlaps one, then keep every k-th major label (k = 2, 3, …)
    while neighbours overlap; the first label always stays."""
    both = _tick_labels(axis, renderer, minor=True)
    if len(both) > len(_tick_labels(axis, renderer)) and _overlapping([e for _, e in both], axis.axis_name == "x",
                                                                       _gap_px([t for t, _ in both], fig)):
        from matplotlib.ticker import NullFormatter
        axis.set_minor_formatter(NullFormatter())
        _layout(fig)
    ticks = _tick_labels(axis, renderer)
    horizontal = axis.axis_name == "x"
    gap = _gap_px([t for t, _ in ticks], fig)
    k = 1
    while len(ticks) > 1 and _overlapping([e for _, e in ticks][::k], horizontal, gap):
        k += 1
        for i, (t, _) in enumerate(ticks):
            t.label1.set_visible(i % k == 0)
        fig.stale = True        # (a tick label's change does not mark it)
        if k >= len(ticks):
            break


MIN_TICK_PT = 6.0       # a bar group's label shrinks no further before one is hidden


def _named(text: str) -> bool:
    """A tick label that names a thing (a bar group: 'local\nquick-1'), not a number with its unit ('4K', '1M',
    matplotlib's '$\\mathdefault{10^{3}}$')."""
    return not text.startswith("$") and sum(c.isalpha() for c in text) >= 3


def _words(ticks) -> bool:
    """An axis whose labels name things: each one must stay."""
    return any(_named(t.label1.get_text()) for t, _ in ticks)


def _keep_every_group(axis, renderer, fig) -> None:
    """An x axis of named groups keeps every label (issue 62: the KV-cache figure labelled every other bar group):
    its labels shrink to 7 pt, turn 30°, then 90°, then shrink to MIN_TICK_PT, while neighbours overlap; _thin is the
    last resort."""
    ticks = _tick_labels(axis, renderer)
    if axis.axis_name != "x" or len(ticks) < 2 or not _words(ticks):
        return

    def clash() -> bool:
        _layout(fig)
        now = _tick_labels(axis, renderer)
        return bool(_overlapping([e for _, e in now], True, _gap_px([t for t, _ in now], fig)))
    size = max(t.label1.get_fontsize() for t, _ in ticks)
    steps = [("size", x) for x in (8.0, 7.0) if x < size] + [("turn", 30), ("turn", 90), ("size", MIN_TICK_PT)]
    for what, x in steps:
        if not clash():
            return
        for t, _ in ticks:
            if what == "size":
                t.label1.set_fontsize(min(x, t.label1.get_fontsize()))
            else:       # the label's end at its tick, read from bottom left to top right (or upwards)
                t.label1.set(rotation=x, ha="right", va="top" if x < 90 else "center", rotation_mode="anchor")
        fig.stale = True        # (a tick label's change does not mark it)
        _tight(fig)


def _tight(fig) -> None:
    if not fig.get_constrained_layout():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()


def _data_boxes(ax, renderer):
    """Display-space boxes of what an axes plots: each bar, each line's points, each scatter's points."""
    from matplotlib.transforms import Bbox
    boxes = [p.get_window_extent(renderer) for p in ax.patches if p.get_visible()]
    for line in ax.lines:
        if line.get_visible() and len(line.get_xydata()):
            boxes += [Bbox([[x, y], [x, y]]) for x, y in line.get_transform().transform(line.get_xydata())]
    for c in ax.collections:
        if c.get_visible() and len(c.get_offsets()):
            boxes += [Bbox([[x, y], [x, y]]) for x, y in c.get_offset_transform().transform(c.get_offsets())]
    return boxes


def _covered(ax, renderer) -> int:
    """How many of the axes' data marks its legend lies on (0: none, or no legend inside the plot)."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return 0
    box = legend.get_window_extent(renderer)
    if not box.overlaps(ax.get_window_extent(renderer)):
        return 0
    return sum(box.overlaps(b) or box.contains(b.x0, b.y0) for b in _data_boxes(ax, renderer))


def _legend_aside(ax, renderer, fig) -> None:
    """A legend lying on the data moves to a corner of its plot where it lies on none, else to the right of the
    plot, its entries, font and marker scale kept."""
    if not _covered(ax, renderer):
        return
    old = ax.get_legend()
    handles, labels = old.legend_handles, [t.get_text() for t in old.get_texts()]
    own, named = ax.get_legend_handles_labels()
    if named == labels:                 # the plotted artists themselves: the legend scales their markers afresh
        handles = own
    scale = getattr(old, "markerscale", 1.0) if handles is own else 1.0
    keep = dict(fontsize=old.get_texts()[0].get_fontsize() if labels else 8, markerscale=scale,
                title=old.get_title().get_text() or None)
    for loc in ("upper right", "upper left", "lower right", "lower left", "center right", "center left"):
        ax.legend(handles, labels, loc=loc, **keep)
        _layout(fig)
        if not _covered(ax, renderer):
            return
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, **keep)
    _tight(fig)
    _layout(fig)


def _unlabelled(ax, name: str) -> list[str]:
    """An axis with numbers but no label (on it or on an axis it shares), and a label or legend entry that is a
    column's name (snake_case) rather than words (issue 62)."""
    from .words import SNAKE
    out = []
    for axis, label, shared in (("x", ax.get_xlabel(), ax.get_shared_x_axes()),
                                ("y", ax.get_ylabel(), ax.get_shared_y_axes())):
        ticks = getattr(ax, f"{axis}axis").get_major_ticks()
        numbers = [t for t in ticks if t.label1.get_visible() and any(c.isdigit() for c in t.label1.get_text())
                   and not _named(t.label1.get_text())]
        if numbers and not label and not any(getattr(s, f"get_{axis}label")() for s in shared.get_siblings(ax)):
            out.append(f"{name!r}: its {axis} axis has no label (what and in which unit)")
    legend = ax.get_legend()
    texts = [ax.get_xlabel(), ax.get_ylabel()] + ([t.get_text() for t in legend.get_texts()]
                                                  + [legend.get_title().get_text()] if legend else [])
    out += [f"{name!r}: {t!r} is a column's name, not words" for t in texts if t and SNAKE.search(t)]
    return out


def fit(fig) -> None:
    """Move a legend off the data; keep every bar group's label; wrap titles wider than their subplot (after the
    moves, which narrow the plots; the groups' labels are checked again after the titles' layout); thin tick labels
    that overlap."""
    _layout(fig)
    renderer = _renderer(fig)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    for _ in range(2):              # each step's layout moves what the others placed: twice over
        for ax in shown:
            _legend_aside(ax, renderer, fig)
        for ax in shown:
            _keep_every_group(ax.xaxis, renderer, fig)
        _fit_titles(fig, renderer)
    for ax in shown:
        _thin(ax.xaxis, renderer, fig)
        _thin(ax.yaxis, renderer, fig)


def _fit_titles(fig, renderer) -> None:
    for _ in range(FIT_ROUNDS):     # tight_layout moves and narrows subplots: a title that fit may not any more
        before = [(title.get_text(), title.get_fontsize()) for _, title in _titles(fig)]
        for ax, title in _titles(fig):
            _wrap_title(ax, title, renderer)
        same = before == [(title.get_text(), title.get_fontsize()) for _, title in _titles(fig)]
        if not same:
            _tight(fig)                 # room for the titles' new lines
        _layout(fig)                    # (a figure's layout engine lays it out again on every draw)
        if same and not any(_wide(ax, title, renderer) for ax, title in _titles(fig)):
            break


def problems(fig) -> list[str]:
    """What does not fit: overlapping tick labels of one axis, a subplot title wider than its subplot or
    overlapping another subplot's title."""
    _layout(fig)
    renderer = _renderer(fig)
    out = []
    for n, ax in enumerate(a for a in fig.axes if a.get_visible()):
        name = ax.get_title() or f"subplot {n + 1}"
        for axis in (ax.xaxis, ax.yaxis):
            ticks = _tick_labels(axis, renderer, minor=True)
            gap = _gap_px([t for t, _ in ticks], fig)
            for i, j in _overlapping([e for _, e in ticks], axis.axis_name == "x", gap):
                out.append(f"{name!r}: {axis.axis_name} tick labels {ticks[i][0].label1.get_text()!r} and "
                           f"{ticks[j][0].label1.get_text()!r} overlap or touch")
        if _covered(ax, renderer):
            out.append(f"{name!r}: its legend lies on the data ({_covered(ax, renderer)} marks under it)")
        out += _unlabelled(ax, name)
        hidden = [t.label1.get_text() for t in ax.xaxis.get_major_ticks()
                  if t.label1.get_text() and not t.label1.get_visible()]
        if any(_named(s) for s in hidden):
            out.append(f"{name!r}: bar group labels hidden: {', '.join(repr(s) for s in hidden[:3])}")
    titles = _titles(fig)
    for ax, title in titles:
        if title.get_window_extent(renderer).width > ax.get_window_extent(renderer).width + PAD_PX:
            out.append(f"title {title.get_text()!r} is wider than its subplot")
    for i, (_, a) in enumerate(titles):
        for _, b in titles[i + 1:]:
            if a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer)):
                out.append(f"titles {a.get_text()!r} and {b.get_text()!r} overlap")
    return out
