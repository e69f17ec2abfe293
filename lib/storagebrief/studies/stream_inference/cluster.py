"""A real Apache Kafka cluster in KRaft mode: N combined broker+controller nodes on loopback.

The jars come from Maven Central (`make kafka`, kafka-pom.xml beside this file) into
<repo>/.kafka/lib; the JVM from the system (`java` on PATH or JAVA_HOME). Every node is a
child process that dies with the process that started it (PR_SET_PDEATHSIG), may join a
cgroup (the target's emulated profile) before exec, writes its log to a file beside runs.csv
and keeps its `log.dirs` under the target's directory. `stop()` always ends and reaps every
node and leaves its ports free; a node that dies while the cluster is in use is reported
with the cause found in its log (BrokerDied, log_cause).
"""
from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from ...core.causes import EnvironmentFailure, known_cause, last_meaningful, one_line
from ...core.procs import die_with_parent

POM = Path(__file__).with_name("kafka-pom.xml")
REPO = Path(__file__).resolve().parents[4]
BROKER_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = warn
"""


class KafkaSetupError(ValueError):
    """Java, the jars or the ports are missing, found before any work: an expected one-line error
    (exit 2 in the CLI); the message says what to do."""


# Kafka's own variable for its JVMs' options (kafka-run-class.sh reads it), honoured the same way: appended after
# ours, so a flag given there wins (HotSpot takes the last of two). The suite sets -XX:TieredStopAtLevel=1 (no C2
# compiler: about 40 % less CPU to start a broker, tests/conftest.py); a study run records what it was given.
JVM_OPTIONS_ENV = "KAFKA_JVM_PERFORMANCE_OPTS"


def jvm_options() -> list[str]:
    """The brokers' extra JVM options from KAFKA_JVM_PERFORMANCE_OPTS (KafkaSetupError naming it if unparsable)."""
    try:
        return shlex.split(os.environ.get(JVM_OPTIONS_ENV, ""))
    except ValueError as exc:
        raise KafkaSetupError(f"{JVM_OPTIONS_ENV}={os.environ[JVM_OPTIONS_ENV]!r}: {exc} (JVM options, "
                              "split as a shell would)") from None


class KafkaStartFailed(EnvironmentFailure):
    """The nodes were started but the cluster did not come up; the message names the cause in the log."""


class BrokerDied(EnvironmentFailure):
    """A node of the cluster exited while in use; the message names the cause found in its log."""


def kafka_version() -> str:
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    return m.group(1) if m else "unknown"


def default_lib_dir() -> Path:
    return Path(os.environ.get("STORAGEBRIEF_KAFKA_LIB") or REPO / ".kafka" / "lib")


def find_java() -> str:
    """The java executable (JAVA_HOME first, then PATH); Kafka 4 brokers need Java 17+."""
    home = os.environ.get("JAVA_HOME")
    cands = [str(Path(home) / "bin" / "java")] if home else []
    cands.append(shutil.which("java") or "")
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    raise KafkaSetupError("Java not found (no JAVA_HOME/bin/java, no java on PATH): Kafka brokers need "
                          "Java 17+; run `make kafka` (installs default-jre-headless) or set "
                          "stream_inference.bootstrap_servers to an existing cluster")


def java_major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:   # not executable, wrong format, hangs
        raise KafkaSetupError(f"cannot run `{java} -version` ({exc}); Kafka brokers need Java 17+: run "
                              "`make kafka` or set JAVA_HOME") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise KafkaSetupError(f"cannot read the Java version from `{java} -version`: {one_line(out, 200)}")
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def check_java() -> tuple[str, int]:
    """(java, its major version) when it runs and is 17 or newer, else KafkaSetupError."""
    java = find_java()
    major = java_major(java)
    if major < 17:
        raise KafkaSetupError(f"{java} is Java {major}; Kafka {kafka_version()} brokers need Java 17+ "
                              "(run `make kafka`, or set JAVA_HOME)")
    return java, major


def check_lib(lib: Path) -> Path:
    """The folder of Kafka jars, or a clear error naming what is missing and how to get it."""
    lib = Path(lib)
    need = {"kafka_2.13": "the broker (kafka.Kafka)", "kafka-clients": "the client library",
            "log4j-core": "the logging backend"}
    have = {f.name for f in lib.glob("*.jar")} if lib.is_dir() else set()
    missing = [f"{k} ({why})" for k, why in need.items() if not any(n.startswith(k + "-") for n in have)]
    if missing:
        raise KafkaSetupError(f"Kafka jars missing in {lib}: {', '.join(missing)}; run `make kafka` "
                              f"(Maven resolves {POM.name} from Maven Central) or set "
                              "stream_inference.kafka_lib to a folder holding them")
    return lib


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's Uuid). One that
    starts with '-' is drawn again: the storage tool's argument parser would take it for an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on host:port and a listener could bind it. (A JVM listens on an IPv6 socket
    bound to the IPv4-mapped address, which an IPv4 bind with SO_REUSEADDR does not see: connect too.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
        c.settimeout(1.0)
        if c.connect_ex((host, port)) == 0:
            return False
    # A closed broker's connections may sit in TIME-WAIT on its IPv4-mapped IPv6 address; they do not
    # stop a new broker (the JVM binds that way, with SO_REUSEADDR), so a bind either way counts as free.
    for family, addr in ((socket.AF_INET, (host, port)), (socket.AF_INET6, (f"::ffff:{host}", port))):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
                return True
            except OSError:
                continue
    return False


def pick_ports(n: int, base: int | None = None) -> list[int]:
    """n loopback ports: base..base+n-1 (each must be free) or n free ones chosen by the kernel."""
    if base is not None:
        ports = list(range(base, base + n))
        busy = [p for p in ports if not port_free(p)]
        if busy:
            raise KafkaSetupError(f"stream_inference.base_port = {base}: port(s) {busy} already in use on 127.0.0.1 "
                                  f"(the cluster needs {n} consecutive ports from {base}); choose another base "
                                  "port or null to pick free ones")
        return ports
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


# What kills a broker, in priority order; the line naming it can sit far above the log's last lines
# (a full disk: the IOException, then the log dir marked offline, then a long shutdown).
BROKER_CAUSES = [re.compile(p) for p in (
    r"No space left on device", r"Disk quota exceeded", r"Address already in use", r"OutOfMemoryError",
    r"Read-only file system", r"Too many open files", r"Permission denied", r"Cannot allocate memory",
    r"Could not reserve enough space", r"InconsistentClusterIdException", r"no meta\.properties",
    r"UnsupportedClassVersionError", r"ClassNotFoundException|NoClassDefFoundError",
)]
LOG_ERROR = re.compile(r"\b(ERROR|FATAL)\b|Exception|Error:")
LOG_SCAN_BYTES = 4 << 20     # the end of a long log: where a node's fatal lines are


def log_cause(path: Path, known_only: bool = False) -> str | None:
    """One line from a node's log saying why it stopped: a known cause, else (unless known_only) its
    last error line, else its last line that is not a stack frame."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - LOG_SCAN_BYTES))
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(its log {path} cannot be read: {exc.strerror})"
    found = known_cause(text, BROKER_CAUSES)
    if found or known_only:
        return found
    return last_meaningful(text, prefer=LOG_ERROR) or "(its log is empty)"


def death(rc: int, log: Path) -> str:
    """'exited with status 1: java.io.IOException: No space left on device'. A node killed by a signal
    (kill, the OOM killer) wrote no reason, so its log's last error line would mislead: only a known
    cause is quoted then."""
    if rc >= 0:
        return f"exited with status {rc}: {log_cause(log)}"
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    cause = log_cause(log, known_only=True)
    return f"exited with status {rc} (killed by {name}): " + (cause or "its log names no cause")


class Cluster:
    """N combined broker+controller nodes; use as a context manager or call start()/stop()."""

    # 10 parameters, kept: all but two are keywords with defaults, named at every call (study and tests)
    def __init__(self, data_dir: Path, log_dir: Path, brokers: int = 3, lib: Path | None = None,
                 heap_mib: int = 384, base_port: int | None = None, procs_files: list[str] | None = None,
                 properties: dict | None = None, name: str = "kafka", log_level: str = "INFO",
                 hosts: list[tuple[str, str]] | None = None):
        self.data_dir, self.log_dir = Path(data_dir), Path(log_dir)
        # node i on hosts[i % len]: (its address, the network namespace it runs in), e.g. the client
        # hosts of core.nethosts standing in for an external cluster's machines; None: this host, loopback
        self.hosts = list(hosts or [])
        self.n, self.heap_mib, self.base_port = brokers, heap_mib, base_port
        self.lib = check_lib(lib or default_lib_dir())
        self.java = find_java()
        self.procs_files = procs_files or []
        self.extra = properties or {}
        self.name, self.log_level = name, log_level
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []          # client ports; controller ports follow in cports
        self.cports: list[int] = []
        self.logs: list[Path] = []
        self.startup_s: float | None = None
        self.cluster_id = cluster_id()

    # -- configuration --------------------------------------------------------------------------
    def address(self, i: int) -> str:
        return self.hosts[i % len(self.hosts)][0] if self.hosts else "127.0.0.1"

    def _netns_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[i % len(self.hosts)][1]] if self.hosts else []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.address(i)}:{p}" for i, p in enumerate(self.ports))

    def node_dir(self, i: int) -> Path:
        return self.data_dir / f"node-{i}"

    def log_dirs(self) -> list[Path]:
        return [self.node_dir(i) / "data" for i in range(self.n)]

    def _properties(self, i: int) -> str:
        voters = ",".join(f"{j}@{self.address(j)}:{p}" for j, p in enumerate(self.cports))
        a = self.address(i)
        props = {
            "process.roles": "broker,controller", "node.id": i,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{a}:{self.ports[i]},CONTROLLER://{a}:{self.cports[i]}",
            "advertised.listeners": f"PLAINTEXT://{a}:{self.ports[i]}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.node_dir(i) / "data",
            "num.network.threads": 2, "num.io.threads": 4, "num.recovery.threads.per.data.dir": 1,
            "offsets.topic.replication.factor": min(3, self.n), "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": min(3, self.n),
            "transaction.state.log.min.isr": 1, "share.coordinator.state.topic.replication.factor": min(3, self.n),
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0, "auto.create.topics.enable": "false",
            "delete.topic.enable": "true", "log.segment.delete.delay.ms": 0,
            # the log cleaner allocates its dedupe map on the heap when it starts: 128 MiB by default, half of a
            # 256 MiB heap, and a node ran out of heap mid-run under load (CI, 9367d0d). Only __consumer_offsets is
            # compacted here (a few keys per group), so 8 MiB is ample (Kafka's own test clusters use 2 MiB)
            "log.cleaner.dedupe.buffer.size": 8 << 20,
            **self.extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str, heap_mib: int) -> list[str]:
        return [self.java, f"-Xmx{heap_mib}m", f"-Xms{min(heap_mib, 64)}m", "-XX:+UseSerialGC",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}", *jvm_options(),
                "-cp", f"{self.lib}/*", main, *args]

    def _preexec(self):
        files = list(self.procs_files)

        def child():
            die_with_parent(signal.SIGKILL)
            os.setsid()   # Ctrl-C at a terminal goes to us; we stop the nodes ourselves
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))
        return child

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> "Cluster":
        t0 = time.monotonic()
        ports = pick_ports(2 * self.n, self.base_port)
        self.ports, self.cports = ports[: self.n], ports[self.n:]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(LOG4J2.format(level=self.log_level))
        try:
            self._format()
            for i in range(self.n):
                log = self.log_dir / f"{self.name}-node-{i}.log"
                self.logs.append(log)
                with open(log, "ab") as fh:
                    self.procs.append(subprocess.Popen(
                        self._netns_prefix(i) + self._java(BROKER_CLASS, str(self.node_dir(i) / "server.properties"), heap_mib=self.heap_mib),
                        stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        preexec_fn=self._preexec(), cwd=self.node_dir(i)))
            self._wait_ready(t0 + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _format(self) -> None:
        """Format every node's log.dirs with the cluster id (the nodes format at once)."""
        jobs = []
        for i in range(self.n):
            d = self.node_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            (d / "server.properties").write_text(self._properties(i))
            log = self.log_dir / f"{self.name}-node-{i}-format.log"
            with open(log, "wb") as fh:
                jobs.append((log, subprocess.Popen(
                    self._java(STORAGE_TOOL, "format", f"--cluster-id={self.cluster_id}", f"--config={d / 'server.properties'}",
                               heap_mib=128),
                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=self._preexec())))
        failed = []
        for log, p in jobs:
            try:
                rc = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            if rc != 0:
                failed.append(f"{log.name} {death(rc, log)}")
        if failed:
            raise KafkaStartFailed(f"kafka.tools.StorageTool format failed: {'; '.join(failed)} "
                                   f"(logs in {self.log_dir})")

    def _wait_ready(self, deadline: float) -> None:
        """Every node registered as a broker (metadata shows all N) and accepting connections on its
        port: a broker can be in the metadata a moment before its own listener takes clients."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "logger": _quiet_logger()})
        while True:
            self.check()
            try:
                md = admin.list_topics(timeout=2)
                if len(md.brokers) == self.n and all(self._listening(i) for i in range(self.n)):
                    return
            except Exception:   # noqa: BLE001 -- not up yet; the deadline ends the wait
                pass
            if time.monotonic() > deadline:
                raise KafkaStartFailed(f"the {self.n}-node Kafka cluster did not come up within the startup "
                                       f"timeout (stream_inference.startup_timeout_s); node 0's log says: "
                                       f"{log_cause(self.logs[0])} ({self.logs[0]})")
            time.sleep(0.5)

    def _listening(self, i: int) -> bool:
        if not self.hosts:
            return not port_free(self.ports[i])
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:    # another namespace: connect only
            c.settimeout(1.0)
            return c.connect_ex((self.address(i), self.ports[i])) == 0

    def check(self) -> None:
        """Raise BrokerDied, naming the cause found in its log, when any node has exited."""
        for i, p in enumerate(self.procs):
            rc = p.poll()
            if rc is not None:
                raise BrokerDied(f"Kafka node {i} (pid {p.pid}) {death(rc, self.logs[i])} (its log: {self.logs[i]})")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every node (controlled shutdown), SIGKILL what is left after grace_s; reap all."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def remove_data(self) -> None:
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _quiet_logger():
    """librdkafka's logger: connection refusals while nodes start are expected, not news."""
    import logging

    log = logging.getLogger("storagebrief.kafka.client")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
    return log


def partition_bytes(log_dirs: list[Path], topics: list[str]) -> int:
    """Bytes the brokers hold on disk for these topics: blocks allocated to every replica's segment and
    index files (the indexes are sparse 10 MiB files, so their apparent size would overstate it)."""
    total = 0
    for d in log_dirs:
        for t in topics:
            for part in d.glob(f"{t}-*"):
                if part.is_dir() and part.name.rsplit("-", 1)[0] == t:
                    total += sum(f.stat().st_blocks * 512 for f in part.iterdir() if f.is_file())
    return total
