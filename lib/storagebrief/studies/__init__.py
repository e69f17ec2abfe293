"""The registry of studies: the CLI, params validation, the brief, DVC and the tests all read it.

Adding a study = a package here (its rooms: params, dataset, run, metrics, brief and its
workers; see core/study.py) + its entry below + notebooks/NN_<name>.ipynb + its DVC stage
(tests/test_registry.py fails until dvc.yaml agrees). Studies import core and formats,
never each other.
"""
from __future__ import annotations

from ..core import config
from ..core.study import Study
from .emulate import STUDY as _emulate
from .preprocess import STUDY as _preprocess
from .stream_inference import STUDY as _stream_inference
from .train_resnet50 import STUDY as _train_resnet50
from .transfer_sweep import STUDY as _transfer_sweep

# Brief order: the order sections appear in the brief.
REGISTRY: dict[str, Study] = {s.name: s for s in (_preprocess, _emulate, _train_resnet50,
                                                   _transfer_sweep, _stream_inference)}

for _study in REGISTRY.values():
    config.register_section(_study.name, _study.params_model)


def get(name: str) -> Study:
    """A study by name (params section) or CLI command."""
    for s in REGISTRY.values():
        if name in (s.name, s.command):
            return s
    raise KeyError(f"unknown study '{name}'; registered: {', '.join(REGISTRY)}")


def by_command() -> dict[str, Study]:
    return {s.command: s for s in REGISTRY.values()}
