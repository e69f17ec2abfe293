"""Issue 60: `storagebrief export --mlperf DIR` makes a submitter's folder (division / submitter / results / system,
systems/<system>.yaml) of the studies' MLPerf trees, and refuses bad input in one line before any work."""
from __future__ import annotations

import pytest
import yaml

from conftest import cli_run, one_line
from storagebrief.kit import mlpstorage_export as export
from storagebrief.kit import mlpstorage_tree as tree

INV = {"hostname": "h1", "memory_total_bytes": 8 * 2**30, "cpu_threads": 4,
       "targets": [{"name": "fast", "path": "/data/fast", "filesystem": "ext4"}]}


@pytest.mark.parametrize("args, words", [
    (["--division", "closedish"], "--division: 'closedish'; allowed: open, closed"),
    (["--submitter", "a/b"], "--submitter: 'a/b'; allowed:"),
])
def test_export_refuses_bad_input_in_one_line_before_work(tmp_path, args, words):
    dest = tmp_path / "sub"
    res = cli_run("export", "--mlperf", str(dest), "--reports", str(tmp_path), *args)
    assert res.returncode == 2 and words in one_line(res) and not dest.exists()


def test_export_without_trees_says_which_studies_make_them(tmp_path):
    res = cli_run("export", "--mlperf", str(tmp_path / "sub"), "--reports", str(tmp_path))
    assert res.returncode == 2 and "run the emulate, checkpoint, kv-cache or vector-search study" in one_line(res)


def test_submitters_folder_holds_each_system_and_its_description(tmp_path, monkeypatch):
    monkeypatch.setenv("STORAGEBRIEF_MLPSTORAGE", str(tmp_path / "none"))     # the layout alone, no verdict
    reports = tmp_path / "reports"
    (reports / "checkpoint").mkdir(parents=True)
    (reports / "checkpoint" / "inventory.json").write_text('{"memory_total_bytes": 8589934592, "hostname": "h1", '
                                                           '"targets": [{"name": "fast", "filesystem": "ext4"}]}')
    d = tree.run_folder(tree.root(reports / "checkpoint", "fast"), "checkpointing", "llama3-8b", "2026-12-07T06:00:00Z")
    tree.write_run(d, "checkpointing", model="llama3-8b", command="run", num_processes=8, accelerator=None,
                   parameters={}, overrides={}, inv=INV, tool_files={"summary.json": {}}, ours={})
    made = export.export(reports, tmp_path / "sub", "closed", "acme")
    top = tmp_path / "sub" / "closed" / "acme"
    assert (top / "results" / "fast" / "checkpointing" / "llama3-8b" / d.name / "summary.json").is_file()
    system = yaml.safe_load((top / "systems" / "fast.yaml").read_text())
    assert system["storage"]["filesystem"] == "ext4" and system["clients"]["total_memory_bytes"] == 8 * 2**30
    assert made["systems"] == {"fast": {"checkpointing": 1}} and "make mlpstorage" in made["verdicts"]["not_run"]
    with pytest.raises(ValueError, match="not an empty folder"):
        export.export(reports, tmp_path / "sub")


def test_training_workload_gets_an_empty_datagen_folder(tmp_path, monkeypatch):
    """MLPerf's checker lists training/<model>/datagen/ for every training workload and stops without it; the
    emulate study records no datagen run, so the folder is there and empty."""
    monkeypatch.setenv("STORAGEBRIEF_MLPSTORAGE", str(tmp_path / "none"))
    reports = tmp_path / "reports"
    d = tree.run_folder(tree.root(reports / "emulate", "fast"), "training", "unet3d", "2026-12-07T06:00:00Z")
    tree.write_run(d, "training", model="unet3d", command="run", num_processes=1, accelerator="v100",
                   parameters={}, overrides={}, inv=INV, tool_files={"summary.json": {}}, ours={}, as_dlio=True)
    export.export(reports, tmp_path / "sub")
    model = tmp_path / "sub" / "open" / "storagebrief" / "results" / "fast" / "training" / "unet3d"
    assert (model / "run" / d.name / "dlio_config" / "config.yaml").is_file()
    assert (model / "datagen").is_dir() and not any((model / "datagen").iterdir())
