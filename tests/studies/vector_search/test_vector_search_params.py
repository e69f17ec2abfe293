"""The vector-search knobs refused by `storagebrief validate` before any work (issue 57's minor cases): a negative
seed, more queries than vectors, and a name in vector_search.targets that is not a target (any study's `targets`,
all of them checked by validate; a run checks its own section)."""
from __future__ import annotations

import pytest

from storagebrief import studies
from storagebrief.core import config
from conftest import REPO


def _data(tmp_path, **section):
    return {"targets": [{"name": "local", "path": str(tmp_path / "t")}],
            "vector_search": {**studies.get("vector_search").tiny, **section}}


@pytest.mark.parametrize("knob, value, says", [
    ("seed", -1, "seed"),
    ("queries", 3_000, "queries = 3000 is above num_vectors"),
    ("targets", ["local", "nope"], "unknown target name(s) ['nope']; allowed: local"),
])
def test_a_bad_knob_is_refused_naming_it(tmp_path, knob, value, says):
    data = _data(tmp_path, **{knob: value})
    if knob == "queries":
        data["vector_search"]["num_vectors"] = 2_000
    with pytest.raises(config.ParamsError) as err:
        config.check_section_targets(config.validate(data, root=REPO))       # what `storagebrief validate` runs
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_tiny_settings_still_validate(tmp_path):
    assert config.validate(_data(tmp_path), root=REPO).section("vector_search").seed >= 0


def test_storagebrief_validate_refuses_an_unknown_target_in_a_section(tmp_path):
    import os
    import subprocess
    import sys
    import yaml
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(_data(tmp_path, targets=["nope"])))
    res = subprocess.run([sys.executable, "-m", "storagebrief.cli", "validate", "--params", str(f)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    assert res.returncode == 2 and "vector_search.targets = ['nope']: unknown target name(s)" in res.stderr, res.stderr
