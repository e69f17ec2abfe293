"""Progress of a sweep on stderr: run i of n, target, configuration, elapsed and ETA.

On a terminal a tqdm bar; in JupyterLab tqdm's notebook widget (when ipywidgets is
installed); anywhere else (papermill under `dvc repro`, CI logs, pipes) one plain
line per run, so logs stay readable. mode: auto | bar | lines | off.

The bar exists from the first second of a study (total unknown while libraries load and
datasets are generated: `message` says what is happening), and `start(n)` sets the run count
once the plan is known.
"""
from __future__ import annotations

import sys
import time

MODES = ("auto", "bar", "lines", "off")


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, total: int | None, title: str, mode: str = "auto", stream=None):
        if mode not in MODES:
            raise ValueError(f"progress mode '{mode}' is not one of {MODES}")
        self.total, self.title, self.stream = total, title, stream or sys.stderr
        self.done = 0
        self.t0 = time.perf_counter()
        self._timed = 0          # runs that were measured (skips do not predict time)
        self._timed_s = 0.0
        self._begun = 0.0
        self.bar = None
        self.kind = "plan"
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() or _in_jupyter() else "lines"
        self.mode = mode
        if mode == "bar":
            self.bar = self._make_bar()
            if self.bar is None:
                self.mode = "lines"

    def _make_bar(self):
        try:
            if _in_jupyter():
                try:
                    from tqdm.notebook import tqdm
                    return tqdm(total=self.total, desc=self.title, unit="run")
                except ImportError:
                    pass   # no ipywidgets: the plain bar below still works in a cell
            from tqdm import tqdm
            return tqdm(total=self.total, desc=self.title, unit="run", file=self.stream, dynamic_ncols=True)
        except ImportError:
            return None

    def start(self, total: int, kind: str = "plan") -> None:
        """The plan is known: count runs from here (time so far stays in `elapsed`). kind "search": the
        total is an upper bound that shrinks as results come in (core/plans.py), and the line says so."""
        self.total, self.done, self.kind = total, 0, kind
        if self.bar is not None:
            self.bar.reset(total=total)
            if kind != "plan":
                self.bar.set_description(f"{self.title} ({kind})")
            self.bar.set_postfix_str("", refresh=True)

    def message(self, text: str) -> None:
        """What is happening between runs (start-up, datasets): the bar's text (nothing without a bar:
        line-by-line logs say what they need through the study's log)."""
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def note(self, text: str) -> None:
        """A line that stays (where the results went)."""
        if self.mode == "off":
            return
        if self.bar is not None:
            self.bar.write(text) if hasattr(self.bar, "write") else print(text)
        else:
            print(f"[{self.title}] {text}", file=self.stream, flush=True)

    def eta_s(self) -> float | None:
        if not self._timed:
            return None
        return self._timed_s / self._timed * (self.total - self.done)

    def begin(self, target: str, label: str, repeat: int) -> None:
        self._begun = time.perf_counter()
        what = f"{target}: {label}, repeat {repeat}"
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=True)
        elif self.mode == "lines":
            eta = self.eta_s()
            search = self.kind != "plan"
            print(f"[{self.title}] {self.kind + ' ' if search else ''}run {self.done + 1}/"
                  f"{'at most ' if search else ''}{self.total} {what} "
                  f"(elapsed {_clock(time.perf_counter() - self.t0)}, "
                  f"ETA {'at most ' if search and eta is not None else ''}{_clock(eta) if eta is not None else '?'})",
                  file=self.stream, flush=True)

    def end(self, status: str = "ok", runs_left: int | None = None) -> None:
        """A run finished; runs_left (adaptive plans) re-sets the total to the runs done + those left."""
        self._timed += 1
        self._timed_s += time.perf_counter() - self._begun
        self._advance()
        if runs_left is not None and self.total != self.done + runs_left:
            self.total = self.done + runs_left
            if self.bar is not None:
                self.bar.total = self.total
                self.bar.refresh()

    def skip(self) -> None:
        """A planned run the study leaves out: the total shrinks (the bar ends at the runs made, not past them)."""
        self.total = max(self.done, self.total - 1)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def _advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.done:
            print(f"[{self.title}] {self.done}/{self.total} runs in {_clock(time.perf_counter() - self.t0)}",
                  file=self.stream, flush=True)
