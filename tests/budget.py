"""The suite's time budget (issue 56): no test takes over BUDGET_S of set-up, call and tear-down unless it is
listed in OVER_BUDGET with why and what it measured (seconds, under `make test`'s two workers). A fixture many
tests share (tests/suite.py's `shared_setup`) is a line of its own, `fixture <name>`. Keep the list short: a
test that lands here should first be made cheaper. tests/suite.py also orders the work by these seconds."""
from __future__ import annotations

import os

# STORAGEBRIEF_TEST_BUDGET_S: another budget for this run (the suite's own test of the check sets a tiny one)
BUDGET_S = float(os.environ.get("STORAGEBRIEF_TEST_BUDGET_S", "30"))
# STORAGEBRIEF_TEST_BUDGET_LOAD=fixed: the budget as stated whatever the load (`allowed`; the suite's own test)
LOAD_SCALED = os.environ.get("STORAGEBRIEF_TEST_BUDGET_LOAD", "scaled") != "fixed"

# nodeid, or "file::test" for every parametrization of a test -> (seconds measured under make test's two workers at
# 8e5bed8, 2026-12-07, or beside other work at 453a5ac; why it needs them)
OVER_BUDGET: dict[str, tuple[float, str]] = {
    # shared builds (tests/suite.py): one per run
    "fixture tiny_chain": (467, "dvc repro of all nine studies on conftest.TINY's knobs, read by the brief's tests"),
    "fixture tiny_chain, waited for": (340, "the other worker waits for that build when it needs the chain first"),
    # the front door in a real browser
    "tests/test_jupyterlab.py::test_every_notebook_runs_all_as_opened_in_jupyterlab":
        (290, "Run All of ten notebooks in JupyterLab, each a tiny study on one target as a user runs it (issue 48)"),
    "tests/test_jupyterlab.py::test_a_knob_edited_run_and_saved_in_jupyterlab_leaves_git_dvc_and_the_checks_as_they_were":
        (81, "starts JupyterLab and Chromium for the module, edits, runs and saves a notebook in the browser"),
    # training that has to converge, or TensorFlow jobs started and killed
    "tests/studies/train_resnet50/test_carried_loss.py::test_a_carried_job_never_spikes_above_ln_classes_once_converged":
        (137, "trains until the loss has converged, then carries the job across runs"),
    "tests/studies/train_resnet50/test_train_resnet50.py::test_second_epoch_reads_rise_only_when_the_dataset_exceeds_the_limit":
        (111, "builds the module's two training runs (two epochs, no limit and 4:1; TensorFlow start-ups)"),
    "tests/studies/train_resnet50/test_train_resnet50.py::test_parallel_jobs_each_get_a_cgroup_and_interrupt_cleans_up":
        (20, "the module's generated dataset, then two TensorFlow jobs started in their cgroups and interrupted"),
    "tests/studies/checkpoint/test_framework.py::test_killing_the_tensorflow_job_is_a_failed_row_and_leaves_nothing":
        (51, "the module's TensorFlow framework run, then a job killed mid-save"),
    "tests/studies/checkpoint/test_checkpoint.py::test_tiny_run_through_the_engine_on_two_targets":
        (73, "the module's tiny checkpoint run on a throttled and an unthrottled target, which the file's tests read"),
    # Kafka clusters (three JVM brokers each)
    "tests/studies/stream_inference/test_stream_external.py::test_the_study_runs_on_an_external_cluster_with_a_consumer_group":
        (54, "an external three-broker Kafka cluster and the study's consumer group on it"),
    "tests/studies/stream_inference/test_stream_inference.py::test_study_end_to_end_counts_bytes_profile_and_nothing_left":
        (52, "the module's Kafka cluster and a whole tiny streaming run"),
    "tests/studies/stream_inference/test_stream_inference.py::test_sigterm_mid_run_stops_brokers_and_consumers_and_writes_no_row":
        (36, "a cluster of its own stopped by SIGTERM mid-run"),
    "tests/studies/stream_inference/test_stream_inference.py::test_a_broker_dying_mid_run_fails_it_with_the_log_tail_and_leaves_nothing":
        (36, "a cluster of its own whose broker is killed mid-run"),
    # several hosts or ranks
    "tests/studies/checkpoint/test_checkpoint_hosts.py::test_ranks_write_on_both_hosts_and_restore_what_the_other_host_wrote":
        (41, "two network-namespace hosts with sshd, MPI ranks on both"),
    "tests/studies/checkpoint/test_checkpoint_mpi.py::test_mpi_ranks_give_the_forked_figures_with_a_late_rank_and_the_rank_shift":
        (40, "the same save under MPI and forked ranks, side by side"),
    "tests/studies/emulate/test_emulate_mpi.py::test_mpi_ranks_give_the_forked_figures_on_one_host":
        (34, "the same emulated training under MPI and forked ranks"),
    "tests/studies/emulate/test_emulate_hosts.py::test_ranks_on_two_hosts_give_the_one_host_figures":
        (30, "two network-namespace hosts with sshd, and the one-host run beside"),
    "tests/studies/test_every_study.py::test_runs_without_root_and_says_what_it_could_not_do":
        (45, "each study's whole tiny run as uid 65534 (TensorFlow and Kafka start-ups for two of them)"),
    "tests/studies/stream_inference/test_stream_inference.py::test_stop_reaps_every_node_and_frees_its_ports":
        (30, "a three-broker cluster started and stopped under control"),
    # whole runs interrupted
    "tests/studies/test_every_study.py::test_kill_9_mid_run_then_rerun_leaves_no_cgroup_and_no_orphan[preprocess]":
        (26, "the module's fixture: all nine studies started at once, each killed -9 once it has a cgroup, one "
             "doctor --clean (the first study's test builds it)"),
    "tests/core/test_leftovers.py::test_kill_9_leaves_nothing_a_rerun_or_doctor_does_not_remove":
        (39, "a run killed with -9, then the rerun that sweeps what it left"),
    "tests/core/test_preflight.py::test_a_bad_video_is_skipped_and_noted_and_the_good_one_streams":
        (32, "a streaming run (Kafka cluster) with one bad and one good video"),
    "tests/kit/test_calibrate.py::test_calibrate_measures_on_this_cpu_and_the_emulate_study_accepts_it":
        (31, "calibrates the emulated accelerators' compute on this CPU (timed loops)"),
    "tests/core/test_lock.py::test_concurrent_runs_on_one_target_wait_or_refuse_and_stay_clean":
        (30, "two whole runs on one target, the second waiting for the first"),
    "tests/core/test_outdir.py::test_ctrl_c_of_a_real_rerun_keeps_the_earlier_results_and_marks_the_partial_one":
        (30, "a complete run, then a rerun stopped by Ctrl-C after its first row"),
}


def _entry(nodeid: str):
    if nodeid in OVER_BUDGET:
        return OVER_BUDGET[nodeid]
    return OVER_BUDGET.get(nodeid.split("[", 1)[0])


def seconds(nodeid: str) -> float | None:
    """The listed seconds of a test (or shared fixture), or None when it is not listed."""
    entry = _entry(nodeid)
    return entry[0] if entry else None


def allowed(load_per_core: float) -> float:
    """The budget of a test that ended with the machine's 1-minute load average at `load_per_core` per CPU. The suite's
    two workers keep two cores busy (about 1 per core): the budget as stated. Past that, other work shares the CPUs
    and every test takes longer by about that factor: a test of 12 s alone took 31 s at a load of 3 per core. The
    budget catches tests slow by design, not a busy machine (tests must not fail because the machine is loaded)."""
    return BUDGET_S * max(1.0, load_per_core if LOAD_SCALED else 1.0)


def over(durations: dict[str, float], load: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """(nodeid, seconds) of every test or shared fixture over its budget (`allowed` at the load per core it ended
    at, from `load`) and not listed, slowest first."""
    load = load or {}
    return sorted(((n, s) for n, s in durations.items() if s > allowed(load.get(n, 0.0)) and _entry(n) is None),
                  key=lambda ns: -ns[1])
