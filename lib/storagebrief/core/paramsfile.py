"""Reading params text safely (issue 57): a params file is a small regular file of YAML knobs. It is opened
without blocking (a FIFO named as --params is refused, never waited on), read up to its limit and no further
(/dev/zero is refused after MAX_PARAMS_BYTES, not read without end), parsed without aliases or duplicate keys, and
YAML nested past what the parser can follow is one line, not a RecursionError."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml


class ParamsError(ValueError):
    """A parameter is wrong; the message names key, value and what is allowed."""


MAX_PARAMS_BYTES = 1 << 20        # a params file is a page of knobs, not data
MAX_OVERRIDE_BYTES = 64 << 10


class _ParamsLoader(yaml.SafeLoader):
    """YAML for params: no aliases (an alias bomb would expand to gigabytes; params have no use for
    them) and no duplicate keys (YAML keeps the last silently; a user means one of them)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ParamsError(f"YAML alias '*{event.anchor}' (line {event.start_mark.line + 1}) is not allowed "
                              "in params: write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ParamsError(f"duplicate key '{key}' (lines {seen[key]} and {key_node.start_mark.line + 1}): "
                                  "keep one")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def safe_yaml(text: str, what: str, limit: int = MAX_PARAMS_BYTES):
    """Parse params YAML bounded in size, without aliases or duplicate keys."""
    if len(text.encode()) > limit:
        raise ParamsError(f"{what} is {len(text.encode()):,} bytes; params are limited to {limit:,} bytes")
    try:
        return yaml.load(text, Loader=_ParamsLoader)
    except yaml.YAMLError as exc:
        raise ParamsError(yaml_error_line(exc, what)) from None
    except RecursionError:
        raise ParamsError(f"{what} nests its YAML deeper than params can (Python's recursion limit): params are "
                          "a few levels of sections and knobs") from None


def yaml_error_line(exc: Exception, what: str) -> str:
    """YAML's several-line message as one line: where, what, and for a tab what to do."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    tab = " (a tab: YAML indents with spaces only; replace the tab with spaces)" if "\\t" in repr(problem) \
        or "'\\t'" in str(problem) else ""
    return f"{what} is not valid YAML{where}: {' '.join(str(problem).split())}{tab}"


def read_text(path: Path, limit: int = MAX_PARAMS_BYTES) -> str:
    """A params file's text: a regular file (a FIFO, a device or a socket is refused without waiting on it),
    read up to `limit` bytes and refused beyond."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ParamsError(f"params file '{path}' cannot be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ParamsError(f"params file '{path}' is not a regular file (a FIFO, device or socket): give a "
                              "params.yaml")
        data = os.read(fd, limit + 1)
        while data and len(data) <= limit:
            more = os.read(fd, limit + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as exc:
        raise ParamsError(f"params file '{path}' cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ParamsError(f"params file '{path}' is over {limit:,} bytes; params are limited to {limit:,} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ParamsError(f"params file '{path}' cannot be read: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start})") from None


def read_yaml(path: str | Path) -> dict:
    """params.yaml as plain data, before overrides and validation."""
    path = Path(path)
    if path.is_dir():
        raise ParamsError(f"params file '{path}' is a directory; give the params.yaml inside it")
    if not path.exists():
        raise ParamsError(f"params file '{path}' does not exist (resolved: {path.resolve()})")
    text = read_text(path)
    data = safe_yaml(text, str(path)) or {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path} must be a mapping of sections (scale, targets, run, <study>...)")
    return data
