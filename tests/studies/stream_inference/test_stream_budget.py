"""The streaming study budgets its processes before any work (issue 57: every study budgets memory and tasks through
the one budget module, kit.budget, with the numbers in the refusal): the brokers it starts, one producer process per
stream and the consumer group, from floors measured here (params.py). Before: a stream count of thousands started
that many interpreters unchecked."""
from __future__ import annotations

import pytest

from storagebrief.kit import budget
from storagebrief.studies.stream_inference.params import StreamParams
from child_cgroup import validate_in


def test_brokers_producers_and_consumers_beyond_the_limits_are_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(budget, "memory_left", lambda: (2 * budget.GIB, "the memory cgroup /x (limit 2.00 GiB)"))
    monkeypatch.setattr(budget, "pids_left", lambda: None)
    with pytest.raises(ValueError) as err:
        StreamParams(streams=[2, 8], consumers=2).check_machine()
    text = str(err.value)
    assert len(text.splitlines()) == 1 and text.startswith(
        "stream_inference.streams = [2, 8], consumers = 2, brokers = 3: 3 brokers, 8 producer processes and 2 "
        "consumers need 3.27 GiB (3 × (320 MiB heap + 64 MiB) + 8 × 54 MiB + 2 × 880 MiB), more than 80% of the "
        "2.00 GiB this run may use (the memory cgroup /x (limit 2.00 GiB)): lower stream_inference.streams"), text
    monkeypatch.setattr(budget, "pids_left", lambda: (300, "pids.max 400 in /x (100 in use)"))
    with pytest.raises(ValueError, match=r"1 consumers, 333 tasks \(3 × 89 \+ 7 × 8 \+ 1 × 10 threads\), more than "
                                         r"the 300 this run may start \(pids.max 400 in /x"):
        StreamParams(streams=[7], brokers=3).check_machine()
    # an external cluster's brokers are not ours to count: its producers hold a thread per bootstrap server
    StreamParams(streams=[7], bootstrap_servers=["10.0.0.1:9092", "10.0.0.2:9092"]).check_machine()
    monkeypatch.setattr(budget, "pids_left", lambda: None)              # no pids limit: room enough
    monkeypatch.setattr(budget, "memory_left", lambda: (64 * budget.GIB, "MemAvailable"))
    StreamParams().check_machine()                                      # the defaults fit


def test_validate_in_a_small_pids_cgroup_refuses_the_streams_before_any_work(tmp_path):
    res, d = validate_in("pids", {"pids.max": 200}, tmp_path, "stream_inference: {streams: [2, 40]}")
    assert "stream_inference.streams = [2, 40], consumers = 1, brokers = 3:" in res.stderr
    assert "tasks (3 × 89 + 40 × 8 + 1 × 10 threads)" in res.stderr and str(d) in res.stderr
