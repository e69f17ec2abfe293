"""train_resnet50 start-up in pairs (prestart.py): which run starts whose jobs, and when none.

No TensorFlow here: the jobs are stand-ins that record start and kill, so this checks the pairing
logic in a second; the real jobs go through it in every engine run (the e2e and interrupt tests).
"""
from __future__ import annotations

import yaml

from storagebrief.core import config, sweep, targets as targets_mod
from storagebrief.studies.train_resnet50 import STUDY, prestart, run as trr


class StandIn:
    def __init__(self, index: int):
        self.index, self.started, self.killed = index, False, False

    def start(self, spec_path) -> None:
        self.started = True

    def kill(self) -> None:
        self.killed = True


def _sweep(tmp_path, **train):
    data = {"targets": [{"name": "a", "path": str(tmp_path / "a")}, {"name": "b", "path": str(tmp_path / "b")}],
            "train_resnet50": {"preprocess_outputs": str(tmp_path / "none.json"), "dataset": "generated",
                               "dataset_images": 32, "batch_size": 16, "ingest_mb_per_s": 0,
                               "checkpoint_every_steps": 0, **train}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params = config.load(tmp_path / "params.yaml")
    sw = sweep.Sweep(STUDY, params, tmp_path / "out", log=lambda *a: None)
    sw.targets = targets_mod.resolve_all(params)
    sw.state = trr.TrainState(datasets={"a": None, "b": None}, memory_unavailable=None)
    return sw, trr.plan(sw)


def _make(made):
    def make_jobs(owner, spec, ds, setting, io, splits, jobs):
        jobs.extend(StandIn(i) for i in range(len(splits)))
        made.append((owner.run_id, len(splits)))
    return make_jobs


def _run(sw, k: int) -> sweep.Run:
    spec, target, repeat = sw.state.order[k]
    return sweep.Run(sw, target, repeat, trr.run_id_for(spec, target.name, repeat))


def test_a_cold_run_starts_the_next_runs_jobs_and_that_run_starts_none(tmp_path):
    sw, points = _sweep(tmp_path, memory_limits=["none", "2.5:1"], parallel_models=[1, 2])
    order = sw.state.order
    assert [(s.sweep, t.name) for s, t, _ in order] == [("memory", "a"), ("memory", "b"), ("memory", "a"),
                                                          ("memory", "b"), ("parallel", "a"), ("parallel", "b")]
    made = []
    first, second = _run(sw, 0), _run(sw, 1)
    assert prestart.take(sw.state, first.run_id) is None
    prestart.start_next(first, _make(made), trr.run_id_for, trr.cpu_split)
    assert made == [(second.run_id, 1)] and all(j.started for j in sw.state.early.jobs)
    assert prestart.take(sw.state, _run(sw, 2).run_id) is None      # not that run's jobs: kept
    jobs = prestart.take(sw.state, second.run_id)
    assert len(jobs) == 1 and sw.state.early is None
    assert prestart.take(sw.state, second.run_id) is None              # taken once
    prestart.start_next(_run(sw, 4), _make(made), trr.run_id_for, trr.cpu_split)
    assert made[-1] == (_run(sw, 5).run_id, 2)                         # K = 2: both jobs early
    prestart.drop(sw.state)
    assert sw.state.early is None
    made.clear()
    prestart.start_next(_run(sw, 5), _make(made), trr.run_id_for, trr.cpu_split)   # the last run
    assert made == [] and sw.state.early is None


def test_no_early_start_for_a_size_limit_and_an_interrupt_kills_early_jobs(tmp_path):
    sw, _ = _sweep(tmp_path, memory_limits=["none", "2GiB"], parallel_models=[1])
    made = []
    prestart.start_next(_run(sw, 1), _make(made), trr.run_id_for, trr.cpu_split)   # next: 2GiB on 'a'
    assert made == [] and sw.state.early is None                       # it may be refused: not started
    prestart.start_next(_run(sw, 0), _make(made), trr.run_id_for, trr.cpu_split)
    early = sw.state.early.jobs
    prestart.drop(sw.state)
    assert all(j.killed for j in early) and sw.state.early is None
    prestart.drop({})                                                  # a bare sweep (tests): nothing to do
