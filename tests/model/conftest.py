"""Fixtures of the models: the protocol model's PostgreSQL schema."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.model.postgres_state import (
    PostgresProtocolModel,
    create_model_schema,
    drop_model_schema,
)
from tests.postgres_server import PostgresServer


@pytest.fixture(scope="session")
def model_postgres(postgres_server: PostgresServer) -> Iterator[type[PostgresProtocolModel]]:
    """The protocol model on a schema of its own, whose clock the model moves."""
    schema = f"model_{os.getpid()}"
    create_model_schema(postgres_server.url, schema)

    class RealPostgresProtocolModel(PostgresProtocolModel):
        url = postgres_server.url

    RealPostgresProtocolModel.schema = schema
    yield RealPostgresProtocolModel
    drop_model_schema(postgres_server.url, schema)
