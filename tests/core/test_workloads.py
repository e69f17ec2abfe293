"""core.workloads: the catalogue validates, the demand arithmetic, overrides merged key by key, bad specs named."""
from __future__ import annotations

import math

import pytest

from storagebrief.core import workloads
from storagebrief.core.workloads import SOURCES, WORKLOADS, WorkloadSpec, merged_spec


def test_every_catalogue_workload_validates_and_names_its_sources():
    for name, raw in WORKLOADS.items():
        spec = WorkloadSpec.model_validate(raw)
        # every accelerator with a compute time has a source for its numbers
        assert set(spec.compute_s) == set(SOURCES[name]), name
    assert workloads.MLPERF_DATASET_FACTOR == 5


def test_batch_for_uses_the_accelerator_batch_else_the_default():
    r = merged_spec("resnet50", {})
    assert r.batch_for("v100") == 64          # batch_size_by_accelerator
    assert r.batch_for("a100") == 400         # not listed: batch_size
    assert r.batch_for("anything") == 400


def test_demand_is_batch_times_record_over_compute():
    u = merged_spec("unet3d", {})
    # v100: 4 x 146,600,628 B = 586,402,512 B per batch, over 1.3604 s = 431,051,537.8 B/s
    assert u.demand_bytes_per_s("v100") == pytest.approx(431_051_537.8, abs=1)
    r = merged_spec("resnet50", {})
    # a100: 400 x 114,660 B = 45,864,000 B per batch, over 0.435 s = 105,434,482.8 B/s
    assert r.demand_bytes_per_s("a100") == pytest.approx(105_434_482.8, abs=1)
    spec = WorkloadSpec(format="npz", record_bytes=1000, batch_size=2, compute_s={"x": 0.5})
    assert spec.demand_bytes_per_s("x") == 4000.0     # 2 x 1000 / 0.5
    with pytest.raises(KeyError):
        spec.demand_bytes_per_s("y")                  # no compute time for that accelerator


def test_defaults_of_a_spec():
    spec = WorkloadSpec(format="jpeg", record_bytes=10, batch_size=1, compute_s={"x": 1.0})
    assert (spec.samples_per_file, spec.record_bytes_stdev, spec.read_threads, spec.au_threshold_percent) == \
        (1, 0, 4, 90.0)


def test_overrides_merge_into_the_reference_key_by_key():
    u = merged_spec("unet3d", {"unet3d": {"compute_s": {"v100": 2.0}, "batch_size": 8}})
    assert u.compute_s == {"v100": 2.0, "a100": 0.636, "h100": 0.323, "b200": 0.162}   # v100 replaced, rest kept
    assert u.batch_size == 8 and u.batch_for("a100") == 8 and u.batch_for("v100") == 4
    assert u.record_bytes == 146_600_628
    # the catalogue itself is not changed by an override
    assert WORKLOADS["unet3d"]["compute_s"]["v100"] == 1.3604 and WORKLOADS["unet3d"]["batch_size"] == 7
    # an override of another workload leaves this one alone
    assert merged_spec("unet3d", {"resnet50": {"batch_size": 1}}).batch_size == 7


def test_a_new_workload_from_overrides_alone():
    spec = merged_spec("mine", {"mine": {"format": "tfrecord", "record_bytes": 1000, "batch_size": 2,
                                         "compute_s": {"x": 0.5}, "samples_per_file": 10}})
    assert spec.samples_per_file == 10 and spec.demand_bytes_per_s("x") == 4000.0


@pytest.mark.parametrize("overrides, words", [
    ({"unet3d": {"compute_s": {"v100": 0}}}, "compute_s = "),
    ({"unet3d": {"compute_s": {"v100": math.nan}}}, "must be > 0 seconds"),
    ({"unet3d": {"batch_size_by_accelerator": {"v100": 0}}}, "whole numbers >= 1"),
    ({"unet3d": {"bogus": 1}}, "bogus: unknown key; allowed: "),
    ({"unet3d": {"format": "hdf5"}}, "format = 'hdf5'"),
    ({"unet3d": {"record_bytes": 0}}, "record_bytes = 0"),
])
def test_bad_overrides_name_the_workload_and_key(overrides, words):
    with pytest.raises(ValueError) as exc:
        merged_spec("unet3d", overrides)
    assert str(exc.value).startswith("workload 'unet3d': ") and words in str(exc.value)


def test_an_unknown_workload_without_overrides_names_what_is_missing():
    with pytest.raises(ValueError) as exc:
        merged_spec("nope", {})
    msg = str(exc.value)
    assert msg.startswith("workload 'nope': ")
    for key in ("format", "record_bytes", "batch_size", "compute_s"):
        assert f"{key} = " in msg and "Field required" in msg


def test_empty_compute_times_are_refused():
    with pytest.raises(ValueError, match="at least one accelerator type"):
        WorkloadSpec(format="npz", record_bytes=1, batch_size=1, compute_s={})


# --------------------------------------------------------------------------- an override's name is a name (issue 44)
def test_workload_overrides_and_checkpoint_shape_names_follow_the_same_rule():
    from storagebrief.core import checkpoint_workloads, workloads
    with pytest.raises(ValueError, match="not allowed"):
        workloads.merged_spec("<b>x</b>", {"<b>x</b>": {}})
    raw = {**{k: v for k, v in checkpoint_workloads.WORKLOADS["llama3-8b"].__dict__.items()}, "name": "../x"}
    with pytest.raises(checkpoint_workloads.CheckpointWorkloadError, match="not allowed"):
        checkpoint_workloads.CheckpointWorkload(**raw)
