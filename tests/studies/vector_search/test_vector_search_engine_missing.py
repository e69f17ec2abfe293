"""A missing search engine (diskannpy-rust) is one line naming the package, where it is pinned and what to do,
before any work: never 'a bug' from importlib."""
from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pytest

from storagebrief import errors
from storagebrief.core.causes import EnvironmentFailure
from storagebrief.studies.vector_search import run
from storagebrief.studies.vector_search.params import VectorSearchParams


def test_a_missing_engine_is_one_line_before_any_work(monkeypatch):
    real = importlib.metadata.version

    def version(name):
        if name == "diskannpy-rust":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(importlib.metadata, "version", version)
    touched = []
    sweep = SimpleNamespace(p=VectorSearchParams(), targets=[], status=touched.append)
    with pytest.raises(EnvironmentFailure) as err:
        run.prepare(sweep)
    msg = errors.error_line(err.value)
    assert errors.expected(err.value) and "\n" not in msg
    assert "diskannpy-rust==0.49.1" in msg and "pyproject.toml" in msg and "pip install" in msg
    assert not touched and not hasattr(sweep, "state")
