"""Issue 60, without MLPerf's code: the MLPerf results tree is laid out and named as mlpstorage writes it, the
metadata file carries base.py's keys, the tool's file holds only what it is given (our figures go to
storagebrief.json)."""
from __future__ import annotations

import json

import pytest

from storagebrief.kit import mlpstorage_tree as tree

INV = {"hostname": "h1", "memory_total_bytes": 8 * 2**30, "cpu_threads": 4, "cpu_cores_physical": 2,
       "git_commit": "abc", "params_hash": "p1"}


@pytest.mark.parametrize("kind, model, parts", [
    ("training", "unet3d", ("training", "unet3d", "run")),
    ("checkpointing", "llama3-8b", ("checkpointing", "llama3-8b")),
    ("kv_cache", "llama3.1-8b", ("kv_cache", "run")),
    ("vector_database", "cfg", ("vector_database", "run")),
])
def test_run_folders_where_mlpstorage_puts_them(tmp_path, kind, model, parts):
    first = tree.run_folder(tmp_path, kind, model, "2026-12-07T06:12:08+00:00")
    again = tree.run_folder(tmp_path, kind, model, "2026-12-07T06:12:08+00:00")     # the same second
    assert first == tmp_path.joinpath(*parts, "20261207_061208")
    assert again.name == "20261207_061208_2" and first.is_dir() and again.is_dir()


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="allowed: training, checkpointing"):
        tree.run_folder(tmp_path, "inference", "m", "2026-12-07T06:12:08+00:00")


def test_metadata_file_keys_and_our_figures_beside_the_tools_file(tmp_path):
    d = tree.run_folder(tmp_path, "training", "unet3d", "2026-12-07T06:12:08Z")
    meta_path = tree.write_run(d, "training", model="unet3d", command="run", num_processes=2, accelerator="h100",
                               parameters={"dataset": {"num_files_train": 7}}, overrides={"dataset.num_files_train": 7},
                               inv=INV, tool_files={"summary.json": {"metric": {"train_au_mean_percentage": 95.0}}},
                               ours={"run_id": "r1", "honest": 1.5})
    assert meta_path.name == "training_20261207_061208_metadata.json"
    meta = json.loads(meta_path.read_text())
    for key in ("benchmark_type", "model", "command", "run_datetime", "num_processes", "parameters",
                "override_parameters", "system_info", "accelerator", "combined_params", "params_dict"):
        assert key in meta, key
    assert meta["run_datetime"] == d.name and meta["args"]["results_dir"] == str(tmp_path)
    assert meta["system_info"]["total_memory_bytes"] == 8 * 2**30 and meta["system_info"]["num_hosts"] == 1
    assert json.loads((d / "summary.json").read_text()) == {"metric": {"train_au_mean_percentage": 95.0}}
    ours = json.loads((d / tree.OURS).read_text())
    assert ours["honest"] == 1.5 and ours["git_commit"] == "abc"


def test_dlio_host_keys_in_gib_per_host():
    assert tree.dlio_hosts(INV) == {"host_memory_GB": [8.0], "host_cpu_count": [4]}


def test_training_run_written_as_dlio_output(tmp_path):
    """mlpstorage 64165f7 drops a complete metadata file's system_info, so a training run is written for its DLIO
    reader: dlio_config/ (DLIO's workload and the overrides as mlpstorage passes them), no `parameters` key."""
    import yaml
    d = tree.run_folder(tmp_path, "training", "unet3d", "2026-12-07T06:12:08Z")
    params = {"model": {"name": "unet3d"}, "workflow": {"train": True}, "dataset": {"num_files_train": 7}}
    meta_path = tree.write_run(d, "training", model="unet3d", command="run", num_processes=2, accelerator="v100",
                               parameters=params, overrides={"dataset.num_files_train": 7}, inv=INV,
                               tool_files={"summary.json": {}}, ours={}, as_dlio=True)
    meta = json.loads(meta_path.read_text())
    assert "parameters" not in meta and meta["combined_params"] == params        # the submission checker's key
    assert yaml.safe_load((d / "dlio_config" / "config.yaml").read_text()) == {"workload": params}
    assert yaml.safe_load((d / "dlio_config" / "overrides.yaml").read_text()) == \
        ["workload=unet3d_v100", "++workload.dataset.num_files_train=7"]
