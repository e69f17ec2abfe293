"""What a study is, to the rest of the package: one record in the registry.

A study is a package `storagebrief.studies.<name>` with the same rooms:
  params   the pydantic model of its params.yaml section (`Params`)
  dataset  what it generates or reads on each target
  run      the sweep hooks the engine (core.sweep) calls: prepare, plan, run_one, finish
  metrics  arithmetic on runs.csv: headlines() and metrics() (metrics.json)
  brief    its section of the brief: section(study_dir, frame, target_names)
(what run, metrics and brief hold is typed once: core/contract.py)
plus worker modules of its own. The rooms are found by name, so the registry
entry holds only what the CLI, the brief, DVC and the tests need to know, and
importing the registry never imports a study's heavy libraries (TensorFlow).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

# What the sweep engine writes for every study beside runs.csv (block-level characterization:
# core.sweep), declared as outs of every stage and read by the brief's characterization section.
from .engine_outputs import ENGINE_OUTPUTS


@dataclass(frozen=True)
class Study:
    name: str                       # params section, reports/<name>/, DVC stage name
    command: str                    # CLI subcommand (`storagebrief <command>`)
    title: str                      # section title in the brief
    notebook: str                   # notebooks/NN_<name>.py (Jupytext percent; the .ipynb is generated), run by the DVC stage
    outputs: tuple[str, ...]        # files/folders under reports/<name>/ the stage declares as outs
    brief_inputs: tuple[str, ...]   # the subset of outputs the brief stage reads
    upstream: tuple[str, ...] = ()  # other stages' outputs this stage reads (e.g. preprocess/outputs.json)
    # The smallest settings that still run every path of the study (seconds, not minutes): the
    # tests run every registered study with them (tests/studies/test_every_study.py).
    tiny: dict = field(default_factory=dict, compare=False, hash=False)
    # True: the study measures S3 targets (targets kind s3) too; False: it runs without them, noted
    object_targets: bool = False

    @property
    def stage_outputs(self) -> tuple[str, ...]:
        """Everything the stage writes under reports/<name>/: the study's outputs + the engine's, and logs/ where
        it measures S3 targets (the local gateway's log goes there: undeclared, DVC left it behind and the next
        run of the stage refused the folder as holding files no run wrote)."""
        gateway_logs = ("logs",) if self.object_targets and "logs" not in self.outputs else ()
        return self.outputs + gateway_logs + ENGINE_OUTPUTS

    @property
    def package(self) -> str:
        return f"storagebrief.studies.{self.name}"

    @property
    def source_dir(self) -> str:
        return f"lib/storagebrief/studies/{self.name}"

    @property
    def reports_dir(self) -> str:
        return f"reports/{self.name}"

    def room(self, name: str):
        """One of the study's modules (params, dataset, run, metrics, brief, ...)."""
        return importlib.import_module(f"{self.package}.{name}")

    def params_model(self):
        return self.room("params").Params

    def run(self, params, out_dir: str | Path | None = None, log=print, progress: str = "auto"):
        """Run the whole study (every target, configuration and repeat); returns runs as a frame.

        out_dir None: a fresh folder reports/runs/<time>/<name>/ of the params file's project, so
        an interactive run never replaces the pipeline's reports/<name>/ (dvc repro passes that)."""
        from . import sweep
        return sweep.run(self, params, out_dir, log=log, progress=progress)

    def headlines(self, frame, target_names: list[str]) -> list[dict]:
        return self.room("metrics").headlines(frame, target_names)

    def metrics(self, frame, target_names: list[str]) -> dict:
        return self.room("metrics").metrics(frame, target_names)

    def brief_section(self, study_dir, frame, target_names: list[str]) -> None:
        return self.room("brief").section(Path(study_dir), frame, target_names)

    def answers(self, study_dir, frame, target_names: list[str]) -> list[dict]:
        """The questions this study answers on the brief's first page: rows of {question, target,
        answer, basis} from its own outputs (a study whose brief room has `answers = None` has none)."""
        fn = self.room("brief").answers
        return fn(Path(study_dir), frame, target_names) if fn is not None else []
