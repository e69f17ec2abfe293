"""A tiny kv_cache section and what its tests share (issue 44): params.yaml holding it, the CLI, one real run on two
targets (prefill off: the study's own tiny setting), and the kv section of the brief as shown. Shared by the
tests of kv_cache's params, prefill and brief, and of the brief's Appendix B."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from storagebrief import studies
from storagebrief.brief import inputs
from storagebrief.core import config


STUDY = studies.get("kv_cache")
SMALL = {"run": ["w"], "workloads": {"w": {"model": "llama3.1-8b", "users_per_client": 2, "concurrency": 2}},
         "clients": 2, "contexts": [{"tokens": 16, "weight": 1}], "turns": [{"tokens": 3, "weight": 1}],
         "turn_tokens": 8, "duration_s": 0.3, "repeats": 1, "write_block_mib": 1, "prefill": {"measure": False}}


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def _params(tmp_path, section: dict):
    (tmp_path / "t").mkdir(exist_ok=True)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": "t", "path": str(tmp_path / "t")}], "kv_cache": section}))
    return f


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """One real tiny run on two targets (prefill off: the study's own tiny setting)."""
    tmp = tmp_path_factory.mktemp("kv")
    data = {"targets": [{"name": n, "path": str(tmp / n)} for n in ("a", "b")],
            "run": {"cold_cache": True, "trace": False}, "kv_cache": SMALL}
    STUDY.run(config.validate(data, root=REPO), tmp / "out", log=lambda *_: None, progress="off")
    return tmp / "out"


def _section(d) -> str:
    """The kv section of the brief as shown (its HTML, figures dropped), read through the brief's gate."""
    import IPython.display
    s = inputs.read_study("kv_cache", d)
    assert s.ok, s.problem
    shown = []
    saved = IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.extend(str(getattr(o, "data", "")) for o in objs)
    try:
        STUDY.brief_section(d, s.frame, s.names)
    finally:
        IPython.display.display = saved
    return "\n".join(x for x in shown if "<img" not in x)
