"""The PostgreSQL store against the reference: the same state and request, the same reply
and resulting state (the harness of ``test_redis.py``; the job's rows: ``postgres.py``).

Every example writes a drawn state into a job's rows, calls ``decide()``, ``renew_lease()``
or ``end_run()`` through the store, reads the rows back, and requires the reference's reply
and state, or fails naming each field that differs. The reference runs at the database's
``now_us()`` read just before the example; what a function computes from its clock during
the call is compared within the call's window (``codec.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cronrace import protocol
from cronrace.protocol import DecideRequest, ReleaseRequest, RenewRequest
from cronrace.stores.postgres import PostgresStore
from tests.postgres_server import PostgresServer
from tests.stores.differential.postgres import PostgresCodec
from tests.stores.differential.strategies import (
    Case,
    decide_cases,
    release_cases,
    renew_cases,
)
from tests.stores.differential.test_redis import Bench, _decide, _run_end

pytestmark = pytest.mark.postgres

#: How many examples each test runs (each is a few statements on a local server).
EXAMPLES = 200


class PostgresBench(Bench):
    """The PostgreSQL store, its rows as reference states, and the database's clock."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.codec = PostgresCodec(store)
        self.examples = EXAMPLES

    async def now_us(self) -> int:
        return await self.codec.now_us()


@pytest.fixture
async def bench(postgres_server: PostgresServer, namespace: str) -> AsyncIterator[PostgresBench]:
    # One connection, made by prepare() before any example: a pool growing while hypothesis
    # draws in its thread uses the random module under it (its jitter), which hypothesis
    # refuses as randomness in a strategy.
    store = PostgresStore.from_url(postgres_server.url, namespace, max_connections=1)
    await store.prepare()
    bench = PostgresBench(store)
    yield bench
    await bench.codec.aclose()
    await store.aclose()


async def test_decide_matches_the_reference(bench: PostgresBench) -> None:
    async def decide(job: str, request: DecideRequest) -> Any:
        return await _decide(bench.store, job, request)

    async def check(case: Case) -> None:
        await bench.check(case, decide, protocol.decide)

    await bench.explore(decide_cases(), check)


async def test_renew_lease_matches_the_reference(bench: PostgresBench) -> None:
    async def renew(job: str, request: RenewRequest) -> Any:
        return await bench.store.renew_lease(job, request)

    async def check(case: Case) -> None:
        await bench.check(case, renew, protocol.renew)

    await bench.explore(renew_cases(), check)


async def test_end_run_matches_the_reference(bench: PostgresBench) -> None:
    async def end(job: str, request: ReleaseRequest) -> Any:
        run_end = _run_end(job, request)
        assert run_end.reference() == request
        return await bench.store.end_run(run_end)

    async def check(case: Case) -> None:
        await bench.check(case, end, protocol.release)

    await bench.explore(release_cases(), check)
