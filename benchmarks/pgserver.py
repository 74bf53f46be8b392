"""The benchmark's own postgres, and what it tells about itself (CPU from ``/proc``).

The server is the tests' (tests/postgres_server.py): initdb in a temporary directory, a
free loopback port (never 5432, never the machine's own service), ``fsync`` off as the
benchmark's redis-server runs without persistence: the benchmark measures the claim
protocol, not the disk. Its CPU is read from ``/proc``: the postmaster's own and its
reaped children's (``cutime``/``cstime``: backends that exited), plus every live child's
(the backends of the agents' connections, autovacuum, the writers).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.schema import upgrade
from tests.postgres_server import BINDIR, PostgresServer

PGBENCH = shutil.which("pgbench") or (str(BINDIR / "pgbench") if BINDIR else None)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int, *, children: bool) -> float:
    """CPU seconds of ``pid`` (utime + stime, and its reaped children's with ``children``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 1-based
    # from the state field at index 0.
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / TICKS_PER_S


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        for task in tasks:
            text = (task / "children").read_text().split()
            out += [int(child) for child in text]
    except OSError:
        return out
    return out


class BenchPostgres(PostgresServer):
    """One private postgres with cronrace's schema, able to report its own CPU."""

    def __init__(self, conf: dict[str, str] | None = None) -> None:
        if BINDIR is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        super().__init__({"max_connections": "1200", **(conf or {})})
        self.version = ""

    def start(self, timeout_s: float = 60.0) -> BenchPostgres:
        super().start(timeout_s)
        self.version = str(self.execute("SHOW server_version")[0][0])
        anyio.run(self._upgrade)
        return self

    async def _upgrade(self) -> None:
        store = PostgresStore.from_url(self.url, "bench", max_connections=1)
        try:
            await upgrade(store.db)
        finally:
            await store.aclose()

    def cpu_s(self) -> float:
        """Every server process's CPU so far (exited backends' included), seconds."""
        if self.process is None:
            return 0.0
        pid = self.process.pid
        total = _proc_cpu_s(pid, children=True)
        for child in _children(pid):
            total += _proc_cpu_s(child, children=True)
        return total

    def flush(self) -> None:
        """Empty cronrace's tables (every namespace), as FLUSHALL empties Redis."""
        tables = "claims, jobs, runs, nodes, epochs, fleet, control, fenced_values, quarantine"
        qualified = ", ".join(f"cronrace.{name.strip()}" for name in tables.split(","))
        self.execute(f"TRUNCATE {qualified}")

    def snapshot(self) -> PgSnapshot:
        """The server's CPU and transaction count now."""
        commits = self.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )[0][0]
        return PgSnapshot(time.time(), self.cpu_s(), int(commits))

    def __enter__(self) -> BenchPostgres:
        return self.start()


@dataclass(frozen=True)
class PgSnapshot:
    """The server's CPU and committed transactions at one instant (InfoSnapshot's shape)."""

    wall_s: float
    cpu_s: float
    commits: int

    @property
    def shards(self) -> dict[str, Any]:
        return {}

    def delta(self, later: PgSnapshot) -> tuple[float, float, dict[str, int]]:
        """(wall seconds, server CPU seconds, {"commit": transactions}) between two."""
        return (
            later.wall_s - self.wall_s,
            later.cpu_s - self.cpu_s,
            {"commit": later.commits - self.commits},
        )

    def usec_per_call(self, later: PgSnapshot) -> dict[str, float]:
        return {}
