"""docs/adding-a-study.md, followed for a toy study in a copy of the project: its package, its params
section, then two commands write its notebook and its DVC stage, and `storagebrief docs --write` its page's
column table and its README row. Nothing else is edited, and the new study runs through the engine like
the others."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, tracked_copy

TOY = {
    "__init__.py": '''
        """Toy study: writes one file per run and times it (the recipe's test)."""
        from ...core.study import Study

        STUDY = Study(name="toy", command="toy", title="Toy: one timed write", notebook="notebooks/07_toy.py",
                      outputs=("runs.csv", "timeseries", "inventory.json", "notes.json", "notebook.ipynb"),
                      brief_inputs=("runs.csv", "inventory.json", "notes.json"),
                      tiny={"size_kib": 64, "repeats": 1})
        ''',
    "params.py": '''
        from pydantic import Field

        from ...core.config import Strict


        class Params(Strict):
            size_kib: int = Field(256, ge=4)    # bytes per write
            repeats: int = Field(2, ge=1)
        ''',
    "dataset.py": '''
        def data_file(target):
            return target.study_dir("toy") / "blob"
        ''',
    "run.py": '''
        import os
        import time

        from ...core.sweep import Measurement, Point
        from ...kit.space import check_space
        from .dataset import data_file


        def prepare(sweep):
            check_space(sweep.targets, lambda t: sweep.p.size_kib * 1024, "the toy file")


        def plan(sweep):
            return [Point(sweep.p.size_kib, r, f"{sweep.p.size_kib} KiB") for r in range(sweep.p.repeats)]


        def run_id(size_kib, target, repeat):
            return f"toy-{target.name}-{size_kib}k-r{repeat}"


        def run_one(run, size_kib):
            path = data_file(run.target)
            path.parent.mkdir(parents=True, exist_ok=True)
            run.start_clock()
            t0 = time.perf_counter()
            with open(path, "wb") as fh:
                fh.write(os.urandom(size_kib * 1024))
                fh.flush()
                os.fsync(fh.fileno())
            seconds = time.perf_counter() - t0
            run.stop_clock()
            return Measurement({"size_kib": size_kib, "write_s": seconds,
                                "write_mb_per_s": size_kib * 1024 / seconds / 1e6})


        configure = skip = finish = close = None      # the optional hooks it has not
        ''',
    "metrics.py": '''
        from ...core.columns import Column
        from ...kit import runs
        from ...report.headlines import versus_reference

        COLUMNS = (Column("size_kib", "KiB", "bytes written"), Column("write_s", "s", "write + fsync"),
                   Column("write_mb_per_s", "MB/s", "size / write_s"))
        RUNS_COLUMNS = {"size_kib": "number", "write_mb_per_s": "number"}


        def headlines(frame, target_names):
            return versus_reference(runs.ok_runs(frame), target_names, ["size_kib"],
                                    [("write_mb_per_s", "higher", "write MB/s")])


        def metrics(frame, target_names):
            return runs.metrics(frame, target_names, headlines,
                                per_target=lambda g: {"write_mb_per_s": float(g.write_mb_per_s.mean())})
        ''',
    "brief.py": '''
        from ...report.display import show_table


        def section(study_dir, frame, names):
            show_table(frame[["target", "size_kib", "write_mb_per_s"]], "toy writes")


        answers = trace_workloads = None
        ''',
}


def _sb(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo / "lib")}
    gw = REPO / ".tools" / "bin" / "versitygw"      # the copy has no .tools: validate asks for the params' S3 gateway
    if gw.is_file() and "STORAGEBRIEF_VERSITYGW" not in env:
        env["STORAGEBRIEF_VERSITYGW"] = str(gw)
    worker = REPO / ".tools" / "bin" / "s3worker"        # the object sweep's client, built here, not in the copy
    if worker.is_file() and "STORAGEBRIEF_S3WORKER" not in env:
        env["STORAGEBRIEF_S3WORKER"] = str(worker)
    jars = REPO / ".kafka" / "lib"                  # nor .kafka: validate checks the streaming study's Kafka jars
    if jars.is_dir() and "STORAGEBRIEF_KAFKA_LIB" not in env:
        env["STORAGEBRIEF_KAFKA_LIB"] = str(jars)
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_sixth_study_is_its_package_its_params_section_and_two_generated_files(tmp_path):
    repo = tracked_copy(tmp_path / "repo")
    pkg = repo / "lib" / "storagebrief" / "studies" / "toy"
    pkg.mkdir()
    for name, text in TOY.items():
        (pkg / name).write_text(textwrap.dedent(text).lstrip())
    with (repo / "params.yaml").open("a") as fh:
        fh.write("\ntoy:\n  size_kib: 256  # bytes per write\n  repeats: 2\n")
    assert _sb(repo, "dvc-stages").returncode == 1            # the new study's stage is missing: said
    for cmd in (["notebooks", "--write"], ["dvc-stages", "--write"], ["validate"]):
        out = _sb(repo, *cmd)
        assert out.returncode == 0, out.stderr
    assert "toy" in out.stdout                                  # validate lists the new section
    assert "docs/studies/toy.md: missing" in _sb(repo, "docs").stdout   # no page, no README row: said
    assert _sb(repo, "docs", "--write").returncode == 1        # columns written; what it reproduces is ours to say
    page = repo / "docs" / "studies" / "toy.md"
    page.write_text(page.read_text().replace("\n", "\n\n**Reproduces:** nothing published (the recipe's test).\n", 1))
    assert _sb(repo, "docs", "--write").returncode == 0
    assert "| `write_mb_per_s` |" in page.read_text()            # the toy's COLUMNS, as a table
    assert "`storagebrief toy`" in (repo / "README.md").read_text()

    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    outside = sorted({line[3:] for line in changed} - {f"lib/storagebrief/studies/toy/{n}" for n in TOY})
    assert outside == ["README.md", "docs/studies/toy.md", "dvc.yaml", "notebooks/07_toy.py", "params.yaml"], outside
    stage = (repo / "dvc.yaml").read_text()
    assert "  toy:\n" in stage and "notebooks/07_toy.py" in stage and "reports/toy/runs.schema.json" in stage
    nb = (repo / "notebooks" / "07_toy.py").read_text()
    assert 'notebook.run_study("toy", toy' in nb and "'size_kib': 256" in nb

    run = _sb(repo, "toy", "--out", str(tmp_path / "out"), "--progress", "off", "-S", "run.cold_cache=false")
    assert run.returncode == 0, run.stderr[-2000:]
    frame = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert len(frame) == 2 * 2 and set(frame.status) == {"ok"}       # 2 repeats x 2 default targets
    schema = json.loads((tmp_path / "out" / "runs.schema.json").read_text())
    assert {c["name"] for c in schema["columns"] if c["source"] == "study"} == {"size_kib", "write_s",
                                                                                  "write_mb_per_s"}
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["runs"] == 4 and metrics["failed_runs"] == 0 and len(metrics["headlines"]) == 1
