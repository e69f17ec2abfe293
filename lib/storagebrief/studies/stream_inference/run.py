"""The streaming-inference sweep on the shared engine (core.sweep).

prepare: the own videos (unusable ones skipped and noted), Java, jars, ports (or the external cluster) and
free space are checked before any work, the videos are
generated on every target, and the consumer group's processes load TensorFlow once for the study.
Runs are grouped by target (not interleaved) so that one Kafka cluster per target serves all of
that target's runs: starting 3 JVMs costs ~10 s on 2 cores. Each run creates its topics, starts S
producer processes (ready -> go together, clock started at go), drains the consumers, waits for
stops the clock and deletes its topics. close() (always, also after an
exception or a signal) stops the consumers and the cluster and removes the brokers' data unless
keep_data. A broker that dies during a run fails it naming the cause found in its log and writes no row.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import results
from ...core.config import ParamsError
from ...core.folders import folder_below, ours
from ...core.sweep import Measurement, Point
from ...kit import latency
from ...kit.child import Child
from ...kit.space import check_space
from . import STUDY, cluster as kafka
from .dataset import VIDEO_EXTENSIONS, generate_videos, list_videos, sample_jpeg_bytes
from .params import Config, StreamParams, configurations
from .rows import Played, config_columns, consumer_rows, disk_profile, pipeline_columns, stream_rows

PKG = "storagebrief.studies.stream_inference"
MAX_MESSAGE = 33554432


def _child(module: str, arg: dict, log_file: Path, label: str) -> Child:
    """A consumer or producer in a fresh interpreter: TensorFlow's and librdkafka's state does not survive a fork."""
    return Child(f"{PKG}.{module}", arg, log_file, label,
                 env={"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")})


# -- prepare -------------------------------------------------------------------------------------
def _external(p: StreamParams) -> int:
    """Brokers in the external cluster (refusing an unreachable one, or RF above its size)."""
    from confluent_kafka.admin import AdminClient

    servers = ",".join(p.bootstrap_servers)
    try:
        md = AdminClient({"bootstrap.servers": servers, "logger": kafka._quiet_logger()}).list_topics(timeout=15)
    except Exception as exc:   # noqa: BLE001
        raise ParamsError(f"stream_inference.bootstrap_servers = {p.bootstrap_servers}: no Kafka cluster answered "
                          f"within 15 s ({exc})") from None
    n = len(md.brokers)
    if max(p.replication_factors) > n:
        raise ParamsError(f"stream_inference.replication_factors = {p.replication_factors}: the external cluster "
                          f"at {servers} has {n} broker(s)")
    return n


def _kafka_bytes(p: StreamParams, videos: dict) -> int:
    """The largest run's bytes on the brokers' disks (x RF, + 25 % log/index overhead, + 64 MiB)."""
    worst = 0
    for c in configurations(p):
        v = videos[c.video] if c.video in videos else next(iter(videos.values()))
        worst = max(worst, c.streams * int(p.duration_s * v["fps"] + 1) * v["jpeg_bytes_mean"] * c.replication_factor)
    return int(worst * 1.25) + (64 << 20)


@dataclass
class StreamState:
    """What prepare sets up for every run (sweep.state) and what the runs add to it."""
    kafka: dict | None = None               # mode started (version, lib, java) or external (bootstrap)
    brokers: int | None = None
    videos: dict = field(default_factory=dict)          # target -> generated videos, or {"own": [...]}
    consumers: list = field(default_factory=list)       # the consumer group's kit.child.Child processes
    tf_device: str | None = None
    consumer_startup_s: float | None = None
    cluster: Any = None                     # the running kafka.Cluster (one target at a time)
    cluster_target: str | None = None
    group: Any = None                       # the brokers' cgroup (an emulated profile), or None
    startups: list[float] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)


def _state(sweep) -> StreamState | None:
    """The study's state, None before prepare made it (close after an early refusal)."""
    return sweep.state if isinstance(sweep.state, StreamState) else None


def _kafka_setup(sweep, st: StreamState) -> None:
    """The external cluster (reachable, big enough) or the jars, Java and ports of the one started here."""
    p: StreamParams = sweep.p
    if p.bootstrap_servers:
        st.brokers = _external(p)
        st.kafka = {"mode": "external", "bootstrap": ",".join(p.bootstrap_servers)}
        sweep.note(f"external Kafka cluster {','.join(p.bootstrap_servers)}: no brokers were started; the device "
                   "columns are the targets' devices on this host, not the brokers' disks")
        return
    lib = kafka.check_lib(Path(p.kafka_lib).expanduser() if p.kafka_lib else kafka.default_lib_dir())
    java, major = kafka.check_java()
    if p.base_port is not None:
        kafka.pick_ports(2 * p.brokers, p.base_port)       # refuses ports in use, before any work
    st.brokers = p.brokers
    st.kafka = {"mode": "started", "version": kafka.kafka_version(), "lib": str(lib), "java": java,
                "java_major": major, "jvm_options": " ".join(kafka.jvm_options())}
    if st.kafka["jvm_options"]:
        sweep.note(f"the brokers' JVMs ran with {kafka.JVM_OPTIONS_ENV}={st.kafka['jvm_options']} (after "
                   "storagebrief's own options)")


def _check_space(sweep, own) -> None:
    """Every target (those on one filesystem added up) has room for the videos and the brokers' logs."""
    p: StreamParams = sweep.p
    if own:
        sizes = {"own": max(own, key=lambda v: v["jpeg_bytes_mean"])}
    else:
        sizes = {v.text: {"fps": v.fps, "jpeg_bytes_mean": sample_jpeg_bytes(v, p.jpeg_quality, p.seed)}
                 for v in p.video_list}
    videos = 0 if own else sum(v.width * v.height * 3 * int(p.duration_s * v.fps + 1) // 8 for v in p.video_list)
    logs = 0 if p.bootstrap_servers else _kafka_bytes(p, sizes)
    what = " and ".join(w for w, n in (("the generated videos", videos),
                                       ("the Kafka brokers' logs of the largest run", logs)) if n)
    if what:
        check_space(sweep.targets, lambda t: videos + logs, what)


def _start_consumers(sweep, st: StreamState) -> None:
    """The consumer group's processes, each with TensorFlow and ResNet50 loaded once for the study."""
    p: StreamParams = sweep.p
    logs = sweep.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for i in range(p.consumers):
        st.consumers.append(_child("consumer", {"input_size": p.input_size, "batch_size": p.batch_size},
                                   logs / f"consumer-{i}.log", f"consumer {i}"))
    ready = [w.expect("ready", 600) for w in st.consumers]
    st.tf_device = ready[0]["tf_device"]
    st.consumer_startup_s = time.monotonic() - t0
    sweep.log(f"consumer group ready: {p.consumers} process(es), ResNet50 {p.input_size}x{p.input_size} on "
              f"{st.tf_device} ({st.consumer_startup_s:.1f} s)")


def prepare(sweep) -> None:
    p: StreamParams = sweep.p
    st = sweep.state = StreamState()
    own = _own_videos(sweep) if p.video_dir else None
    _kafka_setup(sweep, st)
    _check_space(sweep, own)                   # every space check before any video is written
    for t in sweep.targets:
        st.videos[t.name] = {"own": own} if own else generate_videos(
            folder_below(t.study_dir(STUDY.name), "videos", create=False), p.video_list, p.duration_s, p.jpeg_quality, p.seed, sweep.log)
    _start_consumers(sweep, st)


def _own_videos(sweep) -> list[dict]:
    """The usable videos of video_dir; each skipped one is noted with its reason (notes.json, the brief's
    limits), and a folder with none left is refused naming it."""
    folder = Path(sweep.p.video_dir).expanduser()
    usable, skipped = list_videos(folder, sweep.p.jpeg_quality)
    for name, why in skipped:
        sweep.note(f"stream_inference.video_dir: skipped {name}: {why}")
    if not usable:
        seen = "; ".join(f"{n}: {w}" for n, w in skipped[:3]) + (" ..." if len(skipped) > 3 else "")
        raise ParamsError(f"stream_inference.video_dir = '{folder}' holds no usable video "
                          f"({', '.join(sorted(VIDEO_EXTENSIONS))})" + (f": {seen}" if seen else ""))
    return usable


# -- plan ----------------------------------------------------------------------------------------
def plan(sweep) -> list[Point]:
    """Every configuration x repeat, grouped by target (one cluster per target serves its runs)."""
    p: StreamParams = sweep.p
    return [Point(c, r, c.label, targets=(t.name,))
            for t in sweep.targets for c in configurations(p) for r in range(1, p.repeats + 1)]


def run_id(config: Config, target, repeat: int) -> str:
    c = config
    return (f"{STUDY.name}-{target.name}-s{c.streams}-{c.video.replace('@', 'at')}-t{c.topics}-p{c.partitions}"
            f"-rf{c.replication_factor}-r{repeat}")


# -- the cluster ---------------------------------------------------------------------------------
def _stop_cluster(sweep) -> None:
    st = _state(sweep)
    if st is None:
        return
    cl, group = st.cluster, st.group
    st.cluster = st.group = st.cluster_target = None
    try:
        if cl is not None:
            t = time.monotonic()
            # Kept data gets a controlled shutdown; data removed next needs none (it took 5 s a cluster).
            cl.stop(grace_s=5 if sweep.p.keep_data else 0)
            st.stops.append(time.monotonic() - t)
            if not sweep.p.keep_data:
                cl.remove_data()
    finally:
        if group is not None:
            group.remove()


def _cluster(run):
    """The running cluster of run.target (started on its first run); (bootstrap, cluster or None)."""
    sweep, p, st, t = run.sweep, run.p, run.sweep.state, run.target
    if p.bootstrap_servers:
        return ",".join(p.bootstrap_servers), None
    if st.cluster_target == t.name and st.cluster is not None:
        st.cluster.check()         # its brokers' cgroup (held by the sweep) makes the run emulated: the engine's
        return st.cluster.bootstrap, st.cluster
    _stop_cluster(sweep)
    group = run.lasting_throttle("brokers")     # the brokers serve this target's later runs too
    props = {"message.max.bytes": MAX_MESSAGE, "replica.fetch.max.bytes": MAX_MESSAGE}
    if p.flush_messages is not None:
        props["log.flush.interval.messages"] = p.flush_messages
    data = folder_below(t.study_dir(STUDY.name), "kafka", create=False)
    if data.exists():
        kafka.shutil.rmtree(data, ignore_errors=True)             # a killed run's leftovers
    ours(data)                  # the brokers' data: in a folder of ours (core.folders)
    cl = kafka.Cluster(data, sweep.out_dir / "logs", brokers=p.brokers,
                       lib=Path(p.kafka_lib).expanduser() if p.kafka_lib else None, heap_mib=p.broker_heap_mib,
                       base_port=p.base_port, procs_files=group.procs_files if group else None,
                       properties=props, name=f"{t.name}-kafka")
    st.group = group
    try:
        cl.start(p.startup_timeout_s)
    except BaseException:
        if group is not None:
            group.remove()
        st.group = None
        raise
    st.cluster, st.cluster_target = cl, t.name
    st.startups.append(cl.startup_s)
    sweep.log(f"Kafka {kafka.kafka_version()} up on target '{t.name}': {p.brokers} nodes at {cl.bootstrap} "
              f"({cl.startup_s:.1f} s)")
    return cl.bootstrap, cl


def close(sweep) -> None:
    """Always: consumers told to exit (killed if they linger), cluster stopped, its data removed."""
    st = _state(sweep)
    if st is None:
        return
    try:
        for w in st.consumers:
            w.stop()
    finally:
        st.consumers = []
        _stop_cluster(sweep)


# -- one run -------------------------------------------------------------------------------------
CREATE_ATTEMPTS = 3


def _answer(future, check):
    """A Kafka admin future's result, with the cluster checked twice a second while it is awaited: a broker that
    died under a request leaves its future open for librdkafka's full request timeout (60 s, three times over in
    _topics' retries), and the run must fail at once with the node's own cause."""
    from concurrent.futures import TimeoutError as Pending

    while True:
        if check is not None:
            check()
        try:
            return future.result(timeout=0.5)
        except Pending:
            continue


def _topics(admin, names: list[str], partitions: int, rf: int, check=None) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    lost_request = {KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
    todo = list(names)
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        futures = admin.create_topics([NewTopic(n, partitions, rf, config={"max.message.bytes": str(MAX_MESSAGE)})
                                       for n in todo], operation_timeout=30)
        failed = []
        for name, f in futures.items():
            try:
                _answer(f, check)
            except KafkaException as exc:
                err = exc.args[0]
                if attempt > 1 and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue                  # the attempt before created it, and lost only the answer
                # a client-side loss of the request (seen on a cluster started seconds before: the bootstrap
                # broker's handle was replaced by the cluster's own while the request was in flight)
                if attempt == CREATE_ATTEMPTS or not (err.retriable() or err.code() in lost_request):
                    raise
                failed.append(name)
        if not failed:
            break
        todo = failed
        time.sleep(0.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:      # every partition has a leader before producers start
        if check is not None:
            check()
        md = admin.list_topics(timeout=5)
        if all(n in md.topics and len(md.topics[n].partitions) == partitions and
               all(pm.leader >= 0 for pm in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topics {names} got no leaders within 30 s")


def _delete(admin, names: list[str], check=None) -> None:
    try:
        for f in admin.delete_topics(names, operation_timeout=30).values():
            _answer(f, check)
    except kafka.BrokerDied:
        raise
    except Exception:   # noqa: BLE001 -- a cluster stopped next anyway; leftover topics are in its data
        pass


def _stream_jobs(run, c: Config, bootstrap: str, topics: list[str]) -> list[dict]:
    p, vids = run.p, run.sweep.state.videos[run.target.name]
    jobs = []
    for s in range(c.streams):
        v = vids["own"][s % len(vids["own"])] if "own" in vids else vids[c.video]
        jobs.append({"stream": s, "video": v["path"], "fps": v["fps"], "frames": int(round(p.duration_s * v["fps"])),
                     "topic": topics[s % len(topics)], "jpeg_quality": p.jpeg_quality, "bootstrap": bootstrap,
                     "acks": p.acks})
    return jobs


def _cold_videos(run, jobs: list[dict]) -> None:
    # Only the videos are made cold (fadvise): drop_caches would also evict the running brokers', producers' and
    # TensorFlow's code pages, and their re-reads would be charged to the brokers' disk profile (measured: 100 MB).
    run.evict(sorted({j["video"] for j in jobs}), "videos", sync=False)


def _play(run, c: Config, bootstrap: str, topics: list[str], jobs: list[dict], check) -> Played:
    """Producers ready, consumers assigned, clock started at go; every stream played, every frame drained."""
    import numpy as np

    p, t = run.p, run.target
    work = folder_below(t.study_dir(STUDY.name), "work", create=False)
    ours(work)                  # made, each step below storagebrief/ proven ours (core.folders)
    logs = run.sweep.out_dir / "logs"
    producers: list[Child] = []
    consumers: list[Child] = run.sweep.state.consumers
    parts = [(tp, k) for tp in topics for k in range(c.partitions)]
    lat_files = [work / f"latency-{i}.npy" for i in range(len(consumers))]
    try:
        for i, j in enumerate(jobs):
            producers.append(_child("producer", j, logs / f"{run.run_id}-producers.log", f"producer {i}"))
        for w in producers:
            w.expect("ready", 120, check)
        for i, w in enumerate(consumers):
            w.send({"cmd": "run", "bootstrap": bootstrap, "group": run.run_id, "partitions": parts[i::len(consumers)],
                    "latency_file": str(lat_files[i])})
        for w in consumers:
            w.expect("assigned", 60, check)
        run.start_clock()
        go = time.time()
        for w in producers:
            w.send("go")
        budget = p.duration_s * 3 + 120
        streams = [w.expect("done", budget, check) for w in producers]
        produced_at = time.time()
        for w in consumers:
            w.send({"cmd": "drain", "deadline_s": p.drain_timeout_s})
        cons = [w.expect("done", p.drain_timeout_s + 120, check) for w in consumers]
        if check is not None:
            check()
        run.stop_clock()
    finally:
        for w in producers:
            w.stop(2)
    per_consumer = tuple(np.load(f) if f.exists() else np.zeros(0) for f in lat_files)
    lat = np.concatenate(per_consumer) if per_consumer else np.zeros(0)
    for f in lat_files:
        f.unlink(missing_ok=True)
    assigned = tuple(parts[i::len(consumers)] for i in range(len(consumers)))
    return Played(jobs, streams, cons, go, produced_at, lat, per_consumer, assigned)


def run_one(run, c: Config) -> Measurement:
    from confluent_kafka.admin import AdminClient

    t_run = time.monotonic()
    bootstrap, cl = _cluster(run)
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": kafka._quiet_logger()})
    topics = [f"{run.run_id}-topic{k}"[:240] for k in range(c.topics)]
    check = cl.check if cl is not None else None
    _delete(admin, topics, check)                            # a killed earlier run of the same id
    _topics(admin, topics, c.partitions, c.replication_factor, check)
    jobs = _stream_jobs(run, c, bootstrap, topics)
    _cold_videos(run, jobs)
    played = _play(run, c, bootstrap, topics, jobs, check)
    log_bytes = kafka.partition_bytes(cl.log_dirs(), topics) if cl is not None else None
    _delete(admin, topics)
    summary = run.monitor.summary()
    summary["monitor_seconds"] = run.monitor.snapshots[-1].t - run.monitor.snapshots[0].t
    pipeline = pipeline_columns(played)
    bytes_produced = pipeline["bytes_produced"]
    row = {
        **config_columns(run, c, bootstrap, cl, jobs), **pipeline,
        **latency.percentiles(played.lat, "latency", "ms"),
        "broker_log_bytes": log_bytes,
        "log_overhead_ratio": (log_bytes / (bytes_produced * c.replication_factor)
                               if log_bytes is not None and bytes_produced else None),
        "cluster_startup_s": cl.startup_s if cl is not None else None,
        "consumer_startup_s": run.sweep.state.consumer_startup_s, "measured_s": summary["monitor_seconds"],
        "run_wall_s": time.monotonic() - t_run,
        **disk_profile(summary, bytes_produced, c.replication_factor)}
    flow = [{"consumer": i, **f} for i, x in enumerate(played.cons) for f in x["flow"]]
    return Measurement(row, tables={"streams.csv": stream_rows(run, played),
                                    "consumers.csv": consumer_rows(run, played)}, series={"-flow": flow})


def finish(sweep, frame) -> None:
    st = _state(sweep) or StreamState()
    _stop_cluster(sweep)
    results.write_json(sweep.out_dir / "study.json", {
        "kafka": st.kafka, "brokers": st.brokers, "cluster_startup_s": st.startups,
        "cluster_stop_s": st.stops, "consumer_startup_s": st.consumer_startup_s,
        "tf_device": st.tf_device,
        "videos": {k: v for k, v in st.videos.items()}})


# The engine's optional hooks this study does not have (core/contract.py RunRoom).
configure = skip = None
