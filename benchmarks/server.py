"""The benchmark's own redis-server, and what it tells about itself (``INFO``).

The server runs on a free loopback port (never 6379, never the machine's own Redis),
without persistence: the benchmark measures the claim protocol, not the disk. Every
measurement is a difference of two ``INFO`` snapshots taken around a window.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from cronrace.testing import REDIS_SERVER, RedisServer

REDIS_BENCHMARK = shutil.which("redis-benchmark")


class BenchServer(RedisServer):
    """One private redis-server without persistence, able to report on itself."""

    def __init__(self, directory: Path) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis)")
        super().__init__(directory, appendonly=False, extra_args=("--maxclients", "10000"))
        self.version = ""

    def start(self, timeout_s: float = 10.0) -> BenchServer:
        super().start(timeout_s)
        self.version = str(self.client().info("server")["redis_version"])
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def flush(self) -> None:
        self.client().flushall()

    def snapshot(self) -> InfoSnapshot:
        """Redis's own counters now."""
        return InfoSnapshot.take(self.client())

    def __enter__(self) -> BenchServer:
        return self.start()


@dataclass(frozen=True)
class InfoSnapshot:
    """Redis's own counters at one instant."""

    wall_s: float
    cpu_s: float
    commands: dict[str, int]
    usec: dict[str, int]
    #: A cluster's snapshot: each primary's own, by ``host:port`` (the totals are sums).
    shards: dict[str, InfoSnapshot] = field(default_factory=dict)

    @classmethod
    def combine(cls, shards: dict[str, InfoSnapshot]) -> InfoSnapshot:
        """One snapshot of several servers: CPU and calls summed, each kept in ``shards``."""
        commands: dict[str, int] = {}
        usec: dict[str, int] = {}
        for part in shards.values():
            for name, calls in part.commands.items():
                commands[name] = commands.get(name, 0) + calls
                usec[name] = usec.get(name, 0) + part.usec.get(name, 0)
        wall = max(part.wall_s for part in shards.values())
        cpu = sum(part.cpu_s for part in shards.values())
        return cls(wall, cpu, commands, usec, dict(shards))

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
