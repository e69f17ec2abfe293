"""The local S3 gateway of an object-storage target: versitygw's posix backend on loopback.

versitygw (Apache-2.0, built by `make s3` into .tools/bin) serves a directory as S3: every bucket is
a folder below the gateway root and every object an ordinary file in it (metadata in xattrs), so the
object target sits on the same device, and under the same cgroup throttle, as a directory target.

Lifecycle, like the Kafka brokers of the streaming study: the port is checked (or chosen free) before
start; the gateway joins the target's cgroup before exec (procs_files), dies with the process that
started it (PR_SET_PDEATHSIG), carries the run's owner marker (procs.OWNER_ENV) and writes its log to
a file that is kept. Its credentials are random per start and reach it through its environment, never
its command line, a file or a log. A registry entry in /dev/shm names the gateway and the buckets the
run created, so after a kill -9 the next run's leftovers sweep (core.leftovers) ends the gateway and
removes those buckets (objects only storagebrief wrote).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from . import procs
from .causes import EnvironmentFailure, last_meaningful, one_line

REPO = Path(__file__).resolve().parents[3]
REGISTRY = Path("/dev/shm")
REGISTRY_PREFIX = "storagebrief-s3gw-"
BINARY_ENV = "STORAGEBRIEF_VERSITYGW"


class GatewaySetupError(ValueError):
    """The gateway cannot start (binary missing, port in use): found before any work, one line, exit 2."""


class GatewayDied(EnvironmentFailure):
    """The gateway exited while in use; the message quotes its log."""


def binary() -> Path:
    """versitygw: $STORAGEBRIEF_VERSITYGW, else the project's .tools/bin, else PATH."""
    for cand in (os.environ.get(BINARY_ENV), REPO / ".tools" / "bin" / "versitygw", shutil.which("versitygw")):
        if cand and os.access(cand, os.X_OK) and Path(cand).is_file():
            return Path(cand)
    raise GatewaySetupError("the local S3 gateway versitygw is not built: run `make s3` (it installs Go when "
                            f"missing and builds versitygw into {REPO / '.tools' / 'bin'}), or set {BINARY_ENV}")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
        c.settimeout(1.0)
        if c.connect_ex((host, port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_cause(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")[-(1 << 20):]
    except OSError as exc:
        return f"(its log {path} cannot be read: {exc.strerror})"
    return last_meaningful(text) or "(its log is empty)"


class Gateway:
    """versitygw posix over `root`, listening on 127.0.0.1:port; a context manager."""

    def __init__(self, root: Path, log_path: Path, port: int | None = None, procs_files: list[str] | None = None,
                 region: str = "us-east-1", port_key: str = "s3.port"):
        self.root, self.log_path = Path(root), Path(log_path)
        self.port, self.port_key, self.region = port, port_key, region
        self.procs_files = list(procs_files or [])
        self.access_key = "SB" + secrets.token_hex(9).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.proc: subprocess.Popen | None = None
        self.registry: Path | None = None
        self.buckets: list[str] = []
        self.startup_s: float | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def credentials(self) -> dict:
        return {"aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key}

    def _preexec(self):
        files = self.procs_files

        def child():
            procs.die_with_parent(signal.SIGKILL)
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))
        return child

    def start(self, timeout_s: float = 30.0) -> "Gateway":
        exe = binary()
        if self.port is not None and not port_free(self.port):
            raise GatewaySetupError(f"{self.port_key} = {self.port}: port already in use on 127.0.0.1; choose "
                                    "another port, or null to pick a free one")
        self.port = self.port or free_port()
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, procs.OWNER_ENV: f"{procs.owner_token()}:s3gw-{self.port}",
               "ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key}
        argv = [str(exe), "--port", f"127.0.0.1:{self.port}", "--region", self.region, "--keep-alive",
                "--quiet", "posix", str(self.root)]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, preexec_fn=self._preexec(), start_new_session=True)
        self._register()
        try:
            self._wait_ready(t0 + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        while True:
            self.check()
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
                c.settimeout(0.5)
                if c.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise GatewayDied(f"versitygw did not listen on 127.0.0.1:{self.port} within the start-up time; "
                                  f"its log says: {_log_cause(self.log_path)} ({self.log_path})")
            time.sleep(0.05)

    def check(self) -> None:
        """Raise GatewayDied, quoting its log, when the gateway has exited."""
        if self.proc is None:
            return
        rc = self.proc.poll()
        if rc is not None:
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"status {rc}"
            raise GatewayDied(f"the S3 gateway (versitygw, pid {self.proc.pid}) exited ({how}) while in use: "
                              f"{one_line(_log_cause(self.log_path), 200)} (its log: {self.log_path})")

    # -- the registry the leftovers sweep reads after a kill -9 ----------------------------------------
    def _register(self) -> None:
        self.registry = REGISTRY / f"{REGISTRY_PREFIX}{os.getpid()}-{self.port}.json"
        self._write_registry()

    def _write_registry(self) -> None:
        if self.registry is None or self.proc is None:
            return
        doc = {"owner": procs.owner_token(), "pid": self.proc.pid, "root": str(self.root), "buckets": self.buckets}
        tmp = self.registry.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.rename(self.registry)

    def own_bucket(self, name: str) -> None:
        """Record a bucket this run created: removed with its objects by remove_buckets() or, after a
        kill -9, by the next run's leftovers sweep."""
        if name not in self.buckets:
            self.buckets.append(name)
            self._write_registry()

    def remove_buckets(self) -> None:
        for b in self.buckets:
            shutil.rmtree(self.root / b, ignore_errors=True)
        self.buckets = []
        self._write_registry()

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, SIGKILL after grace_s; reaped; the registry entry goes. The buckets stay (remove_buckets)."""
        p = self.proc
        if p is not None:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.registry is not None:
            self.registry.unlink(missing_ok=True)
            self.registry = None
        self.proc = None

    def __enter__(self) -> "Gateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _is_versitygw(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("versitygw")
    except OSError:
        return False


def leftovers() -> list[str]:
    """Gateways of dead runs (their registry's owner gone) killed, and the buckets those runs created
    removed with their objects; one line each, for notes and doctor."""
    lines = []
    for entry in sorted(REGISTRY.glob(f"{REGISTRY_PREFIX}*.json")):
        try:
            doc = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if procs.owner_alive(doc.get("owner", "")):
            continue
        pid = int(doc.get("pid", 0))
        if pid and procs.running(pid) and _is_versitygw(pid) and procs.kill_all([pid]):
            lines.append(f"killed leftover S3 gateway versitygw (pid {pid}) of dead process {doc['owner'].split(':')[0]}")
        root = Path(doc.get("root", ""))
        for b in doc.get("buckets", []):
            if b and "/" not in b and (root / b).is_dir():
                shutil.rmtree(root / b, ignore_errors=True)
                lines.append(f"removed bucket {root / b} (objects a killed run wrote through its S3 gateway)")
        entry.unlink(missing_ok=True)
    return lines
