"""The registry of studies: the CLI, params validation, the brief, DVC and the tests all read it.

Every package here with a `STUDY` record in its __init__.py is a study; they are found, not
listed, and ordered by their numbered notebook (notebooks/NN_<name>.py), which is the order of
the brief's sections. Adding a study: docs/adding-a-study.md. Studies import core, formats,
report and kit, never each other. A study's __init__ imports only core.study, so reading the
registry never imports TensorFlow (the rooms load on first use).
"""
from __future__ import annotations

import importlib
import pkgutil

from ..core import config
from ..core.study import Study


def _discover() -> dict[str, Study]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            study = getattr(importlib.import_module(f"{__name__}.{info.name}"), "STUDY", None)
            if isinstance(study, Study):
                if study.name != info.name:
                    raise ImportError(f"study package '{info.name}' declares STUDY.name '{study.name}'; "
                                      "they must be the same (params section, reports/<name>/, DVC stage)")
                found.append(study)
    return {s.name: s for s in sorted(found, key=lambda s: (s.notebook, s.name))}


# Brief order: the order sections appear in the brief (= the notebooks' numbers).
REGISTRY: dict[str, Study] = _discover()

for _study in REGISTRY.values():
    config.register_section(_study.name, _study.params_model, _study.object_targets)


def get(name: str) -> Study:
    """A study by name (params section) or CLI command."""
    for s in REGISTRY.values():
        if name in (s.name, s.command):
            return s
    raise KeyError(f"unknown study '{name}'; registered: {', '.join(REGISTRY)}")


def by_command() -> dict[str, Study]:
    return {s.command: s for s in REGISTRY.values()}
