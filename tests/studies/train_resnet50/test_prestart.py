"""train_resnet50 start-up in pairs (prestart.py): which run starts whose jobs, and when none.

No TensorFlow here: the jobs are stand-ins that record start and kill, so this checks the pairing
logic in a second; the real jobs go through it in every engine run (the e2e and interrupt tests).
"""
from __future__ import annotations

import yaml

from storagebrief.core import config, sweep, targets as targets_mod
from storagebrief.studies.train_resnet50 import STUDY, prestart, reuse, run as trr


class StandIn:
    def __init__(self, index: int):
        self.index, self.started, self.killed = index, False, False

    def start(self) -> None:
        self.started = True

    def end(self) -> None:
        self.killed = True
        if hasattr(self, "group"):
            self.group.remove()


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
    points = trr.plan(sw)
    sw.set_plan(points)                              # as the engine does: sweep.runs_after reads it
    return sw, points


def _order(sw) -> list[tuple]:
    """(config, target, repeat) of every run, in the engine's order (sweep.planned)."""
    return [(r.config, r.target, r.repeat) for r in sw.planned()]


def _make(made):
    def make_jobs(owner, spec, ds, setting, io, splits, jobs):
        jobs.extend(StandIn(i) for i in range(len(splits)))
        made.append((owner.run_id, len(splits)))
    return make_jobs


def _run(sw, k: int) -> sweep.Run:
    return sw.ahead(sw.planned()[k])


def test_a_cold_run_starts_the_next_runs_jobs_when_it_cannot_pass_on_its_own(tmp_path):
    sw, points = _sweep(tmp_path, memory_limits=["2GiB"], parallel_models=[2])
    order = _order(sw)
    assert [(s.sweep, s.models, t.name) for s, t, _ in order] == [
        ("memory", 1, "a"), ("memory", 1, "b"), ("parallel", 2, "a"), ("parallel", 2, "b")]
    made = []
    prestart.start_next(_run(sw, 0), _order(sw)[0][0], _make(made), trr.cpu_split)
    assert made == [] and sw.state.early is None        # the next run limits by size: it may be refused
    assert prestart.take(sw.state, _run(sw, 1).run_id) is None
    prestart.start_next(_run(sw, 1), _order(sw)[1][0], _make(made), trr.cpu_split)
    third = _run(sw, 2)
    assert made == [(third.run_id, 2)] and all(j.started for j in sw.state.early.jobs)   # K = 2: both early
    assert prestart.take(sw.state, _run(sw, 3).run_id) is None      # not that run's jobs: kept
    jobs = prestart.take(sw.state, third.run_id)
    assert len(jobs) == 2 and sw.state.early is None
    assert prestart.take(sw.state, third.run_id) is None              # taken once
    # the K = 2 run on 'a' leaves its jobs to the one on 'b' (reuse.py): nothing starts early
    prestart.start_next(third, _order(sw)[2][0], _make(made), trr.cpu_split)
    prestart.start_next(_run(sw, 3), _order(sw)[3][0], _make(made), trr.cpu_split)   # the last run
    assert made == [(third.run_id, 2)] and sw.state.early is None


def test_no_early_start_for_a_size_limit_and_an_interrupt_kills_early_jobs(tmp_path):
    sw, _ = _sweep(tmp_path, memory_limits=["none", "2GiB"], parallel_models=[1])
    made = []
    prestart.start_next(_run(sw, 1), _order(sw)[1][0], _make(made), trr.cpu_split)   # next: 2GiB on 'a'
    assert made == [] and sw.state.early is None                       # it may be refused: not started
    prestart.start_next(_run(sw, 0), _order(sw)[0][0], _make(made), trr.cpu_split)
    assert made == [] and sw.state.early is None                       # run 0 passes its job on instead
    prestart.start_next(_run(sw, 3), _order(sw)[3][0], _make(made), trr.cpu_split)   # 2GiB 'b' -> 2.5:1 'a'
    early = sw.state.early.jobs
    prestart.drop(sw.state)
    assert all(j.killed for j in early) and sw.state.early is None
    prestart.drop({})                                                  # a bare sweep (tests): nothing to do


class Group:
    removed = False
    dirs: dict = {}
    io = None

    def remove(self) -> None:
        self.removed = True


class Reusable(StandIn):
    """A one-model job that can be re-armed (reuse.py) and has a cgroup to hand over."""
    def __init__(self, index: int, run_id: str):
        super().__init__(index)
        self.group, self.run_id, self.armed = Group(), run_id, []
        self.need_bytes = 1 << 30

    def again(self, changes, run_id) -> None:
        self.armed.append((run_id, changes))
        self.reused_from, self.run_id = self.run_id, run_id


def test_jobs_are_kept_for_the_next_run_with_as_many_models_on_any_target(tmp_path):
    sw, _ = _sweep(tmp_path, memory_limits=["none", "2.5:1", "2GiB"], parallel_models=[1, 2])
    order = _order(sw)
    assert [(s.sweep, s.memory, s.models, t.name) for s, t, _ in order] == [
        ("memory", "none", 1, "a"), ("memory", "none", 1, "b"), ("memory", "2.5:1", 1, "a"),
        ("memory", "2.5:1", 1, "b"), ("memory", "2GiB", 1, "a"), ("memory", "2GiB", 1, "b"),
        ("parallel", "2.5:1", 2, "a"), ("parallel", "2.5:1", 2, "b")]
    first = _run(sw, 0)
    job = Reusable(0, first.run_id)
    assert reuse.keep(sw.state, first, order[0][0], [job])
    made = []
    prestart.start_next(first, order[0][0], _make(made), trr.cpu_split)
    assert made == []                                # the next run (on 'b') takes the kept job: none started
    second = _run(sw, 1)
    assert reuse.take(sw.state, second, order[1][0], [{"seed": 7}]) == [job]
    assert job.armed == [(second.run_id, {"seed": 7})] and sw.state.kept == {}
    # a size limit (made with the cgroup) never takes kept jobs; K = 2 takes K = 2 jobs; the last run keeps none
    assert not reuse.compatible(order[4][0]) and reuse.compatible(order[-1][0])
    assert not reuse.keep(sw.state, _run(sw, 7), order[7][0], [Reusable(0, "x"), Reusable(1, "x")])
    pair = [Reusable(0, _run(sw, 6).run_id), Reusable(1, _run(sw, 6).run_id)]
    assert reuse.keep(sw.state, _run(sw, 6), order[6][0], pair)
    assert not reuse.available(sw.state, order[2][0], None)          # K = 1 finds no K = 2 jobs
    assert not reuse.available(sw.state, order[7][0], object())      # a throttled target needs their io group
    assert reuse.take(sw.state, _run(sw, 7), order[7][0], [{"seed": 1}, {"seed": 2}]) == pair
    assert [p.armed[0][1] for p in pair] == [{"seed": 1}, {"seed": 2}]
    sw.state.kept[1] = [job]
    reuse.drop(sw.state)
    assert job.killed and job.group.removed and sw.state.kept == {}


def test_jobs_wait_idle_across_other_runs_only_while_they_need_little_memory(tmp_path):
    sw, _ = _sweep(tmp_path, memory_limits=["none", "2.5:1"], parallel_models=[1, 2], ingest_mb_per_s=20)
    order = _order(sw)
    assert [(s.sweep, s.models) for s, _, _ in order][3:7] == [("memory", 1), ("parallel", 2), ("parallel", 2),
                                                               ("ingest", 1)]
    ram = trr.total_memory_bytes()
    big = Reusable(0, _run(sw, 0).run_id)
    big.need_bytes = ram // 4
    assert reuse.keep(sw.state, _run(sw, 0), order[0][0], [big])   # the next run takes it
    sw.state.kept.clear()
    # after run 3 the K = 1 job would sit idle through both K = 2 runs: only if it needs <= RAM / 8
    assert not reuse.keep(sw.state, _run(sw, 3), order[3][0], [big])
    small = Reusable(0, _run(sw, 3).run_id)
    small.need_bytes = ram // 16
    assert reuse.keep(sw.state, _run(sw, 3), order[3][0], [small])
    assert reuse.available(sw.state, order[6][0], None) and not reuse.available(sw.state, order[4][0], None)


def test_a_kept_job_that_does_not_re_arm_is_killed_and_the_run_starts_its_own(tmp_path):
    sw, _ = _sweep(tmp_path, memory_limits=["none", "2.5:1"], parallel_models=[1])
    order = _order(sw)
    job = Reusable(0, _run(sw, 0).run_id)
    assert reuse.keep(sw.state, _run(sw, 0), order[0][0], [job])

    def stalls(jobs, until, stall_s, timeout_s):
        raise RuntimeError("job 0 made no progress")

    third = _run(sw, 2)
    assert reuse.take(sw.state, third, order[2][0], [{}], poll=stalls) is None
    assert job.killed and job.group.removed and sw.state.kept == {}
    assert any(n.startswith(f"{third.run_id}: the jobs kept from") for n in sw.notes)


def test_the_study_close_ends_kept_and_early_jobs_even_after_an_error_between_runs(tmp_path):
    """close() runs whatever ended the sweep (finish() only after the last run): nothing is left."""
    sw, _ = _sweep(tmp_path, memory_limits=["2GiB"], parallel_models=[2])
    job = Reusable(0, _run(sw, 0).run_id)
    sw.state.kept[1] = [job]                         # kept by a run, waiting for a later one
    started = []

    def make_jobs(owner, spec, ds, setting, io, splits, jobs):
        jobs.extend(StandIn(i) for i in range(len(splits)))
        started.extend(jobs)
    prestart.start_next(_run(sw, 1), _order(sw)[1][0], make_jobs, trr.cpu_split)   # the K = 2 run's, early
    assert len(started) == 2 and all(j.started for j in started)
    trr.close(sw)
    assert job.killed and job.group.removed and sw.state.kept == {}
    assert all(j.killed for j in started) and sw.state.early is None
    trr.close(sw)                     # twice: nothing left to end
    sw.state = None
    trr.close(sw)                     # prepare failed before any state


def test_every_job_made_is_the_engines_so_nothing_outlives_the_sweep(tmp_path):
    """Jobs made for a run, kept for a later one or started early all sit in sweep.jobs, which the engine ends
    after the study's close hook however the sweep ends (core/longjob.py); their cgroups go with them."""
    import os
    from storagebrief.core import cgroups
    from storagebrief.studies.train_resnet50.dataset import Dataset
    from storagebrief.studies.train_resnet50.params import parse_memory

    sw, _ = _sweep(tmp_path, memory_limits=["none"], parallel_models=[2])
    run = _run(sw, 0)
    jobs: list = []
    ds = Dataset([str(tmp_path / "a.tfrecord")], 96, 96_000, "generated")
    trr._make_jobs(run, trr.RunSpec("parallel", 2, "none"), ds, parse_memory("none"), None, [[0], [0]], jobs)
    assert len(jobs) == 2 and set(sw.jobs) == {j.worker for j in jobs}
    assert [j.worker.name for j in jobs] == [f"{run.run_id}-j0", f"{run.run_id}-j1"]
    sw.state.kept[2] = jobs                      # kept for a later run: still the engine's
    sw.jobs.end_all()
    assert len(sw.jobs) == 0 and not [d for d in cgroups.leftover_dirs(owner_pid=os.getpid()) if run.run_id in d.name]
