"""Issue 60: MLPerf's verdict is MLPerf's code's (the report generator `make mlpstorage` installs, run on a tree the
tree writer made), or the reason it was not run: never one made up."""
from __future__ import annotations

import pytest

from storagebrief.kit import mlpstorage_tree as tree
from storagebrief.kit import mlpstorage_verdict as verdict

INV = {"hostname": "h1", "memory_total_bytes": 8 * 2**30, "cpu_threads": 4}


def _run(out, kind, model, when, parameters, overrides):
    d = tree.run_folder(tree.root(out, "t"), kind, model, when)
    tree.write_run(d, kind, model=model, command="run", num_processes=8, accelerator=None, parameters=parameters,
                   overrides=overrides, inv=INV, tool_files={"summary.json": {"metric": {}}}, ours={"run_id": model})
    return d


def test_without_make_mlpstorage_the_verdict_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv(verdict.HOME_ENV, str(tmp_path / "none"))
    _run(tmp_path / "out", "kv_cache", "m", "2026-12-07T06:12:08Z", {}, {})
    doc = verdict.record(tmp_path / "out")
    assert "make mlpstorage" in doc["not_run"] and verdict.load(tmp_path / "out") == doc
    assert verdict.exported_runs(tree.root(tmp_path / "out", "t")) == 1
    assert "not run" in verdict.lines(tmp_path / "out", "kv_cache")[0]


def test_mlperfs_categories_and_reasons_by_mlperfs_code(tmp_path):
    if verdict.missing():
        pytest.skip(verdict.missing())
    out = tmp_path / "out"
    _run(out, "checkpointing", "llama3-8b", "2026-12-07T06:12:08Z", {"checkpoint": {"fsync": True}}, {})
    _run(out, "checkpointing", "llama9-9b", "2026-12-07T06:12:09Z", {}, {})
    doc = verdict.record(out)
    runs = {r["model"]: r for r in doc["targets"]["t"]["runs"]}
    assert runs["llama3-8b"]["category"] == "CLOSED" and runs["llama3-8b"]["storagebrief_run_id"] == "llama3-8b"
    assert runs["llama9-9b"]["category"] == "INVALID"
    assert any("Invalid model for checkpointing" in i["text"] for i in runs["llama9-9b"]["issues"])
    said = " ".join(verdict.lines(out, "checkpointing"))
    assert "read 2 of 2 exported runs: CLOSED 1, INVALID 1" in said and "Invalid model" in said
    assert said in verdict.paragraph(out, "checkpointing") and verdict.paragraph(out, "training") is None
    assert (out / "mlperf" / "reportgen-t.txt").read_text().count("checkpointing_run_") >= 2   # its own report


def test_a_failure_of_mlperfs_own_code_is_said_to_be_its_own(tmp_path):
    """A training run read from disk: MLPerf's size check fails on the system information its reader dropped."""
    if verdict.missing():
        pytest.skip(verdict.missing())
    out = tmp_path / "out"
    _run(out, "training", "unet3d", "2026-12-07T06:12:08Z",
         {"dataset": {"num_files_train": 9, "num_samples_per_file": 1, "record_length_bytes": 4096},
          "reader": {"batch_size": 1}}, {"dataset.num_files_train": 9})
    doc = verdict.record(out)
    (run,) = doc["targets"]["t"]["runs"]
    assert run["category"] == "INVALID"
    assert any("check_num_files_train failed" in i["text"] for i in run["issues"])
    assert "drops the system information" in verdict.lines(out, "training")[0]


def test_a_training_run_written_as_dlio_output_gets_mlperfs_size_verdict(tmp_path):
    """Written as DLIO's output, the run's host memory reaches MLPerf's size check, which gives a verdict:
    5 × 8 GiB over 4096-byte records is 10,485,760 files (more than 500 steps × 8 processes × batch 1)."""
    if verdict.missing():
        pytest.skip(verdict.missing())
    out = tmp_path / "out"
    params = {"model": {"name": "unet3d"}, "workflow": {"generate_data": False, "train": True, "checkpoint": False},
              "dataset": {"num_files_train": 9, "num_samples_per_file": 1, "record_length_bytes": 4096},
              "reader": {"batch_size": 1}}
    d = tree.run_folder(tree.root(out, "t"), "training", "unet3d", "2026-12-07T06:12:08Z")
    summary = {"start": "2026-12-07T06:12:08+00:00", "num_accelerators": 8, "metric": {}, **tree.dlio_hosts(INV)}
    tree.write_run(d, "training", model="unet3d", command="run", num_processes=8, accelerator="v100",
                   parameters=params, overrides={"dataset.num_files_train": 9}, inv=INV,
                   tool_files={"summary.json": summary}, ours={"run_id": "u"}, as_dlio=True)
    (run,) = verdict.record(out)["targets"]["t"]["runs"]
    texts = [i["text"] for i in run["issues"]]
    assert not [t for t in texts if "failed with error" in t], texts
    assert any("Insufficient number of training files" in t and ">= 10485760" in t for t in texts), texts
    assert run["category"] == "INVALID" and run["storagebrief_run_id"] == "u"
