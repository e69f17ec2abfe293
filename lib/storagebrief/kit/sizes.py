"""Sizes as params write them ('4k', '128KiB', '1m', 4096; k = 1,024 B, as fio and S3 tools do) and as
tables label them (4K, 1M)."""
from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(i?b)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(value, what: str = "block size") -> int:
    """'4k' / '128KiB' / '1m' / 4096 -> bytes; '1MB' is refused (MB is 10⁶ B in the tables, never 1 MiB here)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r} is not a size")
    if isinstance(value, int):
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"{what} {value!r} is not a size like 4k, 128k, 1m or 4096")
    if m.group(2) and (m.group(3) or "").lower() == "b":
        # 'MB' reads as 10⁶ B where the tables say MB = 10⁶ B; taken as MiB it was silently 4.9 % off (issue 48)
        raise ValueError(f"{what} {value!r} is ambiguous: sizes here count K, M, G in 1,024s (as fio and S3 tools "
                         f"do); write {m.group(1)}{m.group(2).lower()} or {m.group(1)}{m.group(2).upper()}iB for "
                         f"{int(m.group(1)) * _UNIT[m.group(2).lower()]:,} B, or the bytes as a number")
    return int(m.group(1)) * _UNIT[m.group(2).lower()]


def size_label(n: int) -> str:
    for unit, div in (("M", 1024**2), ("K", 1024)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return f"{n}B"
