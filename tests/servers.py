"""Real servers on loopback for the tests, each started once per session on a free port
and stopped at the end: ``redis_server`` (redis-server), ``s3_server`` (moto's S3
server, the one s3fs's own tests use) and ``http_server`` (Python's HTTP server with
``Range`` support, serving a temporary folder).

Fixtures of a server that is not installed skip their tests with the reason; ``make test``
installs all of them.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes] | None, what: str) -> None:
    # A server that never comes up is reported, not waited on for ever: the loop gives
    # up after 30 s (a start-up budget, not an assertion on speed).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} at start-up")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within 30 s")


@dataclass
class RedisServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of its own on a free loopback port, without persistence."""
    pytest.importorskip("redis")
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc, "redis-server")
        yield RedisServer("127.0.0.1", port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class RedisProcess:
    """A redis-server of a test's own, which the test may stop, restart (on the same port,
    without persistence: the data is gone, as after a crash) or start with other
    settings (``--maxmemory``, ``--requirepass``...)."""

    def __init__(self, workdir: Path, *args: str) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed (make test installs it)")
        self.exe, self.workdir, self.args = exe, workdir, args
        self.host, self.port = "127.0.0.1", free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        cmd = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--dir", str(self.workdir), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(self.port, self.proc, "redis-server")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def restart(self) -> None:
        """Kill the server and start it again: every key is gone."""
        self.stop()
        self.start()


@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisProcess]:
    """A fresh redis-server for this test alone (see ``RedisProcess``)."""
    pytest.importorskip("redis")
    server = RedisProcess(tmp_path)
    try:
        yield server
    finally:
        server.stop()


class RedisProxy:
    """A TCP proxy on loopback in front of a redis-server, which a test switches to
    misbehave: ``mode`` is ``"pass"`` (forward both ways), ``"silent"`` (swallow every
    command: a stopped or overloaded server), ``"garbage"`` (answer every command with
    ``garbage``, never forwarding it: not a Redis server) or ``"cut"`` (forward the first
    ``cut`` bytes of the next reply, then close: a connection lost mid-reply).
    ``accepted`` counts the connections clients made."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode, self.garbage, self.cut = "pass", b"", 0
        self.accepted = 0
        self._listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listen.bind(("127.0.0.1", 0))
        self._listen.listen(64)
        self.port = int(self._listen.getsockname()[1])
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._socks += [client, upstream]
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(1 << 16):
                if self.mode == "garbage":
                    client.sendall(self.garbage)
                elif self.mode != "silent":
                    upstream.sendall(data)
        except OSError:
            pass

    def _down(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := upstream.recv(1 << 16):
                if self.mode == "cut":
                    client.sendall(data[: self.cut])
                    client.shutdown(socket.SHUT_RDWR)
                    return
                client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self._listen.close()
        for sock in self._socks:
            sock.close()


@pytest.fixture
def redis_proxy(redis_server: RedisServer) -> Iterator[RedisProxy]:
    """A ``RedisProxy`` in front of the session's redis-server, for this test alone."""
    proxy = RedisProxy(redis_server.port)
    try:
        yield proxy
    finally:
        proxy.close()


@dataclass
class S3Server:
    endpoint_url: str

    def storage_options(self) -> dict[str, object]:
        """What s3fs needs to reach this server (the credentials are moto's dummies)."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint_url},
        }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server (the one s3fs's own tests use) on a free loopback port."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        _wait_listening(port, None, "moto's S3 server")
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """GET with one ``Range: bytes=A-B``, HEAD, an ETag from size and mtime; counts the
    GETs, the HEADs and the body bytes it sends, and cuts the reply after ``cut_after``
    bytes when set; with a ``token``, refuses (403) every request without
    ``Authorization: Bearer <token>``."""

    server: _RangeHTTPServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _target(self) -> tuple[str, os.stat_result] | None:
        token = self.server.token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self.send_error(403)
            return None
        path = self.translate_path(self.path)
        try:
            st = os.stat(path)
        except OSError:
            self.send_error(404)
            return None
        if not stat.S_ISREG(st.st_mode):
            self.send_error(404)
            return None
        return path, st

    def _headers(self, st: os.stat_result, length: int, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{st.st_size:x}-{st.st_mtime_ns:x}"')
        self.send_header("Last-Modified", self.date_time_string(int(st.st_mtime)))

    def do_HEAD(self) -> None:
        self.server.heads += 1
        found = self._target()
        if found is not None:
            self._headers(found[1], found[1].st_size, 200)
            self.end_headers()

    def do_GET(self) -> None:
        self.server.gets += 1
        found = self._target()
        if found is None:
            return
        path, st = found
        start, end = 0, st.st_size
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if m is None:
                self.send_error(416)
                return
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1, st.st_size) if m.group(2) else st.st_size
            status = 206
        self._headers(st, end - start, status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{st.st_size}")
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start)
        cut = self.server.cut_after
        # Counted before the write: the client may read the reply (and the test the
        # counter) before this thread runs again.
        if cut is not None and len(body) > cut:
            self.server.sent += cut
            self.wfile.write(body[:cut])
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.server.sent += len(body)
        self.wfile.write(body)


class _RangeHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    sent = 0
    gets = 0
    heads = 0
    cut_after: int | None = None
    token: str | None = None


@dataclass
class HTTPServer:
    root: Path
    url: str
    server: _RangeHTTPServer

    @property
    def bytes_sent(self) -> int:
        return self.server.sent

    @property
    def gets(self) -> int:
        """GET requests answered so far (refused ones included)."""
        return self.server.gets

    @property
    def heads(self) -> int:
        """HEAD requests answered so far."""
        return self.server.heads

    def cut_replies_after(self, n: int | None) -> None:
        """From now on, drop every reply after ``n`` body bytes (None: whole replies)."""
        self.server.cut_after = n

    def require_token(self, token: str | None) -> None:
        """From now on, refuse requests without ``Authorization: Bearer <token>`` (None: open)."""
        self.server.token = token


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: the URL of a file there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/ds.tdz"
    finally:
        sock.close()


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HTTPServer]:
    """An HTTP server honouring ``Range``, serving a temporary folder, on a free port."""
    root = tmp_path_factory.mktemp("http")
    handler = functools.partial(_RangeHandler, directory=str(root))
    server = _RangeHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HTTPServer(root, f"http://127.0.0.1:{server.server_address[1]}", server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
