"""kv_cache's params as `validate` reads them (issue 44): a shape or workload a user names is refused where its name
would become a path or markup, and every shape dimension is bounded, in one line naming the key and the range.
Each failed on the code before the fix (fdbeda7)."""
from __future__ import annotations

import subprocess

import pytest

from kv_tiny import SMALL, _cli, _params


# The bounds docs/studies/kv_cache.md states (room above llama3.1-405b and 10M-token windows; workload.SHAPE_BOUNDS)
SHAPE_BOUNDS = {"layers": 1024, "hidden": 1 << 18, "heads": 1024, "kv_heads": 1024, "head_dim": 2048,
                "ffn": 1 << 20, "context_window": 1 << 24}
SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128, "context_window": 4096}


def _validate(tmp_path, section: dict) -> subprocess.CompletedProcess:
    return _cli("validate", "--params", str(_params(tmp_path, section)))


# --------------------------------------------------------------------------- names (defect 5)
@pytest.mark.parametrize("name", ["../x", "/etc/x", "<script>alert(1)</script>", "<b>x</b>", ".hidden"])
@pytest.mark.parametrize("where", ["shape", "workload"])
def test_a_shape_or_workload_named_like_a_path_or_markup_is_one_line(tmp_path, name, where):
    if where == "shape":
        section = {**SMALL, "shapes": {name: SHAPE}, "workloads": {"w": {"model": name}}, "contexts":
                   [{"tokens": 16, "weight": 1}]}
    else:
        section = {**SMALL, "run": [name], "workloads": {name: SMALL["workloads"]["w"]}}
    res = _validate(tmp_path, section)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and repr(name) in lines[0] and "not allowed" in lines[0], res.stderr


# --------------------------------------------------------------------------- bounds (defect 6)
@pytest.mark.parametrize("key", list(SHAPE_BOUNDS))
def test_a_shape_dimension_beyond_its_bound_is_one_line_naming_the_range(tmp_path, key):
    shape = {**SHAPE, key: 10 ** 30}
    res = _validate(tmp_path, {**SMALL, "shapes": {"huge": shape}, "workloads": {"w": {"model": "huge"}}})
    assert res.returncode == 2, res.stdout + res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and f"shapes.huge.{key}" in line and f"1 to {SHAPE_BOUNDS[key]:,}" in line, line
