"""The stream_inference section of the brief (filled in below)."""
from __future__ import annotations


def section(study_dir, frame, target_names: list[str]) -> None:
    pass
