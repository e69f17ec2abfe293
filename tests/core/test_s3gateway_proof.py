"""The local S3 gateway proves it is ours before it gets a byte (issue 57, defect 1): the listener on its port
must be one of versitygw's own sockets (a port another user took first is refused in one line, nothing sent to
it), readiness is a GET of a nonce under the gateway's own root signed with the start's key, and a GET counts
the bytes it received (a short body fails the batch)."""
from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from storagebrief.core import s3gateway, s3mover, s3store
from storagebrief.kit import s3ops

try:
    s3gateway.binary()
    NO_GATEWAY = None
except s3gateway.GatewaySetupError as exc:
    NO_GATEWAY = str(exc)

NOBODY = 65534

# An impostor: listens on a free loopback port, prints it, counts every byte any client sends it until its
# stdin closes, then prints the count.
IMPOSTOR = textwrap.dedent("""
    import select, socket, sys
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(16)
    print(srv.getsockname()[1], flush=True)
    conns, total = [], 0
    while True:
        r, _, _ = select.select([srv, sys.stdin, *conns], [], [], 30)
        if not r or sys.stdin in r:
            break
        for s in r:
            if s is srv:
                conns.append(srv.accept()[0])
            else:
                data = s.recv(65536)
                total += len(data)
                if not data:
                    conns.remove(s)
    print("received", total, flush=True)
""")


def _as_other_user() -> tuple[list[str], int]:
    """argv prefix running Python as another uid (65534 via setpriv, as root); without root, this user."""
    if os.geteuid() != 0:
        return [sys.executable], os.geteuid()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable]
    if subprocess.run([*argv, "-c", "pass"], capture_output=True, cwd="/").returncode:
        pytest.skip(f"{sys.executable} cannot be run by uid {NOBODY}")
    return argv, NOBODY


@pytest.mark.skipif(NO_GATEWAY is not None, reason=str(NO_GATEWAY))
def test_a_port_another_user_took_is_refused_and_gets_no_byte(tmp_path, monkeypatch):
    """The race of the issue, made certain: the port chosen for versitygw is already held by a uid-65534
    listener. The start refuses in one line naming that uid, and the impostor received not one byte."""
    argv, uid = _as_other_user()
    imp = subprocess.Popen([*argv, "-c", IMPOSTOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           cwd="/")
    try:
        assert select.select([imp.stdout], [], [], 20)[0], "the impostor did not start"
        port = int(imp.stdout.readline())
        monkeypatch.setattr(s3gateway, "free_port", lambda: port)
        gw = s3gateway.Gateway(tmp_path / "root", tmp_path / "gw.log")
        with pytest.raises(s3gateway.GatewaySetupError) as err:
            gw.start(timeout_s=10)
        msg = str(err.value)
        assert "\n" not in msg
        assert f"port {port}" in msg and f"uid {uid}" in msg and "impersonat" in msg
        assert gw.proc is None and not list(s3gateway.REGISTRY.glob(f"{s3gateway.REGISTRY_PREFIX}{os.getpid()}-{port}*"))
        assert not [p for p in (tmp_path / "root").iterdir() if p.name.startswith("sb-proof-")]
    finally:
        out, _ = imp.communicate("", timeout=20)
    assert out.split()[-2:] == ["received", "0"], out


@pytest.mark.skipif(NO_GATEWAY is not None, reason=str(NO_GATEWAY))
def test_ready_means_our_listener_and_the_nonce_answered(tmp_path):
    """A good start: the listener is versitygw's own socket, the proof bucket is gone after, the root is 0700."""
    with s3gateway.Gateway(tmp_path / "root", tmp_path / "gw.log") as gw:
        held = s3gateway.socket_inodes(gw.proc.pid)
        assert [i for i, _ in s3gateway.listeners(gw.port)] and \
            all(i in held for i, _ in s3gateway.listeners(gw.port))
        assert not list((tmp_path / "root").iterdir()) and gw.buckets == []
        assert (tmp_path / "root").stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(NO_GATEWAY is not None, reason=str(NO_GATEWAY))
def test_a_server_that_cannot_give_the_nonce_is_not_ours(tmp_path, monkeypatch):
    """The proof compares the body: a server whose answer is not the nonce written under our root is refused."""
    real = s3gateway.Gateway._make_proof

    def wrong(self):
        real(self)
        self._proof = (self._proof[0], b"not what the root holds")
    monkeypatch.setattr(s3gateway.Gateway, "_make_proof", wrong)
    gw = s3gateway.Gateway(tmp_path / "root", tmp_path / "gw.log")
    with pytest.raises(s3gateway.GatewaySetupError, match="proof request .* not our versitygw"):
        gw.start(timeout_s=20)
    assert gw.proc is None and not list((tmp_path / "root").iterdir())


class _Body:
    def __init__(self, data: bytes):
        self.data = data

    def read(self, n: int = -1) -> bytes:
        out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return out


def test_a_short_get_body_is_not_counted_as_a_whole_object():
    """A GET whose body is shorter than the object (an impostor's empty 200) fails the batch in one line:
    bytes_moved never counts requested bytes that did not arrive."""
    client = SimpleNamespace(get_object=lambda Bucket, Key: {"Body": _Body(b"x" * 10 if Key == "k1" else b"")})
    store = s3store.S3Client.__new__(s3store.S3Client)
    store.client, store.bucket = client, "b"
    with pytest.raises(OSError, match=r"GET s3://b/k2 returned 0 of 10 bytes"):
        s3ops.store_batch(store, "get", ["k1", "k2"], 10, 2)
    whole = s3ops.store_batch(store, "get", ["k1", "k1"], 10, 2)
    assert whole.row()["bytes_moved"] == 20


@pytest.mark.skipif(s3mover.missing() is not None, reason=str(s3mover.missing()))
def test_a_short_get_fails_the_emulated_sample():
    """emulate's object loader, through its compiled client (core.s3mover): a sample whose body came back short
    (a server answering every request with 3 bytes) is an error, not a sample read."""
    import http.server
    import threading
    from storagebrief.studies.emulate.objects import ObjectLoader

    class Short(http.server.BaseHTTPRequestHandler):
        def _head(self):
            self.send_response(200)
            for k, v in (("Content-Length", "3"), ("ETag", '"e"'), ("Last-Modified", self.date_time_string()),
                         ("Content-Type", "application/octet-stream")):
                self.send_header(k, v)
            self.end_headers()

        def do_HEAD(self):
            self._head()

        def do_GET(self):
            self._head()
            self.wfile.write(b"abc")

        def log_message(self, *_):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Short)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    reach = {"endpoint": f"http://127.0.0.1:{srv.server_port}", "bucket": "bucket", "region": "us-east-1",
             "profile": None, "verify_tls": True, "addressing": "path",
             "credentials": {"aws_access_key_id": "k", "aws_secret_access_key": "s"}}
    loader = ObjectLoader(["k0"], [[(0, 0, 16)]], 1, 1, 4, {"store": {"s3": reach}, "sizes": [16], "backing": None})
    try:
        with pytest.raises(OSError, match="GET s3 k0 bytes 0\\+16: received 3 of 16 bytes"):
            loader.read_batch(0, [(0, 0, 16)])
    finally:
        loader.close()
        srv.shutdown()
