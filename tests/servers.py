"""Real servers on loopback for the tests, each started once per session on a free port
and stopped at the end: ``redis_server`` (redis-server), ``s3_server`` (moto's S3
server, the one s3fs's own tests use) and ``http_server`` (Python's HTTP server with
``Range`` support, serving a temporary folder).

Fixtures of a server that is not installed skip their tests with the reason; ``make test``
installs all of them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
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
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, proc, "redis-server")
        yield RedisServer("127.0.0.1", port)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
