"""A real redis-server for tests: own port, own directory, started and stopped by us.

Tests never use a server someone else started, and never port 6379.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    """Return a free loopback TCP port (never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != 6379:
            return port


class RedisServer:
    """One redis-server process on 127.0.0.1, with its data in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self.directory = directory
        self.port = port or free_port()
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [
            str(REDIS_SERVER),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            if self.ping():
                return self
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout_s}s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def redis_available() -> bool:
    return REDIS_SERVER is not None


def require_redis_in_ci() -> None:
    """In CI a missing redis-server is a failure, not a skip."""
    if os.environ.get("CI") and REDIS_SERVER is None:
        raise RuntimeError("CI=true but redis-server is not installed (see scripts/test.sh)")
