"""Real agent processes on a real PostgreSQL server: crashed (``-m immediate``) and restarted
at several phases of a tick, and backends killed with ``pg_terminate_backend``; the
handlers log to the witness (a redis-server no fault touches)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cronrace.model.records import RunRecord
from cronrace.stores.postgres import PostgresStore
from tests.conftest import upgrade_schema
from tests.faults.witness import (
    Witness,
    judge,
    log_lines,
    sleep_until_fraction,
    start_node,
    stop_all,
)
from tests.postgres_server import PostgresServer, postgres_available

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def fault_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, for the faults to hit."""
    if not postgres_available():
        pytest.skip("PostgreSQL not installed")
    server = PostgresServer()
    try:
        server.start()
        upgrade_schema(server.url)
        yield server
    finally:
        server.cleanup()


def unexplained(server: PostgresServer, namespace: str, missed: list[int]) -> list[int]:
    """The ``missed`` ticks of ``fast`` that the store has no record of: a tick that did not
    run must say why (skipped behind a run whose release waited for the server, missed)."""

    async def read() -> list[RunRecord]:
        store = PostgresStore.from_url(server.url, namespace)
        try:
            return await store.history("fast", 500)
        finally:
            await store.aclose()

    recorded = {record.tick_s for record in anyio.run(read)}
    return [tick for tick in missed if tick not in recorded]


def wait_for_runs(witness: Witness, job: str, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while len({e["tick"] for e in witness.events() if e["job"] == job}) < count:
        assert time.monotonic() < deadline, f"fewer than {count} {job} runs"
        time.sleep(0.05)


@pytest.mark.timeout(150)
def test_crash_restarts_of_postgres_fire_no_tick_twice_and_keep_fences_in_order(
    fault_postgres: PostgresServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    procs = [
        start_node(fault_postgres.url, namespace, f"p{i}", witness, stderr_dir=tmp_path)
        for i in range(3)
    ]
    outages: list[tuple[float, float]] = []
    try:
        wait_for_runs(witness, "fast", 3)
        wait_for_runs(witness, "slow", 1)  # a slow run holds its lease across the crash
        # Claims in flight (just after a tick), then mid-second (decisions and renewals).
        for fraction in (0.005, 0.5, 0.02):
            sleep_until_fraction(fraction)
            down = time.time()
            fault_postgres.restart("immediate")
            outages.append((down, time.time()))
            time.sleep(4.0)
        t_end = time.time()
    finally:
        stop_all(procs)
    events = witness.events()
    first = min(e["tick"] for e in events if e["job"] == "fast")
    # Ticks due while the server was down (and the second after it came back, while the
    # nodes reconnect) may be missed, by design (catchup = latest): excused.
    excused = {tick for down, up in outages for tick in range(int(down) - 1, int(up) + 3)}
    fast = judge(events, "fast", first_tick_s=first, last_tick_s=int(t_end) - 2, excused=excused)
    detail = fast.summary() + "\n" + log_lines(tmp_path, fast.duplicates + fast.missed)
    assert fast.duplicates == [], detail
    assert fast.overlaps == [], detail
    assert fast.fence_disorder == [], detail
    assert unexplained(fault_postgres, namespace, fast.missed) == [], detail
    after = [e["tick"] for e in events if e["job"] == "fast" and e["tick"] > outages[-1][1] + 2]
    assert after, "the fleet fired nothing after the last restart"
    slow = judge(events, "slow", first_tick_s=first, last_tick_s=first, excused={first})
    assert (slow.duplicates, slow.overlaps, slow.fence_disorder) == ([], [], []), slow.summary()


@pytest.mark.timeout(120)
def test_killed_backends_mid_decision_decide_each_tick_once(
    fault_postgres: PostgresServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    procs = [
        start_node(fault_postgres.url, namespace, f"k{i}", witness, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        wait_for_runs(witness, "fast", 3)
        killed = 0
        deadline = time.time() + 12
        while time.time() < deadline:
            sleep_until_fraction(0.003)  # the claims and decisions of the tick are in flight
            rows = fault_postgres.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE usename = 'postgres' AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
            killed += int(rows[0][0])
            time.sleep(0.5)
        time.sleep(3.0)
        t_end = time.time()
    finally:
        stop_all(procs)
    assert killed > 10, "the test killed too few backends to mean anything"
    events = witness.events()
    first = min(e["tick"] for e in events if e["job"] == "fast")
    fast = judge(events, "fast", first_tick_s=first, last_tick_s=int(t_end) - 2)
    detail = fast.summary() + "\n" + log_lines(tmp_path, fast.duplicates + fast.missed)
    assert fast.duplicates == [], detail
    assert fast.overlaps == [], detail
    assert fast.fence_disorder == [], detail
    # A killed decision is read back and decided once; a tick that did not run says why.
    assert unexplained(fault_postgres, namespace, fast.missed) == [], detail
