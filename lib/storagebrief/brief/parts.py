"""One part of the brief at a time: in the brief's kernel an error of one part becomes a visible note in its
place and every other part still renders (render() repeats it on the terminal); elsewhere it propagates."""
from __future__ import annotations

import functools
import html

from ..report.display import show_html


def in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def not_rendered(what: str, exc: Exception) -> None:
    show_html(f'<div class="warn unreadable"><b>{html.escape(what)} could not be rendered</b>: '
              f'{html.escape(type(exc).__name__)}: {html.escape(str(exc))}. The inputs passed the brief\'s checks, '
              'so this is an input those checks do not know or a bug: please report it with the study\'s folder.</div>')


def survives(what: str, fn, *args) -> None:
    """Run one part of the brief; in the brief's kernel an error becomes a visible note in its place
    (its half-made output dropped) so every other part still renders, and render() repeats it on the
    terminal. Elsewhere (tests, scripts) the error propagates, so a bug is not hidden."""
    if not in_kernel():
        fn(*args)
        return
    import matplotlib.pyplot as plt
    from IPython.utils.capture import capture_output
    try:
        with capture_output() as cap:
            fn(*args)
    except Exception as exc:   # noqa: BLE001 - any error of one part; reported, not swallowed
        plt.close("all")
        not_rendered(what, exc)
        return
    cap.show()


def part(what: str):
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            survives(what, lambda: fn(*args, **kwargs))
        return run
    return wrap


