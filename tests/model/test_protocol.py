"""The protocol model (tests/model/protocol.py) on fakeredis, a real redis-server and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis.stateful import run_state_machine_as_test

from cronrace.stores.redis import make_client
from tests.model.postgres_state import PostgresProtocolModel
from tests.model.profiles import model_settings
from tests.model.protocol import FakeRedisProtocolModel, RedisProtocolModel
from tests.redis_server import RedisServer, redis_available

pytestmark = pytest.mark.model


def test_protocol_model_on_fakeredis() -> None:
    settings = model_settings(examples=60, steps=40)
    run_state_machine_as_test(FakeRedisProtocolModel, settings=settings)


@pytest.fixture(scope="module")
def model_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private server: the model flushes it between examples."""
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path_factory.mktemp("model-redis"), appendonly=False)
    server.start()
    yield server
    server.stop()


@pytest.mark.redis
def test_protocol_model_on_a_real_redis_server(model_redis: RedisServer) -> None:
    class RealRedisProtocolModel(RedisProtocolModel):
        def make_clients(self) -> tuple[Any, Any]:
            return make_client(model_redis.url), redis.Redis.from_url(model_redis.url)

    run_state_machine_as_test(
        RealRedisProtocolModel, settings=model_settings(examples=10, steps=30, real_redis=True)
    )


@pytest.mark.postgres
def test_protocol_model_on_postgresql(model_postgres: type[PostgresProtocolModel]) -> None:
    run_state_machine_as_test(
        model_postgres, settings=model_settings(examples=15, steps=30, real_redis=True)
    )
