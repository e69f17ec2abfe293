"""The local S3 gateway of an object-storage target: versitygw's posix backend on loopback.

versitygw (Apache-2.0, built by `make s3` into .tools/bin) serves a directory as S3: every bucket is
a folder below the gateway root and every object an ordinary file in it (metadata in xattrs), so the
object target sits on the same device, and under the same cgroup throttle, as a directory target.

Lifecycle, like the Kafka brokers of the streaming study: the port is checked (or chosen free) before
start; the gateway joins the target's cgroup before exec (procs_files), dies with the process that
started it (PR_SET_PDEATHSIG), carries the run's owner marker (procs.OWNER_ENV) and writes its log to
a file that is kept. Its credentials are random per start and reach it through its environment, never
its command line, a file or a log. A registry entry names the gateway and the buckets the run created,
so after a kill -9 the next run's leftovers sweep (core.leftovers) ends the gateway and removes those
buckets (objects only storagebrief wrote).

Nothing another user wrote steers that sweep (issue 44): the registry lives in this user's private runtime
folder (core.runtime_dir, 0700), entries are written with mkstemp + os.replace and read with O_NOFOLLOW, and
an entry not owned by this user is ignored. Even then the sweep checks what an entry names: a gateway is
killed only when it is versitygw, runs as this user and carries the dead run's owner marker; a bucket folder
is removed only when it has a bucket name of ours (`sb-...`), is a real folder owned by this user, and lies
in the very gateway root the run made (device and inode recorded at start, opened without following a
symlink). Entries of earlier versions (/dev/shm/storagebrief-s3gw-*.json, writable by anyone's planting)
are ignored; `legacy_entries()` lists them for doctor.

The gateway proves it is ours before it gets a byte (issue 57): the port number is in versitygw's argv, which
every user can read, so another user may bind it first. Ready means every socket listening on the port
(/proc/net/tcp{,6}) is one of versitygw's own fds; anyone else's listener fails the start in one line
(GatewaySetupError, naming its uid) before a connection is made. Then a GET, signed with this start's key, of a
random nonce written into a proof bucket under the gateway's own root (0700 when ours) must return the nonce;
the proof bucket is removed after (recorded in the registry first).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from . import procs, runtime_dir
from .causes import EnvironmentFailure, last_meaningful, one_line

REPO = Path(__file__).resolve().parents[3]
LEGACY_REGISTRY = Path("/dev/shm")       # before round 4: shared, so never read any more
REGISTRY_PREFIX = "storagebrief-s3gw-"
BINARY_ENV = "STORAGEBRIEF_VERSITYGW"
BUCKET_NAME = re.compile(r"^sb-[a-z0-9-]{1,60}$")     # the buckets core.s3store makes for a run
# versitygw's start-up info lines: never the cause of a death.
INFO_LINES = re.compile(r"No IAM service configured|enabling single account mode")


def __getattr__(name: str):
    # REGISTRY: the folder entries live in (this user's runtime folder), found when asked.
    if name == "REGISTRY":
        return runtime_dir.path()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GatewaySetupError(ValueError):
    """The gateway cannot start (binary missing, port in use): found before any work, one line, exit 2."""


class GatewayDied(EnvironmentFailure):
    """The gateway exited while in use; the message quotes its log."""


def binary() -> Path:
    """versitygw: $STORAGEBRIEF_VERSITYGW (when set, that file and no other), else the project's .tools/bin,
    else PATH. A file that is there but not executable is named as such, not as missing."""
    chosen = os.environ.get(BINARY_ENV)
    cands = [Path(chosen)] if chosen else [REPO / ".tools" / "bin" / "versitygw"]
    if not chosen and shutil.which("versitygw"):
        cands.append(Path(shutil.which("versitygw")))
    for cand in cands:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    for cand in cands:
        if cand.is_file():
            raise GatewaySetupError(f"the local S3 gateway versitygw at {cand} is not executable (mode "
                                    f"{stat.S_IMODE(cand.stat().st_mode):o}): chmod +x it, or rebuild it with "
                                    f"`make s3`" + (f" (it is {BINARY_ENV})" if chosen else ""))
    if chosen:
        raise GatewaySetupError(f"{BINARY_ENV} = {chosen}: no such file (or not a file); point it at a versitygw "
                                "binary, or unset it to use the project's (`make s3`)")
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


def listeners(port: int) -> list[tuple[int, int]]:
    """(socket inode, uid) of every TCP socket listening on `port`, any address, IPv4 or IPv6 (this
    network namespace's /proc/net/tcp{,6}: readable by every user, uid included)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.append((int(f[9]), int(f[7])))
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds open (its /proc/<pid>/fd links socket:[inode])."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def socket_holder(inode: int) -> int | None:
    """A process holding socket `inode`, where this user may look (root: any); None when none is visible."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and inode in socket_inodes(int(d.name)):
            return int(d.name)
    return None


def _log_cause(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")[-(1 << 20):]
    except OSError as exc:
        return f"(its log {path} cannot be read: {exc.strerror})"
    if not text.strip():
        return "(its log is empty)"
    cause = last_meaningful("\n".join(ln for ln in text.splitlines() if not INFO_LINES.search(ln)))
    return cause or "(its log names no cause)"


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
        self.marker = ""                       # STORAGEBRIEF_OWNER of the gateway process
        self.root_id: list[int] | None = None  # (st_dev, st_ino) of root as made: the sweep removes only there
        self._proof: tuple[str, bytes] | None = None   # (bucket, nonce) of the start-up proof request

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
        if self.root.stat().st_uid == os.geteuid():
            os.chmod(self.root, 0o700)       # the objects, and the proof nonce, are this user's alone
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.marker = f"{procs.owner_token()}:s3gw-{self.port}"
        env = {**os.environ, procs.OWNER_ENV: self.marker,
               "ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key}
        argv = [str(exe), "--port", f"127.0.0.1:{self.port}", "--region", self.region, "--keep-alive",
                "--quiet", "posix", str(self.root)]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as fh:
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, preexec_fn=self._preexec(), start_new_session=True)
        try:
            self._register()
            self._make_proof()
            self._wait_ready(t0 + timeout_s)
        except BaseException:
            self.stop()
            self._drop_proof()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        """Ready = the listener on 127.0.0.1:port is our child's own socket (no byte goes to anyone else's),
        then an authenticated GET of a nonce only our gateway can serve (proof_bucket)."""
        while True:
            inodes = listeners(self.port)
            theirs = [(i, uid) for i, uid in inodes if i not in socket_inodes(self.proc.pid)] if inodes else []
            if theirs:
                inode, uid = theirs[0]
                holder = socket_holder(inode)
                raise GatewaySetupError(
                    f"the gateway's port {self.port} on 127.0.0.1 was taken by another process (uid {uid}"
                    + (f", pid {holder}" if holder else "") + ") before versitygw could bind it: another local "
                    "user may be impersonating the gateway; nothing was sent to it; try again")
            self.check()
            if inodes:
                return self._prove(deadline)
            if time.monotonic() > deadline:
                raise GatewayDied(f"versitygw did not listen on 127.0.0.1:{self.port} within the start-up time; "
                                  f"its log says: {_log_cause(self.log_path)} ({self.log_path})")
            time.sleep(0.05)

    def _prove(self, deadline: float) -> None:
        """GET the nonce written under our own root, signed with this start's key: only our gateway has both."""
        import boto3
        from botocore.config import Config

        name, nonce = self._proof
        cfg = Config(signature_version="s3v4", connect_timeout=2, read_timeout=10, retries={"max_attempts": 1},
                     s3={"addressing_style": "path"})
        c = boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region, config=cfg, **self.credentials)
        while True:
            try:
                body = c.get_object(Bucket=name, Key="nonce")["Body"].read()
                break
            except Exception as exc:   # noqa: BLE001 -- retried until the deadline, then named
                self.check()
                if time.monotonic() > deadline:
                    raise GatewayDied(f"versitygw on 127.0.0.1:{self.port} did not answer its proof request "
                                      f"({one_line(str(exc), 160)}); its log says: {_log_cause(self.log_path)}") from None
                time.sleep(0.1)
        if body != nonce:
            raise GatewaySetupError(f"the server on 127.0.0.1:{self.port} answered the gateway's proof request "
                                    f"with {len(body)} bytes that are not the nonce: it is not our versitygw; "
                                    "try again")
        self._drop_proof()

    def _make_proof(self) -> None:
        """A bucket folder of ours holding a random nonce, under the root (0700 where ours)."""
        name, nonce = f"sb-proof-{secrets.token_hex(6)}", secrets.token_bytes(32)
        self.own_bucket(name)                 # recorded first: a kill -9 leaves it to the leftovers sweep
        folder = self.root / name
        folder.mkdir(mode=0o700)
        fd = os.open(folder / "nonce", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(nonce)
        self._proof = (name, nonce)

    def _drop_proof(self) -> None:
        if self._proof is not None:
            name, self._proof = self._proof[0], None
            remove_bucket(self.root, self.root_id, name)
            self.buckets = [b for b in self.buckets if b != name]
            self._write_registry()

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
        st = os.lstat(self.root)
        self.root_id = [st.st_dev, st.st_ino]
        self.registry = runtime_dir.path() / f"{REGISTRY_PREFIX}{os.getpid()}-{self.port}.json"
        self._write_registry()

    def _write_registry(self) -> None:
        if self.registry is None or self.proc is None:
            return
        doc = {"owner": procs.owner_token(), "pid": self.proc.pid, "marker": self.marker, "root": str(self.root),
               "root_id": self.root_id, "buckets": self.buckets}
        fd, tmp = tempfile.mkstemp(prefix=".s3gw-", suffix=".tmp", dir=self.registry.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(doc))
            os.replace(tmp, self.registry)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def own_bucket(self, name: str) -> None:
        """Record a bucket this run created: removed with its objects by remove_buckets() or, after a
        kill -9, by the next run's leftovers sweep."""
        if name not in self.buckets:
            self.buckets.append(name)
            self._write_registry()

    def remove_buckets(self) -> None:
        for b in self.buckets:
            remove_bucket(self.root, self.root_id, b)
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


def _ours(pid: int, marker: str, owner: str) -> bool:
    """pid is versitygw, runs as this user and carries the marker a run with `owner` gave its gateway."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return False
    return (bool(marker) and marker.startswith(f"{owner}:s3gw-") and uid == os.geteuid()
            and procs.marker(pid) == marker and _is_versitygw(pid))


def remove_bucket(root: Path, root_id, name: str) -> str | None:
    """Remove bucket folder `name` below the gateway root a run made: only a bucket name of ours, a real folder
    of this user, in the root whose (device, inode) is `root_id` (no symlink followed, none swapped in).
    Returns the removed path, or None."""
    if not isinstance(name, str) or not BUCKET_NAME.match(name) or not root_id or len(root_id) != 2:
        return None
    try:
        rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        rst = os.fstat(rfd)
        if [rst.st_dev, rst.st_ino] != list(root_id) or rst.st_uid != os.geteuid():
            return None
        try:
            bst = os.lstat(name, dir_fd=rfd)
        except OSError:
            return None
        if not stat.S_ISDIR(bst.st_mode) or bst.st_uid != os.geteuid():
            return None
        shutil.rmtree(name, dir_fd=rfd, ignore_errors=True)      # fd-based: no symlink below is followed
        return str(Path(root) / name)
    finally:
        os.close(rfd)


def _entries() -> list[Path]:
    found = []
    for folder in runtime_dir.usable():
        found += sorted(folder.glob(f"{REGISTRY_PREFIX}*.json"))
    return found


def _read_own(entry: Path) -> dict | None:
    fd = runtime_dir.open_own(entry)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            doc = json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def leftovers() -> list[str]:
    """Gateways of dead runs (their registry's owner gone) killed, and the buckets those runs created
    removed with their objects; one line each, for notes and doctor. Reads only this user's runtime folder."""
    lines = []
    for entry in _entries():
        doc = _read_own(entry)
        owner = doc.get("owner", "") if doc else ""
        if not isinstance(owner, str) or not owner or procs.owner_alive(owner):
            continue
        pid = doc.get("pid", 0)
        if isinstance(pid, int) and pid > 0 and procs.running(pid) and _ours(pid, doc.get("marker", ""), owner) \
                and procs.kill_all([pid]):
            lines.append(f"killed leftover S3 gateway versitygw (pid {pid}) of dead process {owner.split(':')[0]}")
        buckets = doc.get("buckets", [])
        for b in buckets if isinstance(buckets, list) else []:
            gone = remove_bucket(Path(str(doc.get("root", ""))), doc.get("root_id"), b)
            if gone:
                lines.append(f"removed bucket {gone} (objects a killed run wrote through its S3 gateway)")
        entry.unlink(missing_ok=True)
    return lines


def legacy_entries() -> list[Path]:
    """Registry files of versions before round 4 in /dev/shm: ignored (anyone could have written them)."""
    try:
        return sorted(LEGACY_REGISTRY.glob(f"{REGISTRY_PREFIX}*.json"))
    except OSError:
        return []
