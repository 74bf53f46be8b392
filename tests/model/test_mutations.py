"""The mutation harness still bites: a bug put in on purpose makes its machine fail.

The whole table (every mutation against every machine, shrunk) is
``python -m tests.model.mutate`` (tests/model/README.md); these two keep the harness from
rotting, without shrinking: the scheduler model catches a tick fired before its time, the
protocol model a renewal that does not compare the fence, on Redis (Lua) and on
PostgreSQL (SQL, in a schema of its own).
"""

from __future__ import annotations

import os

import pytest

from tests.model.mutate import catch
from tests.model.postgres_state import (
    PostgresProtocolModel,
    create_model_schema,
    drop_model_schema,
    mutate_model_schema,
)
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.model


def test_the_scheduler_model_catches_a_tick_fired_before_its_time() -> None:
    found = catch("fires-early", "scheduler", examples=3, shrink=False)
    assert found.failed
    assert "before its tick" in found.error


def test_the_protocol_model_catches_a_renewal_without_a_fence_check() -> None:
    found = catch("renew-unfenced", "protocol", examples=30, shrink=False)
    assert found.failed
    assert "renewal" in found.error


@pytest.mark.postgres
def test_the_protocol_model_on_postgresql_catches_a_renewal_without_a_fence_check(
    postgres_server: PostgresServer,
) -> None:
    schema = f"model_mutant_{os.getpid()}"
    create_model_schema(postgres_server.url, schema)
    try:
        mutate_model_schema(postgres_server.url, schema, "renew-unfenced")

        class Mutant(PostgresProtocolModel):
            url = postgres_server.url

        Mutant.schema = schema
        found = catch("renew-unfenced", "protocol", examples=30, shrink=False, cls=Mutant)
    finally:
        drop_model_schema(postgres_server.url, schema)
    assert found.failed
    assert "renewal" in found.error
