"""The benchmark's own redis-server, and what it tells about itself (``INFO``).

The server runs on a free loopback port (never 6379, never the machine's own Redis),
without persistence: the benchmark measures the claim protocol, not the disk. Every
measurement is a difference of two ``INFO`` snapshots taken around a window.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

REDIS_SERVER = shutil.which("redis-server")
REDIS_BENCHMARK = shutil.which("redis-benchmark")


def free_port() -> int:
    """Return a free loopback TCP port other than 6379."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != 6379:
            return port


class BenchServer:
    """One private redis-server process."""

    def __init__(self, directory: Path) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis)")
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.version = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> BenchServer:
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
            "no",
            "--maxclients",
            "10000",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                self.version = str(self.client().info("server")["redis_version"])
                return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer in 10 s")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def flush(self) -> None:
        self.client().flushall()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class InfoSnapshot:
    """Redis's own counters at one instant."""

    wall_s: float
    cpu_s: float
    commands: dict[str, int]
    usec: dict[str, int]

    @classmethod
    def take(cls, client: redis.Redis) -> InfoSnapshot:
        info: dict[str, Any] = client.info("all")
        commands = {
            key.removeprefix("cmdstat_"): int(value["calls"])
            for key, value in info.items()
            if key.startswith("cmdstat_")
        }
        usec = {
            key.removeprefix("cmdstat_"): int(value["usec"])
            for key, value in info.items()
            if key.startswith("cmdstat_")
        }
        cpu_s = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        return cls(time.time(), cpu_s, commands, usec)

    def usec_per_call(self, later: InfoSnapshot) -> dict[str, float]:
        """Redis's own time per call of each command between two snapshots (µs)."""
        out = {}
        for name, calls in later.commands.items():
            done = calls - self.commands.get(name, 0)
            if done and name != "info":
                out[name] = round((later.usec[name] - self.usec.get(name, 0)) / done, 2)
        return out

    def delta(self, later: InfoSnapshot) -> tuple[float, float, dict[str, int]]:
        """(wall seconds, Redis CPU seconds, calls by command) between two snapshots.

        The monitoring's own ``INFO`` calls are left out.
        """
        names = set(self.commands) | set(later.commands)
        calls = {
            name: later.commands.get(name, 0) - self.commands.get(name, 0)
            for name in names
            if name != "info"
        }
        return (
            later.wall_s - self.wall_s,
            later.cpu_s - self.cpu_s,
            {name: n for name, n in calls.items() if n},
        )
