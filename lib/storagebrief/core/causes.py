"""The line of a tool's output that says why it failed, not the advice or stack frames around it.

Open MPI ends its errors with a page of generic help and a JVM's log with stack frames; the cause
is usually one line earlier (`ssh: Could not resolve hostname …`, `java.io.IOException: No space
left on device`). Readers here find that line so that an error message can quote it.
"""
from __future__ import annotations

import re
import unicodedata

MAX_CHARS = 300


class EnvironmentFailure(RuntimeError):
    """A run stopped by its environment, not by a bug: a broker that died on a full disk, MPI ranks
    that failed on their host. The CLI and notebooks show it as one line (exit 2), naming the cause."""

SEPARATOR = re.compile(r"^\s*[-=*_]{5,}\s*$")
STACK_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more|File \")|^\s*(Caused by|Suppressed): \S+$|^Traceback ")


def one_line(text: str, limit: int = MAX_CHARS) -> str:
    """Whitespace runs (newlines too) made single spaces; cut at `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def untrusted(text, limit: int = 120) -> str:
    """Text from a file others can write (a lock file's holder), fit to print on one line of anyone's
    terminal: newlines and other whitespace made single spaces, every other control or format character
    (ESC, DEL, C1, bidi overrides) shown as an escape (\\x1b, \\u202e), cut at `limit` characters."""
    flat = " ".join(str(text).split())
    out = "".join(c if unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")
                  else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in flat)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def known_cause(text: str, patterns: list[re.Pattern]) -> str | None:
    """The first line matching the first pattern (in priority order) that matches anywhere."""
    lines = text.splitlines()
    for pat in patterns:
        for line in lines:
            if pat.search(line):
                return one_line(line)
    return None


def first_paragraph(text: str, generic: re.Pattern | None = None) -> str | None:
    """The first sentence of the first block of lines between blank or ruler lines. A line ending in
    ':' takes the indented line after it, or the next block's first line (Open MPI: 'unable to open the
    hostfile:' / '    /path'); a next block of 'Key: value' lines comes along in brackets
    ('Framework: btl, Component: nonesuch'). Blocks whose first line matches `generic` (a tool's
    "something failed" preamble) give way to a later block."""
    blocks = _blocks(text)
    if generic is not None:
        specific = [i for i, b in enumerate(blocks) if not generic.search(b[0])]
        blocks = blocks[specific[0]:] if specific else blocks
    if not blocks:
        return None
    head, done = [], False
    for j, line in enumerate(blocks[0]):
        head.append(line.strip())
        if line.endswith(":") and j + 1 < len(blocks[0]) and blocks[0][j + 1][:1].isspace():
            head.append(blocks[0][j + 1].strip())
            done = True
            break
    head = " ".join(head)
    if done:
        return one_line(head)
    sentence = re.match(r"(.+?[.!?])\s", head + " ")
    head = sentence.group(1) if sentence else head
    nxt = blocks[1] if len(blocks) > 1 else []
    if head.endswith(":") and nxt:
        head += " " + nxt[0].strip()
    elif nxt and all(KEY_VALUE.match(ln.strip()) for ln in nxt):
        head += " (" + ", ".join(" ".join(ln.split()) for ln in nxt) + ")"
    return one_line(head)


KEY_VALUE = re.compile(r"^[A-Za-z][\w ]{0,30}:\s+\S")


def _blocks(text: str) -> list[list[str]]:
    blocks, cur = [], []
    for line in text.splitlines():
        if not line.strip() or SEPARATOR.match(line):
            if cur:
                blocks.append(cur)
                cur = []
            continue
        cur.append(line.rstrip())                  # indentation kept: it marks a value under a 'label:'
    if cur:
        blocks.append(cur)
    return blocks


def last_meaningful(text: str, prefer: re.Pattern | None = None) -> str | None:
    """The last line that is not a stack frame or a ruler; the last matching `prefer` when one does."""
    lines = [ln for ln in text.splitlines()
             if ln.strip() and not SEPARATOR.match(ln) and not STACK_FRAME.search(ln)]
    if prefer is not None:
        preferred = [ln for ln in lines if prefer.search(ln)]
        if preferred:
            return one_line(preferred[-1])
    return one_line(lines[-1]) if lines else None
