"""stream_inference against an external Kafka cluster (issue 23): three brokers started by the test on
three client hosts (network namespaces, core.nethosts), the study pointed at them with
`bootstrap_servers`: it starts and stops no broker, produces and consumes through the namespace
network, says the device columns are this host's, removes its topics; a consumer group of 3 splits the
partitions, its frame counts add up and the run's latency percentiles are merged. (A group of 2 ran too until
issue 56: the same static split, 3 partitions each instead of 2, for a whole run and two TensorFlow consumers more.)"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from storagebrief import studies
from storagebrief.core import config, nethosts
from storagebrief.studies.stream_inference import cluster as kafka
from conftest import hosts_missing
from test_stream_inference import HAVE_KAFKA, WHY, _java_using

pytestmark = [pytest.mark.skipif(not HAVE_KAFKA, reason=f"Kafka not installed here: {WHY}"),
              pytest.mark.skipif(hosts_missing() is not None, reason=f"no test hosts: {hosts_missing()}"),
              pytest.mark.privileged, pytest.mark.slow, pytest.mark.e2e]

STUDY = studies.get("stream_inference")


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    """A 3-broker cluster, one broker per client host, each in its own network namespace."""
    base = tmp_path_factory.mktemp("external")
    with nethosts.HostSet.up(3, base / "hosts") as hs:
        cl = kafka.Cluster(base / "data", base / "logs", brokers=3, heap_mib=256, name="external",
                           hosts=[(h.address, h.name) for h in hs.hosts]).start()
        try:
            yield hs, cl
        finally:
            cl.stop(grace_s=0)     # the test's own data: no controlled shutdown to wait for


def _study(tmp_path, cl, consumers: int) -> pd.DataFrame:
    section = {**STUDY.tiny, "streams": [6], "partitions": [6], "consumers": consumers,
               "bootstrap_servers": cl.bootstrap.split(",")}
    data = {"targets": [{"name": "fast", "path": str(tmp_path / "fast")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "stream_inference": section}
    return STUDY.run(config.validate(data), tmp_path / "out", log=lambda *_: None, progress="off")


@pytest.mark.parametrize("consumers", [3])
def test_the_study_runs_on_an_external_cluster_with_a_consumer_group(tmp_path, external, consumers):
    hs, cl = external
    brokers_before = sorted(cl.pids)
    runs = _study(tmp_path, cl, consumers)
    assert (runs.status == "ok").all() and set(runs.kafka) == {"external"} and set(runs.brokers) == {3}
    assert all(h.address in runs.broker_disks.iloc[0] for h in hs.hosts)
    assert "device columns: this host's target 'fast'" in runs.broker_disks.iloc[0]
    # it started no broker and stopped none: the three are the test's, still running, in their namespaces
    assert _java_using(tmp_path) == [] and sorted(cl.pids) == brokers_before
    cl.check()
    for h, pid in zip(hs.hosts, cl.pids):
        assert str(pid) in os.popen(f"ip netns pids {h.name}").read().split()
    # every frame went through the namespace network and was classified
    r = runs.iloc[0]
    assert r.frames_produced == r.frames_target == r.frames_classified and r.drained
    # the group split the partitions: each consumer its own, together all of them
    cons = pd.read_csv(tmp_path / "out" / "consumers.csv")
    assert len(cons) == consumers and cons.consumer.tolist() == list(range(consumers))
    assigned = [set(a.split()) for a in cons.assigned]
    assert sum(map(len, assigned)) == len(set().union(*assigned)) == 6 == cons.partitions.sum()
    assert cons.frames_classified.sum() == r.frames_classified
    # (a stream's frames go to the partition its key hashes to: a consumer may get none)
    busy = cons[cons.frames_classified > 0]
    assert len(busy) >= 2, cons[["assigned", "frames_classified"]]
    # the run's percentiles are of every frame's latency (merged), so they lie within the consumers' own,
    # up to interpolation between neighbouring frames (linear percentiles of a merged set may pass the
    # largest consumer's by a hair: 513.7397 vs 513.7380 ms seen in CI); the max is exact
    for q, slack in (("p50", 0.01), ("p99", 0.01), ("max", 0.0)):
        col = f"latency_ms_{q}"
        lo, hi = busy[col].min() * (1 - slack), busy[col].max() * (1 + slack)
        assert lo - 1e-9 <= r[col] <= hi + 1e-9, (q, r[col], busy[col].tolist())
    assert r.latency_ms_max == pytest.approx(cons.latency_ms_max.max())
    # its topics are gone from the cluster it does not own
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": cl.bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith("stream_inference-")], sorted(topics)
    assert np.isfinite(r.device_write_bytes)
