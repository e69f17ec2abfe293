"""Expected errors (bad input, the environment) as users see them: one line, in the CLI and in
notebooks alike; anything else is a bug and keeps its traceback."""
from __future__ import annotations

from .core import config
from .core.causes import EnvironmentFailure
from .core.lock import TargetBusy
from .core.results import os_error_hint


def error_line(exc: BaseException) -> str:
    """The one line (or short block) a user sees for an expected error, in the CLI and in notebooks.
    An OSError names the file, the cause and what to do (a disk that filled, a read-only mount)."""
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and os_error_hint(exc):
        where = f" writing {exc.filename}" if exc.filename else ""
        return f"storagebrief: error: {exc.strerror}{where}; {os_error_hint(exc)}"
    return f"storagebrief: error: {exc}"


def expected(exc: BaseException) -> bool:
    """Failures of input or environment (exit 2, one line), as opposed to bugs (traceback with --debug)."""
    return isinstance(exc, (config.ParamsError, ValueError, FileNotFoundError, TargetBusy, EnvironmentFailure)) or \
        (isinstance(exc, OSError) and bool(os_error_hint(exc)))
