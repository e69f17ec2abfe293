"""The data set grows with N (issue 61, `emulate.min_steps_per_epoch`): every accelerator gets the stated steps per
epoch whatever N, as MLPerf Storage sizes its data set, so an AU window is not carried by prefetch at large N."""
from __future__ import annotations

import pytest

from storagebrief.core import config, results
from storagebrief.studies.emulate import STUDY
from storagebrief.studies.emulate.dataset import files_for, first_files
from storagebrief.studies.emulate.window import au_window, min_window_steps
from test_emulate import SMALL, params_dict


def _p(tmp_path, **change):
    return config.validate(params_dict(tmp_path, {**SMALL, **change})).section("emulate")


@pytest.mark.parametrize("epochs", [1, 2, 5])
def test_au_window_steps_give_every_n_a_window_that_is_a_measurement(tmp_path, epochs):
    p = _p(tmp_path, min_steps_per_epoch="au_window", epochs=epochs, num_files=8, accelerators=[1, 64])
    spec, floor = p.spec("unet3d"), p.steps_floor("unet3d")
    for n in (1, 3, 8, 64):
        files = files_for(p, spec, "unet3d", n, 8)
        steps = files // n // 2 * epochs                     # batch 2, one sample a file
        first, stop = au_window(steps, 2, 1)
        assert stop - first >= min_window_steps(2, 1), (n, steps)
        assert files == max(8, n * 2 * floor)                # grows in proportion once past num_files
    assert _p(tmp_path).steps_floor("unet3d") is None and files_for(_p(tmp_path), spec, "unet3d", 64, 48) == 48


def test_a_run_reads_the_first_files_of_its_dataset():
    data = {"files": ["a", "b", "c"], "spans": [[(0, 1)], [(0, 2)], [(0, 3)]], "sizes": [10, 20, 30], "bytes": 60,
            "backing": "/x"}
    assert first_files(data, 2) == {"files": ["a", "b"], "spans": [[(0, 1)], [(0, 2)]], "sizes": [10, 20],
                                    "bytes": 30, "backing": "/x"}
    assert first_files(data, 3) is data and first_files(data, 5) is data


@pytest.mark.parametrize("bad", [0, -1, "auto", True, 2.5])
def test_a_bad_min_steps_per_epoch_fails_before_work(tmp_path, bad):
    with pytest.raises(config.ParamsError, match="min_steps_per_epoch"):
        config.validate(params_dict(tmp_path, {**SMALL, "min_steps_per_epoch": bad}))


@pytest.mark.e2e
def test_real_runs_grow_the_data_set_with_n(tmp_path):
    """num_files 8 and 4 steps per epoch (batch 2): N = 1 reads 8 files, N = 2 reads 16 of the 16 generated."""
    section = {**SMALL, "num_files": 8, "min_steps_per_epoch": 4, "accelerators": [1, 2], "client_check": False}
    p = config.validate(params_dict(tmp_path, section, cold_cache=False))
    STUDY.run(p, tmp_path / "out", log=lambda *_: None, progress="off")
    rows = results.read_runs(tmp_path / "out" / "runs.csv").sort_values("accelerators")   # a disturbed run's re-run
    assert list(rows.num_files) == [8, 16] and list(rows.steps_per_epoch) == [4, 4]
    assert rows.dataset_bytes.iloc[0] < rows.dataset_bytes.iloc[1]
