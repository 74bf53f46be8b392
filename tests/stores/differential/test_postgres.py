"""The PostgreSQL store against the reference: the same state and request, the same reply
and resulting state (the steps of ``runner.py``; the job's rows: ``postgres.py``).

Every example writes a drawn state into a job's rows, calls ``decide()``, ``renew_lease()``
or ``end_run()`` through the store, reads the rows back, and requires the reference's reply
and state, or fails naming each field that differs. The reference runs at the database's
``now_us()`` read just before the example; what a function computes from its clock during
the call is compared within the call's window (``codec.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cronrace.stores.postgres import PostgresStore
from tests.postgres_server import PostgresServer
from tests.stores.differential.postgres import PostgresCodec
from tests.stores.differential.runner import (
    Bench,
    decide_matches_the_reference,
    end_run_matches_the_reference,
    renew_lease_matches_the_reference,
)

pytestmark = pytest.mark.postgres

#: How many examples each test runs (each is a few statements on a local server).
EXAMPLES = 200


@pytest.fixture
async def bench(postgres_server: PostgresServer, namespace: str) -> AsyncIterator[Bench]:
    # One connection, made by prepare() before any example: a pool growing while hypothesis
    # draws in its thread uses the random module under it (its jitter), which hypothesis
    # refuses as randomness in a strategy.
    store = PostgresStore.from_url(postgres_server.url, namespace, max_connections=1)
    await store.prepare()
    codec = PostgresCodec(store)
    yield Bench(store, codec, codec.now_us, EXAMPLES)
    await codec.aclose()
    await store.aclose()


async def test_decide_matches_the_reference(bench: Bench) -> None:
    await decide_matches_the_reference(bench)


async def test_renew_lease_matches_the_reference(bench: Bench) -> None:
    await renew_lease_matches_the_reference(bench)


async def test_end_run_matches_the_reference(bench: Bench) -> None:
    await end_run_matches_the_reference(bench)
