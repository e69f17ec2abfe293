"""The streaming-inference study: a real 3-node Kafka cluster from the installed jars, producers at their
frame rate, the consumer group, the brokers' lifetime (stop, SIGTERM, kill -9) and bad input."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, process_alive
from storagebrief.core import columns, config
from storagebrief.core.config import ParamsError
from storagebrief.studies.stream_inference import cluster as kafka, metrics as sim
from storagebrief.studies.stream_inference.dataset import generate_videos
from storagebrief.studies.stream_inference.params import parse_video
from storagebrief.studies.stream_inference.rows import disk_profile

try:
    kafka.check_lib(kafka.default_lib_dir())
    kafka.find_java()
    HAVE_KAFKA, WHY = True, ""
except kafka.KafkaSetupError as exc:
    HAVE_KAFKA, WHY = False, str(exc)
needs_kafka = pytest.mark.skipif(not HAVE_KAFKA, reason=f"Kafka not installed here: {WHY}")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO / "lib")}


def _java_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "kafka.Kafka"], capture_output=True, text=True).stdout.split()
    mine = []
    for p in map(int, out):
        try:
            env_parent = Path(f"/proc/{p}/stat").read_text().split()[3]
        except OSError:
            continue
        if int(env_parent) == pid:
            mine.append(p)
    return mine


def _java_using(path: Path) -> list[int]:
    """Kafka JVMs whose command line names a file below `path` (ours, whatever their parent)."""
    out = subprocess.run(["pgrep", "-f", "kafka.Kafka"], capture_output=True, text=True).stdout.split()
    found = []
    for p in map(int, out):
        try:
            if str(path).encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                found.append(p)
        except OSError:
            pass
    return found


def _ports_of(java_pid: int) -> list[int]:
    props = Path(Path(f"/proc/{java_pid}/cmdline").read_bytes().split(b"\0")[-2].decode()).read_text()
    return [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", props.split("advertised")[0])]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    base = tmp_path_factory.mktemp("kafka")
    cl = kafka.Cluster(base / "data", base / "logs", brokers=3, heap_mib=256).start()
    yield cl
    cl.stop(grace_s=0)     # its data is the test's: no controlled shutdown to wait for (that is test_stop_reaps')


@pytest.mark.slow
@needs_kafka
def test_three_nodes_take_frames_with_rf3_and_return_count_and_bytes(running):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    assert len(running.pids) == 3 and running.startup_s < 120
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    [f.result() for f in admin.create_topics([NewTopic("frames", 3, 3)]).values()]
    md = admin.list_topics("frames", timeout=10)
    assert len(md.brokers) == 3
    assert all(len(p.replicas) == 3 for p in md.topics["frames"].partitions.values())
    payloads = [os.urandom(1000 + 37 * i) for i in range(120)]
    prod = Producer({"bootstrap.servers": running.bootstrap, "acks": "all"})
    for i, b in enumerate(payloads):
        prod.produce("frames", b, key=str(i % 5))
    assert prod.flush(30) == 0
    cons = Consumer({"bootstrap.servers": running.bootstrap, "group.id": "t", "auto.offset.reset": "earliest"})
    cons.subscribe(["frames"])
    got, deadline = [], time.monotonic() + 60
    while len(got) < len(payloads) and time.monotonic() < deadline:
        got += [m.value() for m in cons.consume(200, 1.0) if not m.error()]
    cons.close()
    assert len(got) == len(payloads) and sum(map(len, got)) == sum(map(len, payloads))
    assert sorted(got) == sorted(payloads)
    # every replica holds the bytes (3 replicas x payload at least)
    assert kafka.partition_bytes(running.log_dirs(), ["frames"]) >= 3 * sum(map(len, payloads))


@pytest.mark.slow
@needs_kafka
def test_a_producer_keeps_its_frame_rate_on_a_small_stream(running, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic
    from storagebrief.studies.stream_inference.producer import play

    vids = generate_videos(tmp_path / "videos", [parse_video("144p@24")], 2.0, 80, 0, log=lambda *_: None)
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    [f.result() for f in admin.create_topics([NewTopic("fps", 2, 3)]).values()]
    res = play({"stream": 0, "video": vids["144p@24"]["path"], "fps": 24, "frames": 48, "topic": "fps",
                "jpeg_quality": 80, "bootstrap": running.bootstrap}, emit=lambda *a, **k: None)
    assert res["frames_sent"] == res["frames_delivered"] == 48 and res["frames_failed"] == 0
    assert 0.98 * 24 <= res["achieved_fps"] <= 24.5
    assert res["bytes_delivered"] > 48 * 1000          # frames are not compressed to nothing


@pytest.mark.slow
@needs_kafka
def test_stop_reaps_every_node_and_frees_its_ports(tmp_path, monkeypatch):
    monkeypatch.setenv(kafka.JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1  -Dstoragebrief.test='a b'")
    cl = kafka.Cluster(tmp_path / "d", tmp_path / "l", brokers=3, heap_mib=256).start()
    pids, ports = cl.pids, cl.ports + cl.cports
    assert all(not kafka.port_free(p) for p in cl.ports)
    for pid in pids:            # Kafka's variable reaches every node, after our own options, split as a shell would
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv.index(b"-Dstoragebrief.test=a b") == argv.index(b"-XX:TieredStopAtLevel=1") + 1
        assert argv.index(b"-XX:TieredStopAtLevel=1") > argv.index(b"-XX:+UseSerialGC")
    cl.stop()
    assert not any(process_alive(p) for p in pids)
    assert all(kafka.port_free(p) for p in ports)


@pytest.mark.slow
@needs_kafka
def test_kill_9_of_the_parent_takes_the_brokers_with_it(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys, time
        from pathlib import Path
        from storagebrief.studies.stream_inference.cluster import Cluster
        c = Cluster(Path({str(tmp_path / 'd')!r}), Path({str(tmp_path / 'l')!r}), brokers=3, heap_mib=256).start()
        print(json.dumps({{"pids": c.pids, "ports": c.ports + c.cports}}), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    info = json.loads(parent.stdout.readline())
    assert all(process_alive(p) for p in info["pids"])
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while any(process_alive(p) for p in info["pids"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(process_alive(p) for p in info["pids"])
    deadline = time.monotonic() + 30     # the kernel tears the dead JVMs' sockets down asynchronously
    while (busy := [p for p in info["ports"] if not kafka.port_free(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not busy, [(p, _holders(p)) for p in busy]


def _holders(port: int) -> str:
    """Who holds a port (for the failure message)."""
    return subprocess.run(["ss", "-tanp", f"( sport = :{port} or dport = :{port} )"],
                          capture_output=True, text=True).stdout


def _params(tmp_path: Path, **over) -> Path:
    section = {"flush_messages": 1, "videos": ["144p@12"], "duration_s": 2, "streams": [1, 2], "topics": [1], "partitions": [2],
               "replication_factors": [3], "broker_heap_mib": 256, "drain_timeout_s": 15, "input_size": 32,
               "batch_size": 8, **over}
    data = {"targets": [{"name": "fast", "path": str(tmp_path / "fast")}],
            "run": {"cold_cache": True, "monitor_interval_s": 0.2}, "stream_inference": section}
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _cli(tmp_path, *extra, **kw):
    f = _params(tmp_path)
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", "stream-inference", "--params", str(f),
                           "--out", str(tmp_path / "out"), "--progress", "off", *extra], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
@pytest.mark.e2e
@needs_kafka
def test_study_end_to_end_counts_bytes_profile_and_nothing_left(tmp_path):
    res = _cli(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "out"
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs.streams) == [1, 2] and (runs.status == "ok").all()
    assert (runs.frames_target == runs.streams * 24).all()
    assert (runs.frames_produced == runs.frames_target).all() and (runs.frames_classified == runs.frames_produced).all()
    assert (runs.frames_dropped == 0).all() and runs.drained.all()
    assert (runs.latency_ms_p50 > 0).all() and (runs.latency_ms_p99 >= runs.latency_ms_p50).all()
    # the disk profile comes from the monitor's device counters
    assert (runs.device_iops_avg.round(6) == (runs.device_read_iops_avg + runs.device_write_iops_avg).round(6)).all()
    wa = runs.device_write_bytes / (runs.bytes_produced * runs.replication_factor)
    assert (runs.write_amplification.round(9) == wa.round(9)).all()
    # brokers fsync every message here: at least the replicated bytes reached the device during the run
    assert (runs.write_amplification >= 0.9).all()
    streams = pd.read_csv(out / "streams.csv")
    assert len(streams) == 3 and (streams.fps_achieved > 0.9 * 12).all()
    assert sorted(p.name for p in (out / "logs").glob("fast-kafka-node-*.log") if "format" not in p.name) == \
        [f"fast-kafka-node-{i}.log" for i in range(3)]
    assert not (tmp_path / "fast" / "storagebrief" / "stream_inference" / "kafka").exists()   # data removed
    assert not _java_using(tmp_path)
    study = json.loads((out / "study.json").read_text())
    assert study["kafka"]["version"] == kafka.kafka_version() and len(study["cluster_startup_s"]) == 1
    # every runs.csv column is declared (engine, monitor, the study's COLUMNS)
    assert columns.undeclared(runs.columns, columns.ENGINE_COLUMNS, columns.MONITOR_COLUMNS, sim.COLUMNS) == []


def _study_mid_run(tmp_path, brokers: int = 3):
    """A one-stream study started from the CLI on `brokers` nodes, 8 s into its first run: (process, broker pids,
    their ports)."""
    f = _params(tmp_path, streams=[1], duration_s=60, brokers=brokers, replication_factors=[min(3, brokers)])
    run = subprocess.Popen([sys.executable, "-m", "storagebrief.cli", "stream-inference", "--params", str(f),
                            "--out", str(tmp_path / "out"), "--progress", "off"], cwd=REPO, env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while len(_java_children(run.pid)) < brokers and time.monotonic() < deadline:
        time.sleep(0.2)
    javas = _java_children(run.pid)
    assert len(javas) == brokers
    ports = [p for j in javas for p in _ports_of(j)]
    time.sleep(8)                                    # mid-run: producers publishing
    return run, javas, ports


@pytest.mark.slow
@pytest.mark.e2e
@needs_kafka
def test_sigterm_mid_run_stops_brokers_and_consumers_and_writes_no_row(tmp_path):
    # one node: what SIGTERM stops (the node, the producers, the consumers) is the same for three; a broker dying
    # beside others that must be stopped is the test below's
    run, javas, ports = _study_mid_run(tmp_path, brokers=1)
    kids = subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()
    run.send_signal(signal.SIGTERM)
    err = run.communicate(timeout=120)[1]
    assert run.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert not any(process_alive(int(k)) for k in kids)
    assert all(kafka.port_free(p) for p in ports)
    runs = tmp_path / "out" / "runs.csv"
    assert not runs.exists() or len(pd.read_csv(runs)) == 0


def test_bad_input_is_refused_naming_the_key():
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    for over, words in [({"videos": ["999p@24"]}, ["unknown geometry", "1080p"]),
                        ({"videos": ["1080p@0"]}, ["FPS must be > 0"]),
                        ({"videos": ["1080p@-3"]}, ["FPS must be > 0"]),
                        ({"streams": [0, 2]}, ["stream counts"]),
                        ({"replication_factors": [4]}, ["needs at least that many brokers", "brokers = 3"]),
                        ({"bootstrap_servers": ["nohostport"]}, ["host:port"])]:
        data = {**base, "stream_inference": {**base["stream_inference"], **over}}
        with pytest.raises(ParamsError) as exc:
            config.validate(data)
        assert "stream_inference" in str(exc.value) and all(w in str(exc.value) for w in words), str(exc.value)


def test_missing_jars_and_java_are_named(tmp_path, monkeypatch):
    with pytest.raises(kafka.KafkaSetupError, match="kafka_2.13.*make kafka"):
        kafka.check_lib(tmp_path)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(kafka.KafkaSetupError, match="Java not found.*make kafka"):
        kafka.find_java()


def test_unparsable_jvm_options_are_one_line_naming_kafkas_variable(monkeypatch):
    monkeypatch.setenv(kafka.JVM_OPTIONS_ENV, "-Xss1m '-Dx=unclosed")
    with pytest.raises(kafka.KafkaSetupError, match="KAFKA_JVM_PERFORMANCE_OPTS=.*No closing quotation"):
        kafka.jvm_options()


@pytest.mark.e2e
def test_ports_in_use_are_refused_before_work(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        with pytest.raises(kafka.KafkaSetupError, match=f"base_port = {port}.*already in use"):
            kafka.pick_ports(6, port)
        res = _cli(tmp_path, "-S", f"stream_inference.base_port={port}", "-S", "stream_inference.kafka_lib=null")
    finally:
        s.close()
    if HAVE_KAFKA:
        assert res.returncode != 0 and "already in use" in res.stderr
        assert not (tmp_path / "out" / "runs.csv").exists()


@pytest.mark.e2e
@needs_kafka
def test_no_space_for_the_brokers_logs_is_refused_before_work(tmp_path):
    # 50 streams (within the process budget) of a day each: logs far beyond any free space here
    res = _cli(tmp_path, "-S", "stream_inference.streams=[50]", "-S", "stream_inference.duration_s=86400")
    assert res.returncode != 0
    assert "Kafka brokers' logs" in res.stderr and "is free" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "out" / "runs.csv").exists()


def test_disk_profile_is_the_monitors_arithmetic():
    s = {"device_read_iops_avg": 10.0, "device_write_iops_avg": 30.0, "device_read_mb_per_s_avg": 1.0,
         "device_write_mb_per_s_avg": 3.0, "device_read_latency_us": 200.0, "device_write_latency_us": 600.0,
         "device_read_bytes": 1_000_000, "device_write_bytes": 3_000_000}
    d = disk_profile(s, 500_000, 3)
    assert d["device_iops_avg"] == 40.0
    assert d["device_mib_per_s_avg"] == pytest.approx(4e6 / (1 << 20))
    assert d["device_response_time_us"] == pytest.approx((200 * 10 + 600 * 30) / 40)
    assert d["device_read_percent"] == pytest.approx(25.0)
    assert d["write_amplification"] == pytest.approx(2.0)
    assert disk_profile({}, 1, 3) == {}


def test_generated_video_moves_and_does_not_compress_to_nothing(tmp_path):
    import cv2

    info = generate_videos(tmp_path / "v", [parse_video("240p@24")], 1.0, 90, 0, log=lambda *_: None)["240p@24"]
    assert info["frames"] == 24 and info["jpeg_bytes_mean"] > 20_000
    cap = cv2.VideoCapture(info["path"])
    ok1, a = cap.read()
    ok2, b = cap.read()
    cap.release()
    assert ok1 and ok2 and a.shape == (240, 426, 3) and abs(a.astype(int) - b.astype(int)).mean() > 2


@pytest.mark.slow
@pytest.mark.e2e
@needs_kafka
def test_a_broker_dying_mid_run_fails_it_with_the_log_tail_and_leaves_nothing(tmp_path):
    run, javas, ports = _study_mid_run(tmp_path)
    os.kill(javas[1], signal.SIGKILL)                # a broker dies without a word
    err = run.communicate(timeout=180)[1]
    assert run.returncode not in (0, None), err[-2000:]
    assert re.search(r"Kafka node \d \(pid \d+\) exited with status", err), err[-2000:]
    assert "log" in err.split("exited with status", 1)[1]          # the node's log tail comes with it
    assert not _java_using(tmp_path)                              # the other brokers were stopped
    assert all(kafka.port_free(p) for p in ports)
    runs = tmp_path / "out" / "runs.csv"
    assert not runs.exists() or len(pd.read_csv(runs)) == 0


def test_topic_creation_retries_a_lost_request_and_takes_its_topic_as_created(monkeypatch):
    """run._topics: a create request lost client-side (librdkafka's _DESTROY_BROKER, seen once in a quick study
    on a cluster started seconds before) is sent again; 'already exists' on the retry is the first request's
    topic; a real refusal is raised at once."""
    from concurrent.futures import Future
    from confluent_kafka import KafkaError, KafkaException
    from storagebrief.studies.stream_inference import run as si_run

    def done(code=None):
        f = Future()
        f.set_exception(KafkaException(KafkaError(code))) if code is not None else f.set_result(None)
        return f

    class Admin:
        def __init__(self, answers):
            self.answers, self.asked = answers, []

        def create_topics(self, topics, operation_timeout):
            self.asked.append([t.topic for t in topics])
            return {t.topic: done(code) for t, code in zip(topics, self.answers.pop(0))}

        def list_topics(self, timeout):
            part = type("P", (), {"leader": 0})()
            return type("M", (), {"topics": {n: type("T", (), {"partitions": {0: part}})() for n in ("a", "b")}})()

    monkeypatch.setattr(si_run.time, "sleep", lambda s: None)
    admin = Admin([[None, KafkaError._DESTROY_BROKER], [KafkaError.TOPIC_ALREADY_EXISTS]])
    si_run._topics(admin, ["a", "b"], 1, 1)
    assert admin.asked == [["a", "b"], ["b"]]
    refused = Admin([[KafkaError.INVALID_REPLICATION_FACTOR, None]])
    with pytest.raises(KafkaException):
        si_run._topics(refused, ["a", "b"], 1, 3)
    assert len(refused.asked) == 1


def test_a_broker_dying_under_an_admin_request_fails_the_run_at_once(monkeypatch):
    """CI, 2026-11-28: a broker killed while topics were being created left each create future open for
    librdkafka's request timeout, three attempts over, and the run outlived the test's 180 s. Every admin wait
    checks the cluster now."""
    from concurrent.futures import Future
    from storagebrief.studies.stream_inference import run as si_run

    class Admin:
        def create_topics(self, topics, operation_timeout):
            return {t.topic: Future() for t in topics}            # never answered

        def delete_topics(self, names, operation_timeout):
            return {n: Future() for n in names}

    calls = []

    def check():
        calls.append(1)
        if len(calls) > 2:
            raise kafka.BrokerDied("Kafka node 1 (pid 7) exited with status -9 (killed by SIGKILL)")

    t0 = time.monotonic()
    with pytest.raises(kafka.BrokerDied, match="node 1"):
        si_run._topics(Admin(), ["a"], 1, 3, check)
    calls.clear()
    with pytest.raises(kafka.BrokerDied, match="node 1"):
        si_run._delete(Admin(), ["a"], check)
    assert time.monotonic() - t0 < 30


@needs_kafka
def test_a_broker_keeps_its_small_heap_for_requests_not_the_cleaners_dedupe_map(tmp_path):
    """Kafka allocates the log cleaner's dedupe map on the heap at start-up (128 MiB by default): half of the tiny
    profile's 256 MiB heap, and a node ran out of heap mid-run in CI. Each node's server.properties caps it."""
    c = kafka.Cluster(tmp_path / "data", tmp_path / "logs", brokers=3, heap_mib=256)
    c.ports, c.cports = [9101, 9102, 9103], [9201, 9202, 9203]
    props = dict(line.split("=", 1) for line in c._properties(1).splitlines())
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 16 << 20
