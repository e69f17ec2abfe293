"""A user's folder holding files named like every study's (its folders and run folders), and the check that it is
byte for byte as it was: what a symlink at a study's folder, a run folder or a store's folder leads to (issue 44).
Shared by the tests of the folder guard, the directory store and the kv_cache study's run folders."""
from __future__ import annotations

from pathlib import Path

from storagebrief import studies


def _victim(tmp: Path) -> tuple[Path, dict]:
    """A user's folder holding files named like a study's (every study's folder and run-folder shapes)."""
    victim = tmp / "victim"
    files = {victim / "precious.txt": b"the user's"}
    for s in studies.REGISTRY:
        files[victim / s / f"{s}-run" / "mine.txt"] = b"theirs: " + s.encode()
        files[victim / f"{s}-run" / "mine.txt"] = b"theirs too"
        files[victim / "data" / "obj-00000"] = b"not random bytes"
    for f, body in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(body)
    return victim, files


def _unchanged(victim: Path, files: dict) -> None:
    now = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert now == files, sorted(set(now) ^ set(files))
