"""train_resnet50: params, memory limits enforced by the kernel, cache effect, OOM, cgroup hygiene.

The TensorFlow jobs here are real ResNet50 trainings at 32x32 on a few MB-sized records, so
the whole file takes about 3-4 minutes on 2 cores. Privileged tests skip with the reason when
this process cannot create memory cgroups (not root, no controller).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml

from storagebrief.core import cache, cgroups, columns, config, longjob, sweep, targets as targets_mod
from storagebrief.studies.train_resnet50 import STUDY
from storagebrief.studies.train_resnet50 import brief as trb, dataset as trd, memory as trm
from storagebrief.studies.train_resnet50 import metrics as trmet, params as trp, run as trr


def _cgroup_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create memory cgroups"
    return longjob.memory_unavailable()


CG_REASON = _cgroup_reason()
needs_cgroups = pytest.mark.skipif(CG_REASON is not None, reason=f"memory cgroups unavailable: {CG_REASON}")


def execute(spec, target, ds, params, run_id: str, repeat: int, out: Path, need_hint=None):
    """One measured run as the engine makes it (a Run, closed after): (row, jobs, epochs, monitor series);
    the row holds status and failure_reason as the engine writes them (core.sweep.outcome_columns)."""
    run = sweep.Run(sweep.Sweep(STUDY, params, out, log=lambda *a: None), target, repeat, run_id)
    try:
        m = trr.execute_run(run, spec, ds, need_hint=need_hint)
    finally:
        run.close()
    return ({**m.row, **sweep.outcome_columns(m)}, m.tables["jobs.csv"], m.tables["epochs.csv"],
            run.monitor.timeseries() if m.ok else [])


def write_params(tmp: Path, **train) -> Path:
    data = {"targets": [{"name": "local", "path": str(tmp / "target")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.25},
            "train_resnet50": {"preprocess_outputs": str(tmp / "no-preprocess.json"), "dataset": "generated",
                               "input_size": 32, "batch_size": 16, "epochs": 2, "record_kib": 1024,
                               "dataset_images": 96, "shards": 4, "warmup_steps": 1, "ingest_mb_per_s": 0,
                               "checkpoint_every_steps": 0, "stall_timeout_s": 120, **train}}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _generated(folder: Path) -> dict:
    """The module's dataset, generated once per test run (built_once): the serial memory-limit tests are a unit of
    their own, so the module's fixtures are built twice, and generating it took 12 s of the serial phase."""
    params = config.load(write_params(folder))
    target = targets_mod.resolve_all(params)[0]
    ds = trd.resolve_dataset(params, target, params.section("train_resnet50"), log=lambda *a: None)
    return {"folder": str(Path(ds.files[0]).parent)}


@pytest.fixture(scope="module")
def shared(request, tmp_path_factory):
    """One target with one generated dataset reused by the training tests: the run's one generated set, hard-linked
    into this module's own target (the study finds it by its manifest, as a set it generated there)."""
    from suite import built_once
    made = Path(built_once(request, "train_resnet50_dataset", _generated)["folder"])
    tmp = tmp_path_factory.mktemp("train")
    params = config.load(write_params(tmp))
    target = targets_mod.resolve_all(params)[0]
    mine = target.study_dir(STUDY.name) / made.name
    mine.mkdir(parents=True)
    for f in made.iterdir():
        os.link(f, mine / f.name)
    ds = trd.resolve_dataset(params, target, params.section("train_resnet50"), log=lambda *a: None)
    assert Path(ds.files[0]).parent == mine, ds.files       # found, not generated again
    return tmp, params, target, ds


# --------------------------------------------------------------------------- params
@pytest.mark.parametrize("override, needle", [
    ("train_resnet50.batch_size=0", "batch_size"),
    ("train_resnet50.memory_limits=[none,'2.5:0']", "both sides"),
    ("train_resnet50.memory_limits=['lots']", "not 'none', a dataset:memory ratio"),
    ("train_resnet50.parallel_memory=1MiB", "below 16 MiB"),
    ("train_resnet50.parallel_models=[0]", "1..256"),
    ("train_resnet50.input_size=16", "input_size"),
    ("train_resnet50.unknown=1", "unknown key; allowed:"),
    ("train_resnet50.dataset_images=8", "smaller than batch_size"),
    ("train_resnet50.num_classes=3", "batch_size=16 is not a multiple of num_classes=3"),
])
def test_bad_params_name_the_key(tmp_path, override, needle):
    with pytest.raises(config.ParamsError) as exc:
        config.load(write_params(tmp_path), [override])
    assert needle in str(exc.value)


def test_unknown_target_and_missing_tfrecords_are_clear(tmp_path):
    params = config.load(write_params(tmp_path, targets=["nope"]))
    with pytest.raises(config.ParamsError, match="unknown target 'nope'"):
        STUDY.run(params, tmp_path / "out")
    params = config.load(write_params(tmp_path, dataset="preprocess"))
    target = targets_mod.resolve_all(params)[0]
    with pytest.raises(config.ParamsError, match="run `storagebrief preprocess` first"):
        trd.resolve_dataset(params, target, params.section("train_resnet50"))


def test_memory_settings_parse():
    assert trp.parse_memory("none").kind == "none"
    r = trp.parse_memory("2.5:1")
    assert r.kind == "ratio" and r.value == pytest.approx(0.4)
    assert trp.parse_memory("1:5").value == pytest.approx(5.0)
    assert trp.parse_memory("2GiB").value == 2 * 2**30
    assert trp.parse_memory("1500MB").value == 1.5e9


def test_cpu_split_and_plan(tmp_path):
    assert trr.cpu_split(1, 2) == [[0, 1]]
    assert trr.cpu_split(2, 2) == [[0], [1]]
    assert trr.cpu_split(4, 2) == [[0], [1], [0], [1]]
    p = config.load(write_params(tmp_path, memory_limits=["none", "2.5:1"], parallel_models=[1, 2, 4],
                                 parallel_memory="2.5:1", ingest_mb_per_s=5,
                                 checkpoint_every_steps=3)).section("train_resnet50")
    runs = trr.scenarios(p)
    assert [(r.sweep, r.models, r.memory) for r in runs[:4]] == [
        ("memory", 1, "none"), ("memory", 1, "2.5:1"), ("parallel", 2, "2.5:1"), ("parallel", 4, "2.5:1")]
    assert runs[4].ingest_mb_per_s == 5 and runs[5].checkpoint_every_steps == 3



def test_page_ones_memory_sweep_runs_memory_runs_times_and_the_other_sweeps_repeats_times(tmp_path):
    """Issue 61: answer points repeated, exploratory points once."""
    p = config.load(write_params(tmp_path, memory_limits=["none", "2.5:1"], parallel_models=[2], memory_runs=3,
                                 ingest_mb_per_s=0, checkpoint_every_steps=0)).section("train_resnet50")
    sweep = types.SimpleNamespace(p=p, state=types.SimpleNamespace(memory_unavailable=None), note=print)
    got = [(pt.config.sweep, pt.config.memory, pt.repeat) for pt in trr.plan(sweep)]
    assert got == [("memory", "none", 1), ("memory", "2.5:1", 1), ("parallel", "2.5:1", 1),
                   ("memory", "none", 2), ("memory", "2.5:1", 2), ("memory", "none", 3), ("memory", "2.5:1", 3)]


@pytest.mark.slow
def test_generated_dataset_is_imagenet_like(shared):
    _, _, target, ds = shared
    assert ds.source == "generated" and ds.records == 96 and len(ds.files) == 4
    assert all(str(target.study_dir("train_resnet50")) in f for f in ds.files)
    sizes = [s for f in ds.files for s in trd._frame_sizes(Path(f))]
    assert len(sizes) == 96
    assert 700 * 1024 < sum(sizes) / len(sizes) < 1400 * 1024   # ~record_kib each


# --------------------------------------------------------------------------- the kernel enforces limits
@pytest.mark.privileged
@needs_cgroups
def test_memory_limit_is_enforced_by_the_kernel(tmp_path):
    """A process in the cgroup cannot hold more than the limit: page cache is capped, anon is OOM-killed."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.write(os.urandom(1 << 20) * 160)
    os.sync()
    cache.fadvise_dontneed([big])
    limit = 64 * trp.MIB
    with cgroups.Cgroup("test-enforce", memory_limit_bytes=limit) as group:
        assert group.memory_limit_applied() == limit
        join = "import sys, os\n[open(f, 'w').write(str(os.getpid())) for f in sys.argv[2:]]\n"
        reader = subprocess.run([sys.executable, "-c", join + "fh = open(sys.argv[1], 'rb')\n"
                                 "while fh.read(1 << 20): pass\nprint('read')", str(big), *group.procs_files],
                                capture_output=True, text=True, timeout=60)
        assert reader.returncode == 0 and "read" in reader.stdout
        stats = group.memory_stats()
        assert stats["memory_peak_bytes"] <= limit      # 160 MiB read through a 64 MiB cgroup
        hog = subprocess.run([sys.executable, "-c", join + "x = bytearray(256 << 20)\nprint('survived')",
                              "-", *group.procs_files], capture_output=True, text=True, timeout=60)
        assert hog.returncode in (-9, 137) and "survived" not in hog.stdout
        assert group.memory_stats().get("oom_kills", 1) >= 1
    assert not cgroups.leftover_dirs(owner_pid=os.getpid())


# --------------------------------------------------------------------------- without memory cgroups (issue 10)
def _no_cgroup(*a, **k):
    raise cgroups.CgroupUnavailable("no writable 'memory' cgroup controller (test)")


def _no_job_cgroup(*a, **k):
    return None, "no writable 'memory' cgroup controller (test)"


def test_memory_helpers_tolerate_a_job_without_cgroup(tmp_path, monkeypatch):
    """No root / no memory controller: every use of a job's group takes None; the row says NaN, not 0."""
    assert trm.memory_need(None) is None
    assert trm.final_stats(None) == {} and trm.safe_stats(None) == {} and trm.anon_bytes(None) == 0
    trm.reset_peak(None)
    params = config.load(write_params(tmp_path))
    target = targets_mod.resolve_all(params)[0]
    run = sweep.Run(sweep.Sweep(STUDY, params, tmp_path / "out", log=lambda *a: None), target, 1, "t-nocg")
    monkeypatch.setattr(sweep.Run, "cgroup", _no_cgroup)
    monkeypatch.setattr(longjob, "_job_cgroup", _no_job_cgroup)
    ds = trd.Dataset([str(tmp_path / "a.tfrecord")], 96, 96 * 1000, "generated")
    jobs: list = []
    trr._make_jobs(run, trr.RunSpec("memory", 1, "none"), ds, trp.parse_memory("none"), None, [[0]], jobs)
    assert len(jobs) == 1 and jobs[0].group is None and jobs[0].limit_bytes is None
    with pytest.raises(cgroups.CgroupUnavailable):   # a limited run cannot go without its cgroup
        trr._make_jobs(run, trr.RunSpec("memory", 1, "2.5:1"), ds, trp.parse_memory("2.5:1"), None, [[0]], [])
    j = jobs[0]
    j.ready = {"device": "CPU", "startup_s": 1.0, "rss_peak_bytes": 1500 * trp.MIB}
    for setting in ("none", "2.5:1"):
        trr._arm([j], trp.parse_memory(setting), ds)
    assert j.need_bytes == 1500 * trp.MIB and j.anon_ready == 0
    # the ratio's cap needs no cgroup: it evicts dataset pages itself (cachecap.py)
    assert j.cache_share_bytes == int(96 * 1000 * 0.4) and j.cache_cap is not None
    j.done = {"seconds": 2.0, "checkpoints": 0, "checkpoint_bytes": 0, "checkpoint_s": 0.0}
    j.epochs = [{"epoch": e, "seconds": 1.0, "images": 96, "read_bytes": 96_000, "pipeline_bytes": 96_000,
                 "loss": 2.0 - e / 10, "accuracy": 0.3} for e in (1, 2)]
    j.stats = trm.final_stats(j.group)
    row, job_rows, epoch_rows = trmet._rows({"run_id": "t-nocg", "target": "local", "status": "ok"}, [j], 2.0,
                                            {}, [], {}, False, ds)
    assert row["memory_need_bytes"] == 1500 * trp.MIB and row["images"] == 192
    for key in ("memory_peak_bytes", "memory_failcnt", "oom_kills", "memory_anon_growth_bytes"):
        assert row[key] != row[key], f"{key} should be NaN without a cgroup, got {row[key]}"
    assert job_rows[0]["memory_peak_bytes"] is None and len(epoch_rows) == 2
    failed = trr._failed({"run_id": "t-nocg"}, [j], "job 0 exited with code 1", False)
    assert not failed.ok and failed.row["oom_kills"] != failed.row["oom_kills"]


# --------------------------------------------------------------------------- real training runs
# The baseline's second epoch must come from the page cache: a study beside it dropping every cache (drop_caches,
# as root) turned "stays cached" into re-reads (seen under two workers: the 4:1 run read +23 % instead of > +50 %),
# and these runs ran alone for it. No study run in the suite drops the machine's cache now (conftest: each evicts
# its own files), so they run beside the others.


@pytest.fixture(scope="module")
def memory_runs(shared):
    """Baseline and 4:1-limited training of the same 96 MB dataset (2 epochs each), through the engine as the study
    runs them: the limited run takes over the baseline's TensorFlow job (reuse.py) instead of starting its own (two
    separate runs cost ~25 s of CPU more, issue 56). Each: (row, its jobs, its epochs, its monitor series)."""
    if CG_REASON:
        pytest.skip(f"memory cgroups unavailable: {CG_REASON}")
    tmp = shared[0]
    out = tmp / "out-memory"
    params = config.load(write_params(tmp), ["train_resnet50.memory_limits=[none,'4:1']",
                                             "train_resnet50.parallel_models=[]"])
    frame = STUDY.run(params, out, log=lambda *a: None, progress="off")
    jobs, epochs = pd.read_csv(out / "jobs.csv"), pd.read_csv(out / "epochs.csv")

    def of(setting: str) -> tuple:
        row = frame[frame.memory_setting == setting].iloc[0].to_dict()
        rid, series = row["run_id"], out / "timeseries" / f"{row['run_id']}.csv"
        return (row, jobs[jobs.run_id == rid].to_dict("records"),
                epochs[epochs.run_id == rid].sort_values("epoch").to_dict("records"),
                pd.read_csv(series).to_dict("records") if series.exists() else [])

    base, limited = of("none"), of("4:1")
    assert limited[0]["job_reused_from"] == base[0]["run_id"], limited[0].get("failure_reason")
    return base, limited


@pytest.mark.privileged
@pytest.mark.slow
@needs_cgroups
def test_second_epoch_reads_rise_only_when_the_dataset_exceeds_the_limit(memory_runs):
    (base, _, base_epochs, _), (lim, _, lim_epochs, _) = memory_runs
    assert base["status"] == "ok", base["failure_reason"]
    assert lim["status"] == "ok", lim["failure_reason"]
    # The ratio caps the job's page cache at a quarter of the dataset: it cannot all stay cached.
    assert lim["page_cache_cap_bytes"] == pytest.approx(lim["dataset_bytes"] / 4, abs=1)
    assert lim["page_cache_reclaims"] > 0
    # Held near the cap (reads between two 50 ms polls may overshoot it) and far below the baseline's.
    assert lim["page_cache_mean_bytes"] < lim["page_cache_cap_bytes"] + 16 * trp.MIB
    assert base["page_cache_mean_bytes"] > lim["page_cache_mean_bytes"] + 16 * trp.MIB
    # Epoch 1 reads the dataset from the device in both runs (cold cache).
    for e in (base_epochs[0], lim_epochs[0]):
        assert e["job_read_bytes"] > 0.5 * e["pipeline_bytes"]
    lim2 = lim_epochs[1]
    # With a quarter of the dataset cached at most, most of epoch 2 comes from the device.
    assert lim2["job_read_bytes"] > 0.5 * lim2["pipeline_bytes"], "limited run should re-read epoch 2"
    if base["foreign_cache_drops"]:
        pytest.skip(f"another process dropped the page cache {base['foreign_cache_drops']} times during the "
                    "baseline run; the 'stays cached' half cannot be judged")
    base2 = base_epochs[1]
    assert base2["job_read_bytes"] < 0.1 * base2["pipeline_bytes"], "baseline epoch 2 should hit the cache"


@pytest.mark.privileged
@pytest.mark.slow
@needs_cgroups
def test_tiny_training_really_trains(memory_runs):
    (base, jobs, epochs, series), _ = memory_runs
    assert base["status"] == "ok"
    assert base["loss_last_epoch"] < base["loss_first_epoch"]
    assert base["images"] == 2 * (96 // 16) * 16
    assert base["batches"] == "class-balanced"
    assert base["tf_device"] in ("CPU",) or base["tf_device"].startswith("GPU")
    assert series and {"read_mb_per_s", "read_iops"} <= set(series[0])
    assert jobs[0]["memory_peak_bytes"] > 500 * trp.MIB       # TensorFlow + ResNet50 really ran in the group
    assert not cgroups.leftover_dirs(owner_pid=os.getpid())


@pytest.mark.privileged
@pytest.mark.slow
@needs_cgroups
def test_oom_becomes_a_failed_run_row(shared):
    tmp, params, target, ds = shared
    row, jobs, epochs, _ = execute(trr.RunSpec("memory", 1, "450MiB"), target, ds, params, "t-oom", 1,
                                   tmp / "out-oom")
    assert row["status"] == "failed"
    assert "OOM-killed" in row["failure_reason"] and "450 MiB" in row["failure_reason"]
    assert row["oom_kills"] >= 1 and not jobs and not epochs
    assert not cgroups.leftover_dirs(owner_pid=os.getpid())
    # With a measured need, a limit below it is refused up front with the minimum to use.
    row, *_ = execute(trr.RunSpec("memory", 1, "450MiB"), target, ds, params, "t-oom2", 1,
                      tmp / "out-oom", need_hint=1200 * trp.MIB)
    assert row["status"] == "failed" and "use at least 1,248 MiB" in row["failure_reason"]


@pytest.mark.privileged
@pytest.mark.slow
@pytest.mark.e2e
@needs_cgroups
def test_parallel_jobs_each_get_a_cgroup_and_interrupt_cleans_up(shared, monkeypatch):
    """K=2: two cgroups, each holding its own job; an interrupt kills both, removes both, writes no row."""
    tmp, params, target, ds = shared
    seen = {}
    real_poll = trr._poll

    def spy(jobs, until, stall_s, timeout_s):
        if until == "ready":    # both jobs started, each in its cgroup (its first act), loading TensorFlow: Ctrl-C
            deadline = time.monotonic() + 120
            while not all(j.proc.pid in j.group.pids() for j in jobs) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen["groups"] = [(j.group.dirs["memory"][1], j.proc.pid, j.group.pids(), j.spec["cpus"]) for j in jobs]
            seen["procs"] = [j.proc for j in jobs]
            assert all(j.proc.poll() is None for j in jobs)
            raise KeyboardInterrupt   # as Ctrl-C would, while both jobs are alive in their cgroups
        real_poll(jobs, until, stall_s, timeout_s)

    monkeypatch.setattr(trr, "_poll", spy)
    monkeypatch.setattr(trr, "scenarios", lambda p: [trr.RunSpec("parallel", 2, "2.5:1")])
    out = tmp / "out-parallel"
    with pytest.raises(KeyboardInterrupt):
        STUDY.run(params, out, log=lambda *a: None)
    dirs = [g[0] for g in seen["groups"]]
    assert len(set(dirs)) == 2
    for d, pid, pids, cpus in seen["groups"]:
        assert pid in pids and len(cpus) == max(1, len(os.sched_getaffinity(0)) // 2)
    assert not any(d.exists() for d in dirs)
    assert all(p.poll() is not None for p in seen["procs"])
    assert not cgroups.leftover_dirs(owner_pid=os.getpid())
    runs = out / "runs.csv"
    assert not runs.exists() or pd.read_csv(runs).empty


@pytest.mark.privileged
@pytest.mark.slow
@pytest.mark.e2e
@needs_cgroups
def test_sigterm_of_the_study_removes_its_cgroups(shared):
    tmp, params, target, ds = shared
    path = write_params(tmp)   # same target and dataset spec: the generated set is reused
    proc = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "train-resnet50", "--params", str(path),
                             "--out", str(tmp / "out-term"), "-S", "train_resnet50.parallel_models=[]",
                             "-S", "train_resnet50.memory_limits=[none]"],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        def job_groups():
            return [d for d in cgroups.leftover_dirs(owner_pid=proc.pid) if "train_resnet50-memory" in d.name]

        while time.monotonic() < deadline and not job_groups():
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
            time.sleep(0.1)
        groups = job_groups()
        assert groups, "the study never created its job cgroup"
        time.sleep(1.0)   # the job process is starting inside it
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert not cgroups.leftover_dirs(owner_pid=proc.pid)
    runs = tmp / "out-term" / "runs.csv"
    assert not runs.exists() or pd.read_csv(runs).empty
    # No orphaned training job keeps running.
    out = subprocess.run(["pgrep", "-f", "storagebrief.studies.train_resnet50.worker import worker_main"], capture_output=True,
                         text=True)
    mine = [pid for pid in out.stdout.split() if str(tmp) in Path(f"/proc/{pid}/cmdline").read_text(errors="ignore")]
    assert not mine


# --------------------------------------------------------------------------- analysis
@pytest.mark.privileged
@pytest.mark.slow
@needs_cgroups
def test_tables_and_headlines_from_real_rows(memory_runs):
    (base, *_), (lim, *_) = memory_runs
    rows = []
    for target in ("local", "other"):
        for r in (base, lim):
            rows.append({**r, "target": target})
    frame = pd.DataFrame(rows)
    table = trb.profile_table(frame, "local")
    assert list(table.columns) == ["Metric", "baseline (none)", "limited 4:1"]
    assert "Avg. throughput MiB/s" in set(table.Metric)
    eff = trmet.memory_effect(frame, "local")
    assert eff["setting"] == "4:1" and eff["read_ratio"] > 0
    hs = {h["id"]: h for h in trmet.headlines(frame, ["local", "other"])}
    assert {h["metric"] for h in hs.values()} == {"training_time_s", "images_per_s", "job_read_bytes"}
    reads = hs["job_read_bytes:local|4:1_vs_none"]   # the seed's finding, limited vs none on one target
    assert reads["delta_percent"] == round((lim["job_read_bytes"] / base["job_read_bytes"] - 1) * 100, 1)
    if base["foreign_cache_drops"]:
        pytest.skip(f"another process dropped the page cache {base['foreign_cache_drops']} times during the "
                    "baseline run; the limited run's extra reads cannot be judged")
    assert reads["delta_percent"] > 50 and reads["ref"] == "memory 4:1" and reads["other"] == "no limit"
    m = trmet.metrics(frame, ["local", "other"])
    assert m["runs"] == 4 and "local" in m


def test_training_check_says_how_many_runs_fell(monkeypatch):
    """The brief states the loss's direction as measured, never 'fell' for a run whose loss rose."""
    said = []
    monkeypatch.setattr(trb, "show_md", said.append)
    frame = pd.DataFrame({"loss_first_epoch": [2.0, 1.0], "loss_last_epoch": [1.0, 1.5],
                          "accuracy_last_epoch": [0.5, 0.4], "num_classes": [4, 4],
                          "job_reused_from": [None, "run-a"]})
    trb._training_check(frame)
    assert "The loss fell from the first to the last epoch in 1 of 1 runs that started a fresh model" in said[0]
    assert "in 0 of 1 that carried on a model from an earlier run" in said[0]
    assert "accuracy 0.45 mean (chance 0.25)" in said[0]
    # spikes are judged on carried (converged) runs: a fresh model's steps at chance are no fault
    said.clear()
    trb._training_check(frame.assign(loss_max_step_last_epoch=[1.69, 0.31]))
    assert "largest single-step loss of a carried run's last epoch was 0.310; 0 of 1 carried runs had a step" in said[0]
